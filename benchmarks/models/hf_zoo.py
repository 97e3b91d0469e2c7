"""A corpus of Hugging Face ``transformers`` architectures at test size, with *default* settings.

GitHub issue 9: magpy must compile transformers models built the way users build them (SDPA
attention where the model has it, default config options, ``use_cache`` as the config says)
to one graph.  ``HF_ZOO`` maps a name to a builder ``() -> (model, args, kwargs)``; the model
is the architecture's *base* class (``GPT2Model``, ``T5Model``, ``CLIPModel``, ...) built with
``Model(config)`` under ``torch.manual_seed(0)`` (random weights, nothing is downloaded), in
eval mode, and is called as ``model(*args, **kwargs)``.  Nothing is wrapped in
``torch.no_grad()``: callers choose the grad mode.  ``SPECS[name]`` says more (family, why
it is in the corpus, whether it is ``fast``); ``FAST`` is the set of fast names.

Sizes: 2 layers (2 encoder + 2 decoder layers for encoder-decoders and DETR; Funnel: 2 blocks
of 1 layer and 1 decoder layer; Swin, SegFormer and the CNNs: 2 stages of 1 block), hidden
16-64, 1-4 attention heads, vocabulary 512, 4k-250k parameters; text inputs are a batch of
2 sequences of 16 tokens whose second row ends in 4 padding tokens (``attention_mask`` 0
there, ids = the pad id), so the masking paths run; encoder-decoders also get
``decoder_input_ids`` ``[2, 8]``; images are ``[1, 3, 32, 32]`` (DETR ``[1, 3, 64, 64]``,
it downsamples by 32); Whisper gets ``input_features`` ``[1, 16, 32]``, Wav2Vec2
``input_values`` ``[1, 400]``.  Every eager forward takes a few milliseconds here.
``batch_one`` cuts the text inputs to their padded row for benchmarks at batch size 1.

Every config option not set in ``SPECS`` keeps transformers' default; the options set there
are sizes (layers, widths, heads, vocabulary, image/patch sizes), and the deviations below,
each needed for the model to be built at this size or to exercise its default path:

* ``attn_implementation`` is never set: ``Model(config)`` picks transformers' default (SDPA
  for every model here that has it; ``SPECS[name].attention`` records what it picked when
  the corpus was written).
* ``use_cache`` is never set: decoder LMs and encoder-decoders return their default
  ``DynamicCache`` / ``EncoderDecoderCache`` in ``past_key_values``; ``plain()`` turns a
  cache into nested dicts of tensors so outputs can be compared.  XLNet returns ``mems``.
* Special token ids are moved into the small vocabulary where the default lies outside it
  and the base model uses it (an ``nn.Embedding`` ``padding_idx`` must be < vocab): Marian
  (pad and decoder-start 58100 -> 1), Phi-3 (pad 32000 -> 0), Whisper (pad/bos/eos/
  decoder-start 50256/50256/50256/50257 -> 1/2/2/3; ``suppress_tokens`` and
  ``begin_suppress_tokens`` emptied: generation-only ids), CLIP's text tower (bos/eos
  49406/49407 -> 510/511: CLIP pools the text at the first eos id, and the example inputs
  end each row with it).  Ids the base model never reads stay as they are (GPT-2's
  bos/eos 50256, Phi-3's eos 32000): transformers logs a warning when building those.
* Head-dimension-derived options follow the small head size: GPT-J ``rotary_dim`` 8 (default
  64 > head dim 16), Gemma/Gemma2 ``head_dim`` 16 (default 256).
* Layer-pattern lists follow the layer count: GPT-Neo ``attention_types`` =
  ``[[["global", "local"], 1]]`` (the default pattern, repeated once instead of 12 times),
  Funnel ``block_sizes`` ``[1, 1]``, the CNN/hierarchical vision models' per-stage lists.
* BigBird: ``block_size`` 2 and ``num_random_blocks`` 1 (defaults 64 and 3) so that 16 tokens
  are more than ``(5 + 2 * num_random_blocks) * block_size`` and the default
  ``block_sparse`` attention really runs (with the defaults, 16 tokens would make BigBird
  switch itself to full attention with a warning, mutating its config).
* DETR: ``backbone_config`` is a small transformers ``ResNetConfig`` (the default is a timm
  ResNet-50: there is no timm here, and no pretrained weights); ``num_queries`` 10.
* Whisper: ``max_source_positions`` 16 (the encoder wants ``input_features`` of length
  ``2 * max_source_positions``: 32 frames instead of 3000), ``num_mel_bins`` 16.
* Wav2Vec2: a 2-layer feature extractor (``conv_dim`` (16, 16), ``conv_kernel`` (10, 3),
  ``conv_stride`` (5, 2) instead of 7 layers), ``num_conv_pos_embeddings`` 16.
* Mixtral: 4 local experts (default 8), 2 per token (the default); transformers' default
  experts implementation (``grouped_mm`` through ``torch.ops.transformers``) is kept.

Architectures that could not be built offline: none (DETR works without timm through its
transformers ResNet backbone).

``fast``: the test-sized eager forward is well under 0.3 s (all take 1-12 ms here) and a
magpy capture is expected to be cheap (measured with backend "eager": 0.1-1.2 s for every
model that captured).  ``fast=False``: Mixtral and BigBird, whose per-expert dispatch and
block-sparse gathers (with numpy plans) are the longest Python paths of the corpus; their
capture cost is not known yet (neither captured when the corpus was written).
``tests/models/test_transformers_models.py`` picks its default (not ``slow``) subset from ``FAST``.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable

import torch
import torch.nn as nn

__all__ = ["HF_ZOO", "SPECS", "FAST", "Spec", "build", "fresh_inputs", "batch_one", "plain", "describe"]

Built = tuple[nn.Module, tuple, dict]
Inputs = tuple[tuple, dict]

VOCAB = 512
BATCH, SEQ, PAD = 2, 16, 4        # text: 2 rows of 16 tokens, the last 4 of row 1 are padding
DECODER_SEQ = 8
IMAGE = 32


# ---------------------------------------------------------------------------------------------
# inputs: one maker per input pattern; each takes the model's config


def _generator(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _ids(vocab: int, shape: tuple[int, ...], g: torch.Generator) -> torch.Tensor:
    """Token ids in ``[3, vocab)``: clear of the usual pad/bos/eos ids 0, 1, 2."""
    return torch.randint(3, vocab, shape, generator=g)


def _pad_id(config) -> int:
    pad = getattr(config, "pad_token_id", None)
    return 0 if pad is None else int(pad)


def text_inputs(config, g: torch.Generator | None = None) -> dict[str, torch.Tensor]:
    """``input_ids`` ``[2, 16]`` and an ``attention_mask`` whose row 1 ends in padding."""
    g = g or _generator()
    input_ids = _ids(config.vocab_size, (BATCH, SEQ), g)
    attention_mask = torch.ones(BATCH, SEQ, dtype=torch.long)
    attention_mask[1, SEQ - PAD:] = 0
    input_ids[1, SEQ - PAD:] = _pad_id(config)
    return {"input_ids": input_ids, "attention_mask": attention_mask}


def _text(config) -> Inputs:
    return (), text_inputs(config)


def _seq2seq(config) -> Inputs:
    """Text plus ``decoder_input_ids`` (teacher forcing: the usual training/scoring call)."""
    g = _generator()
    inputs = text_inputs(config, g)
    vocab = getattr(config, "decoder_vocab_size", None) or config.vocab_size
    inputs["decoder_input_ids"] = _ids(vocab, (BATCH, DECODER_SEQ), g)
    return (), inputs


def _pixels(size: int, g: torch.Generator) -> torch.Tensor:
    return torch.randn(1, 3, size, size, generator=g)


def _image(config) -> Inputs:
    size = getattr(config, "image_size", IMAGE)
    size = size if isinstance(size, int) else IMAGE
    return (), {"pixel_values": _pixels(size, _generator())}


def _detr(config) -> Inputs:
    return (), {"pixel_values": _pixels(64, _generator())}


def _clip(config) -> Inputs:
    """Text ending in the eos id (CLIP pools the text at the first eos), plus an image."""
    g = _generator()
    text = config.text_config
    inputs = text_inputs(text, g)
    for row, length in enumerate(inputs["attention_mask"].sum(-1).tolist()):
        inputs["input_ids"][row, length - 1] = text.eos_token_id
    inputs["pixel_values"] = _pixels(config.vision_config.image_size, g)
    return (), inputs


def _whisper(config) -> Inputs:
    g = _generator()
    frames = 2 * config.max_source_positions
    return (), {"input_features": torch.randn(1, config.num_mel_bins, frames, generator=g),
                "decoder_input_ids": _ids(config.vocab_size, (1, DECODER_SEQ), g)}


def _audio(config) -> Inputs:
    return (), {"input_values": torch.randn(1, 400, generator=_generator())}


# ---------------------------------------------------------------------------------------------
# the corpus


@dataclasses.dataclass(frozen=True)
class Spec:
    """One architecture: ``transformers.<model>(transformers.<config>(**options))``."""
    family: str                       # decoder / encoder-decoder / encoder / vision / multimodal / audio
    model: str                        # base model class name in ``transformers``
    config: str                       # config class name
    options: dict[str, Any]           # config options (sizes; deviations: see the module docstring)
    inputs: Callable[[Any], Inputs]   # config -> (args, kwargs)
    fast: bool = True
    attention: str = "sdpa"           # the attn_implementation transformers picks by default
    why: str = ""                     # what the model exercises beyond its family's common path


_LM = dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
           num_attention_heads=4, max_position_embeddings=128)      # Llama-style decoders
_GQA = dict(_LM, num_key_value_heads=2)
_BERT = dict(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
             intermediate_size=64)                                 # BERT-style encoders
_BART = dict(vocab_size=VOCAB, d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=2,
             decoder_attention_heads=2, encoder_ffn_dim=64, decoder_ffn_dim=64, max_position_embeddings=64)
_VIT = dict(image_size=IMAGE, patch_size=8, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
            intermediate_size=64)

SPECS: dict[str, Spec] = {
    # decoder-only language models
    "gpt2": Spec("decoder", "GPT2Model", "GPT2Config",
                 dict(vocab_size=VOCAB, n_positions=64, n_embd=32, n_layer=2, n_head=2), _text,
                 why="Conv1D projections, learned positions"),
    "gpt_neo": Spec("decoder", "GPTNeoModel", "GPTNeoConfig",
                    dict(vocab_size=VOCAB, max_position_embeddings=64, hidden_size=32, num_layers=2,
                         num_heads=2, attention_types=[[["global", "local"], 1]]), _text,
                    attention="eager", why="alternating global/local (windowed) attention layers"),
    "gptj": Spec("decoder", "GPTJModel", "GPTJConfig",
                 dict(vocab_size=VOCAB, n_positions=64, n_embd=64, n_layer=2, n_head=4, rotary_dim=8),
                 _text, attention="sdpa", why="partial rotary embedding, parallel attention + MLP"),
    "gpt_neox": Spec("decoder", "GPTNeoXModel", "GPTNeoXConfig", _LM, _text,
                     why="fused QKV, partial rotary (rotary_pct 0.25)"),
    "opt": Spec("decoder", "OPTModel", "OPTConfig",
                dict(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, ffn_dim=64, num_attention_heads=2,
                     max_position_embeddings=64, word_embed_proj_dim=32), _text,
                why="positions from the attention mask's cumsum"),
    "bloom": Spec("decoder", "BloomModel", "BloomConfig",
                  dict(vocab_size=VOCAB, hidden_size=32, n_layer=2, n_head=2), _text, attention="eager",
                  why="ALiBi bias built from the attention mask"),
    "llama": Spec("decoder", "LlamaModel", "LlamaConfig", _GQA, _text, why="RoPE, RMSNorm, GQA"),
    "mistral": Spec("decoder", "MistralModel", "MistralConfig", _GQA, _text,
                    why="sliding-window mask machinery"),
    "mixtral": Spec("decoder", "MixtralModel", "MixtralConfig", dict(_GQA, num_local_experts=4),
                    _text, fast=False, why="sparse mixture of experts (top-2 routing)"),
    "qwen2": Spec("decoder", "Qwen2Model", "Qwen2Config", _GQA, _text, why="QKV bias"),
    "qwen3": Spec("decoder", "Qwen3Model", "Qwen3Config", dict(_GQA, head_dim=16), _text,
                  why="q/k RMSNorm"),
    "phi": Spec("decoder", "PhiModel", "PhiConfig", _LM, _text,
                why="partial rotary, parallel attention + MLP, LayerNorm"),
    "phi3": Spec("decoder", "Phi3Model", "Phi3Config", dict(_GQA, pad_token_id=0), _text,
                 why="fused QKV and gate/up projections"),
    "gemma": Spec("decoder", "GemmaModel", "GemmaConfig", dict(_GQA, head_dim=16), _text,
                  why="scaled embeddings, (1 + w) RMSNorm"),
    "gemma2": Spec("decoder", "Gemma2Model", "Gemma2Config", dict(_GQA, head_dim=16), _text,
                   attention="eager", why="logit soft-capping, alternating sliding/full layers"),
    "falcon": Spec("decoder", "FalconModel", "FalconConfig",
                   dict(vocab_size=VOCAB, hidden_size=64, num_hidden_layers=2, num_attention_heads=4),
                   _text, why="multi-query attention, parallel attention + MLP"),
    # encoder-decoders
    "t5": Spec("encoder-decoder", "T5Model", "T5Config",
               dict(vocab_size=VOCAB, d_model=32, d_kv=16, d_ff=64, num_layers=2, num_heads=2), _seq2seq,
               why="relative position buckets, cross-attention"),
    "bart": Spec("encoder-decoder", "BartModel", "BartConfig", _BART, _seq2seq),
    "marian": Spec("encoder-decoder", "MarianModel", "MarianConfig",
                   dict(_BART, pad_token_id=1, decoder_start_token_id=1), _seq2seq,
                   why="sinusoidal positions, scaled embeddings"),
    "pegasus": Spec("encoder-decoder", "PegasusModel", "PegasusConfig", _BART, _seq2seq,
                    why="pre-norm BART variant, sinusoidal positions"),
    "whisper": Spec("encoder-decoder", "WhisperModel", "WhisperConfig",
                    dict(_BART, num_mel_bins=16, max_source_positions=16, max_target_positions=64,
                         pad_token_id=1, bos_token_id=2, eos_token_id=2, decoder_start_token_id=3,
                         suppress_tokens=[], begin_suppress_tokens=[]), _whisper,
                    why="conv audio front end"),
    # encoders
    "bert": Spec("encoder", "BertModel", "BertConfig", _BERT, _text),
    "roberta": Spec("encoder", "RobertaModel", "RobertaConfig", _BERT, _text,
                    why="positions from input_ids != pad"),
    "albert": Spec("encoder", "AlbertModel", "AlbertConfig", dict(_BERT, embedding_size=16), _text,
                   why="shared layer weights, factorised embeddings"),
    "distilbert": Spec("encoder", "DistilBertModel", "DistilBertConfig",
                       dict(vocab_size=VOCAB, dim=32, n_layers=2, n_heads=2, hidden_dim=64), _text),
    "electra": Spec("encoder", "ElectraModel", "ElectraConfig", dict(_BERT, embedding_size=16), _text),
    "deberta_v2": Spec("encoder", "DebertaV2Model", "DebertaV2Config", _BERT, _text, attention="eager",
                       why="DeBERTa-v2 defaults (no relative attention by default)"),
    "xlnet": Spec("encoder", "XLNetModel", "XLNetConfig",
                  dict(vocab_size=VOCAB, d_model=32, n_layer=2, n_head=2, d_inner=64), _text,
                  attention="eager", why="two-stream relative attention, mems output"),
    "funnel": Spec("encoder", "FunnelModel", "FunnelConfig",
                   dict(vocab_size=VOCAB, block_sizes=[1, 1], num_decoder_layers=1, d_model=32, n_head=2,
                        d_head=16, d_inner=64), _text, attention="eager",
                   why="sequence pooling between blocks, upsampling decoder"),
    "mobilebert": Spec("encoder", "MobileBertModel", "MobileBertConfig",
                       dict(_BERT, hidden_size=64, embedding_size=16, intra_bottleneck_size=32,
                            true_hidden_size=32, num_feedforward_networks=2), _text,
                       why="bottlenecks, trigram input, NoNorm"),
    "big_bird": Spec("encoder", "BigBirdModel", "BigBirdConfig",
                     dict(_BERT, block_size=2, num_random_blocks=1), _text, fast=False, attention="eager",
                     why="block-sparse attention"),
    # vision and multimodal
    "vit": Spec("vision", "ViTModel", "ViTConfig", _VIT, _image),
    "deit": Spec("vision", "DeiTModel", "DeiTConfig", _VIT, _image, why="distillation token"),
    "swin": Spec("vision", "SwinModel", "SwinConfig",
                 dict(image_size=IMAGE, patch_size=4, embed_dim=16, depths=[1, 1], num_heads=[2, 2],
                      window_size=4), _image, why="shifted windows, patch merging"),
    "convnext": Spec("vision", "ConvNextModel", "ConvNextConfig",
                     dict(image_size=IMAGE, num_stages=2, hidden_sizes=[16, 32], depths=[1, 1]), _image,
                     attention="eager", why="depthwise convs, channels-last LayerNorm"),
    "resnet": Spec("vision", "ResNetModel", "ResNetConfig",
                   dict(embedding_size=16, hidden_sizes=[16, 32], depths=[1, 1]), _image, attention="eager",
                   why="bottleneck CNN with BatchNorm"),
    "segformer": Spec("vision", "SegformerModel", "SegformerConfig",
                      dict(num_encoder_blocks=2, depths=[1, 1], sr_ratios=[2, 1], hidden_sizes=[16, 32],
                           patch_sizes=[7, 3], strides=[4, 2], num_attention_heads=[1, 2], mlp_ratios=[2, 2]),
                      _image, why="overlapping patch embeddings, reduced-key attention"),
    "detr": Spec("vision", "DetrModel", "DetrConfig",
                 dict(backbone_config=dict(model_type="resnet", embedding_size=16, hidden_sizes=[16, 32],
                                           depths=[1, 1], out_features=["stage2"]),
                      d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=2,
                      decoder_attention_heads=2, encoder_ffn_dim=64, decoder_ffn_dim=64, num_queries=10),
                 _detr, why="CNN backbone + pixel mask, sine positions, object queries"),
    "clip": Spec("multimodal", "CLIPModel", "CLIPConfig",
                 dict(text_config=dict(_BERT, max_position_embeddings=64, bos_token_id=VOCAB - 2,
                                       eos_token_id=VOCAB - 1),
                      vision_config=dict(_VIT), projection_dim=32), _clip,
                 why="two towers, causal text mask, argmax pooling on eos ids"),
    "wav2vec2": Spec("audio", "Wav2Vec2Model", "Wav2Vec2Config",
                     dict(_BERT, conv_dim=(16, 16), conv_kernel=(10, 3), conv_stride=(5, 2),
                          num_conv_pos_embeddings=16, num_conv_pos_embedding_groups=2), _audio,
                     why="conv feature extractor, grouped positional conv"),
}


# ---------------------------------------------------------------------------------------------
# building


def build(name: str) -> Built:
    """Build ``SPECS[name]``: ``(model in eval mode, args, kwargs)``; deterministic."""
    import transformers

    spec = SPECS[name]
    config = getattr(transformers, spec.config)(**spec.options)
    torch.manual_seed(0)
    model = getattr(transformers, spec.model)(config).eval()
    args, kwargs = spec.inputs(model.config)
    return model, args, kwargs


def _builder(name: str) -> Callable[[], Built]:
    def build_model() -> Built:
        return build(name)
    build_model.__name__ = f"build_{name}"
    build_model.__doc__ = f"{SPECS[name].model}, test size (see ``hf_zoo.SPECS[{name!r}]``)."
    return build_model


HF_ZOO: dict[str, Callable[[], Built]] = {name: _builder(name) for name in SPECS}
FAST: frozenset[str] = frozenset(name for name, spec in SPECS.items() if spec.fast)


# ---------------------------------------------------------------------------------------------
# helpers for callers: fresh inputs, comparable outputs


def fresh_inputs(args: tuple, kwargs: dict, seed: int = 1) -> Inputs:
    """New inputs of the same shapes and dtypes, as a second batch of real data would be.

    Floating tensors are re-drawn from N(0, 1); integer tensors with values above 1 (token
    ids) are re-drawn uniformly within their original ``[min, max]`` (so they stay in the
    vocabulary, pad ids included); 0/1 tensors (masks, token types) are kept, copied."""
    g = _generator(seed)

    def new(t):
        if not isinstance(t, torch.Tensor):
            return t
        if t.dtype.is_floating_point:
            return torch.randn(t.shape, generator=g, dtype=t.dtype)
        if t.numel() and t.dtype != torch.bool and int(t.max()) > 1:
            return torch.randint(int(t.min()), int(t.max()) + 1, t.shape, generator=g, dtype=t.dtype)
        return t.clone()
    return tuple(new(a) for a in args), {k: new(v) for k, v in kwargs.items()}


def batch_one(args: tuple, kwargs: dict) -> Inputs:
    """The inputs at batch size 1, for benchmarks: tensors with a batch of 2 (text) keep their
    last row, the padded one, so the masking path still runs; batch-1 tensors are unchanged."""
    def cut(t):
        return t[-1:] if isinstance(t, torch.Tensor) and t.dim() and t.shape[0] == BATCH else t
    return tuple(cut(a) for a in args), {k: cut(v) for k, v in kwargs.items()}


def plain(out: Any, _depth: int = 0) -> Any:
    """``out`` with every object that is not a tensor, container or scalar (a ``Cache`` and its
    layers, ...) replaced by ``{"__class__": name, **its attributes}``, recursively.

    ``benchmarks.run.compare`` walks tensors, tuples, lists, mappings (``ModelOutput``) and
    dataclasses, and compares anything else with ``==``; a ``DynamicCache`` has no ``==``, so
    two caches holding equal tensors would differ.  After ``plain`` they compare by their
    tensors (and their class names, so a cache of another class still differs)."""
    if _depth > 12:
        return repr(out)
    if isinstance(out, (torch.Tensor, str, bytes, int, float, complex, bool, type(None), torch.dtype,
                        torch.device, torch.Size)):
        return out
    if isinstance(out, dict):  # ModelOutput too: keep its class, convert its values
        return _rebuild_mapping(out, {k: plain(v, _depth + 1) for k, v in out.items()})
    if isinstance(out, (tuple, list)):
        items = [plain(v, _depth + 1) for v in out]
        if isinstance(out, tuple) and hasattr(out, "_fields"):
            return type(out)(*items)
        return type(out)(items)
    if dataclasses.is_dataclass(out) and not isinstance(out, type):
        return {"__class__": type(out).__qualname__,
                **{f.name: plain(getattr(out, f.name), _depth + 1) for f in dataclasses.fields(out)}}
    if hasattr(out, "__dict__") and not isinstance(out, (nn.Module, type)) and not callable(out):
        return {"__class__": type(out).__qualname__,
                **{k: plain(v, _depth + 1) for k, v in vars(out).items() if not k.startswith("__")}}
    return out


def _rebuild_mapping(original: dict, values: dict) -> dict:
    """A mapping of ``original``'s class with ``values`` (a ``ModelOutput`` keeps its class)."""
    cls = type(original)
    if cls is dict:
        return values
    try:
        return cls(**values)
    except Exception:  # a mapping class that cannot be rebuilt from keywords
        return {"__class__": cls.__qualname__, **values}


def describe(args: tuple, kwargs: dict) -> str:
    """``"input_ids[2, 16] attention_mask[2, 16]"``: the example inputs' names and shapes."""
    parts = [f"arg{i}{list(a.shape)}" for i, a in enumerate(args) if isinstance(a, torch.Tensor)]
    parts += [f"{k}{list(v.shape)}" for k, v in kwargs.items() if isinstance(v, torch.Tensor)]
    return " ".join(parts)
