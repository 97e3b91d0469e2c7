"""Randomly initialised Hugging Face ``transformers`` models built from configs.

Nothing is downloaded: every model is built with ``Model(config)`` under
``torch.manual_seed(0)``, and the example inputs come from a ``torch.Generator`` seeded
with 0.  Every builder returns ``(model_in_eval_mode, example_inputs_dict)``.

Attention implementation: ``"eager"`` (the explicit matmul/softmax/matmul Python code)
for all three models.  Only BERT also offers ``"sdpa"`` on CPU (``bert(size,
attn_implementation="sdpa")``; it is transformers' default for BertModel); in
transformers 5.x ``AlignModel`` raises ValueError for ``"sdpa"`` and DeBERTa-v2's
disentangled attention has only the eager code path.

Inputs: ``input_ids`` uniform over ``[1, vocab_size)`` (0 is the pad id), and an
``attention_mask`` whose last ``seq_len // 8`` positions are padding (zeros), so the
masking path is exercised.  ALIGN also gets ``pixel_values`` ~ N(0, 1), and its vision
tower's BatchNorm statistics are calibrated on them (see ``align``).

Sizes (batch size 1 everywhere):

=============  ======  ======  =====  =====  ========================================================
model / size   layers  hidden  heads  seq    notes
=============  ======  ======  =====  =====  ========================================================
bert test      2       32      2      16
bert bench     6       384     6      256    Table 1 text length 256
bert bench12   12      384     6      128    12-layer BERT (BERT-base depth, BERT-small-ish width)
deberta test   2       32      2      16     relative attention, c2p|p2c, 8 position buckets
deberta bench  4       384     6      256    Table 1 text length 256; 256 buckets (as v3)
align test     2       32      2      16     EfficientNet-B0 layout at width/depth 0.25, 64x64
align bench    6       384     6      64     text 64; image 289x289, EfficientNet-B0 layout
                                             (width/depth 1.0; ALIGN's B7 is 2.0/3.1, and
                                             its BERT-base 12/768, both far over 100 ms here)
=============  ======  ======  =====  =====  ========================================================

See ``benchmarks/zoo_timing.py`` for the measured eager forward times.
"""
from __future__ import annotations

import torch

from ._utils import calibrate_batchnorm

__all__ = ["bert", "deberta_v2", "align", "SIZES"]

# name -> (num_layers, hidden, heads, intermediate, seq_len)
_TEXT_SIZES = {
    "bert": {
        "test": (2, 32, 2, 64, 16),
        "bench": (6, 384, 6, 1536, 256),
        "bench12": (12, 384, 6, 1536, 128),
    },
    "deberta_v2": {
        "test": (2, 32, 2, 64, 16),
        "bench": (4, 384, 6, 1536, 256),
    },
    "align": {
        "test": (2, 32, 2, 64, 16),
        "bench": (6, 384, 6, 1536, 64),
    },
}
SIZES = {name: tuple(sizes) for name, sizes in _TEXT_SIZES.items()}

# ALIGN vision tower (EfficientNet): size -> (image_size, width_coefficient, depth_coefficient)
_ALIGN_VISION = {
    "test": (64, 0.25, 0.25),
    "bench": (289, 1.0, 1.0),
}

_VOCAB = 1024  # small vocabulary: embedding-table size does not matter for these benchmarks


def _text_size(family: str, size: str):
    try:
        return _TEXT_SIZES[family][size]
    except KeyError:
        raise ValueError("unknown size %r for %s; choose one of %s"
                         % (size, family, sorted(_TEXT_SIZES[family]))) from None


def _text_inputs(seq_len: int, vocab_size: int, batch_size: int = 1) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    input_ids = torch.randint(1, vocab_size, (batch_size, seq_len), generator=g)
    attention_mask = torch.ones(batch_size, seq_len, dtype=torch.long)
    pad = seq_len // 8
    if pad:
        attention_mask[:, seq_len - pad:] = 0
        input_ids[:, seq_len - pad:] = 0
    return {"input_ids": input_ids, "attention_mask": attention_mask}


def bert(size: str = "test", attn_implementation: str = "eager"):
    """``BertModel`` (with pooler).  Output: ``BaseModelOutputWithPoolingAndCrossAttentions``
    (``last_hidden_state`` ``[1, seq, hidden]``, ``pooler_output`` ``[1, hidden]``)."""
    from transformers import BertConfig, BertModel

    layers, hidden, heads, inter, seq = _text_size("bert", size)
    config = BertConfig(
        vocab_size=_VOCAB, hidden_size=hidden, num_hidden_layers=layers,
        num_attention_heads=heads, intermediate_size=inter,
        max_position_embeddings=max(512, seq), type_vocab_size=2,
        attn_implementation=attn_implementation,
    )
    torch.manual_seed(0)
    model = BertModel(config).eval()
    return model, _text_inputs(seq, config.vocab_size)


def deberta_v2(size: str = "test"):
    """``DebertaV2Model`` in the DeBERTa-v3 layout (relative attention with log buckets,
    ``c2p|p2c`` disentangled attention, shared attention keys, no absolute positions).
    Output: ``BaseModelOutput`` (``last_hidden_state`` ``[1, seq, hidden]``)."""
    from transformers import DebertaV2Config, DebertaV2Model

    layers, hidden, heads, inter, seq = _text_size("deberta_v2", size)
    config = DebertaV2Config(
        vocab_size=_VOCAB, hidden_size=hidden, num_hidden_layers=layers,
        num_attention_heads=heads, intermediate_size=inter,
        max_position_embeddings=512, type_vocab_size=0,
        relative_attention=True, position_buckets=8 if size == "test" else 256,
        max_relative_positions=-1, norm_rel_ebd="layer_norm", share_att_key=True,
        pos_att_type=["p2c", "c2p"], position_biased_input=False,
        layer_norm_eps=1e-7, attn_implementation="eager",
    )
    torch.manual_seed(0)
    model = DebertaV2Model(config).eval()
    return model, _text_inputs(seq, config.vocab_size)


def align(size: str = "test"):
    """``AlignModel``: BERT text tower + EfficientNet vision tower, contrastive logits.
    Output: ``AlignOutput`` (``logits_per_image`` ``[1, 1]``, ``logits_per_text``,
    ``text_embeds``/``image_embeds`` ``[1, projection_dim]``, and the two tower outputs).

    The projection dimension must equal the channel count of the vision tower's last
    block (ALIGN has no image projection), so it is derived from the vision config."""
    from transformers import AlignConfig, AlignModel, AlignTextConfig, AlignVisionConfig

    layers, hidden, heads, inter, seq = _text_size("align", size)
    image_size, width_coef, depth_coef = _ALIGN_VISION[size]
    text_config = AlignTextConfig(
        vocab_size=_VOCAB, hidden_size=hidden, num_hidden_layers=layers,
        num_attention_heads=heads, intermediate_size=inter, max_position_embeddings=512,
    )
    vision_config = AlignVisionConfig(
        image_size=image_size, width_coefficient=width_coef, depth_coefficient=depth_coef,
    )
    # Same rounding as transformers' round_filters: channels of the last vision block.
    divisor = vision_config.depth_divisor
    c = vision_config.out_channels[-1] * width_coef
    proj = max(divisor, int(c + divisor / 2) // divisor * divisor)
    if proj < 0.9 * c:
        proj += divisor
    # AlignConfig takes keyword arguments only; AlignModel refuses "sdpa" (eager only).
    config = AlignConfig(text_config=text_config.to_dict(),
                         vision_config=vision_config.to_dict(), projection_dim=int(proj),
                         attn_implementation="eager")
    torch.manual_seed(0)
    model = AlignModel(config).eval()

    inputs = _text_inputs(seq, text_config.vocab_size)
    g = torch.Generator().manual_seed(1)
    inputs["pixel_values"] = torch.randn(1, 3, image_size, image_size, generator=g)
    # With transformers' init (conv std 0.02) and default BatchNorm statistics the image
    # features vanish (~1e-28) and their L2 normalization gives NaN: calibrate the
    # BatchNorm statistics on the example image (one pass, only BatchNorms in train mode).
    calibrate_batchnorm(model.vision_model, pixel_values=inputs["pixel_values"])
    return model.eval(), inputs
