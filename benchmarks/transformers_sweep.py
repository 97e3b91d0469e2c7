"""Where does magpy break on transformers architectures outside the zoo?

    HF_HUB_OFFLINE=1 python -m benchmarks.transformers_sweep [--models mamba,olmo] [--timeout 120]
                                                            [--limit N] [--json PATH]

``benchmarks.models.hf_zoo`` hand-sizes 40 base models; this sweep takes every other model type of
transformers' auto mappings (``MODEL_MAPPING_NAMES``: the base model of each architecture) and
builds it from its *default* config shrunk to a tiny size by :func:`shrink` (layers 2, hidden 64,
4 heads of 16, feed-forward 64, vocabulary 512 with out-of-range special ids moved to its top,
at most 4 experts and 2 per token, images 32x32 with patches of 8, per-stage lists of
hierarchical vision models cut to one block per stage and narrow widths, audio conv front ends
cut to 2 layers; nested sub-configs shrunk the same way).  The model is built under
``torch.manual_seed(0)`` in eval mode; nothing is downloaded (``HF_HUB_OFFLINE=1``).

Inputs come from the model's forward signature (:func:`candidate_inputs`): text (``input_ids``
``[2, 16]`` whose second row ends in 4 padding tokens, its ``attention_mask``, the eos id at the
end of each row), ``decoder_input_ids`` ``[2, 8]``, ``pixel_values`` ``[1, C, 32, 32]``,
``input_values`` ``[1, 1600]``, ``input_features`` in both layouts; the first candidate whose
eager forward runs (on these inputs and on ``hf_zoo.fresh_inputs``, twice each to find models
that are not deterministic in eval mode) is used.  A model type whose config or model cannot be
built (a missing optional library such as timm, a config this shrinking breaks), whose eager
forward fails on every candidate, or takes over 5 s, is *skipped* with the reason: a limit of
the sweep, not a magpy finding.

Every model that runs eagerly is compiled with ``magpy.compile(model, backend="eager")`` (the
default, not ``fullgraph``) and checked exactly as ``benchmarks.transformers_survey`` does
(its ``_run``: first, repeated and fresh calls, each compared with eager, in ``no_grad`` and
``grad`` modes, a fresh model and compile per mode), with ``magpy.config.verify_fast_guard``
on, a per-model time limit, warnings caught and ``magpy.reset()`` between models.  Each model
gets one verdict, worst first:

* ``CRASH``: magpy raised where eager did not (the first line and the raising frame are kept);
* ``WRONG``: a call's result differs from eager's (``NONDET`` instead if eager itself is not
  repeatable on those inputs);
* ``TIMEOUT``: the three calls did not finish within ``--timeout`` seconds;
* ``FALLBACK``: magpy's capture failed and it ran the call eagerly (``on_capture_error`` is
  "fallback": a magpy error the user does not see but pays for);
* ``BREAK``: graph breaks or eager runs (the break reasons of ``magpy.stats``);
* ``GUARD_MISS``: more monitor runs than the one first call (re-records);
* ``ONE_GRAPH``: one graph, correct, in both modes.

The table has one row per model, then a summary groups the models by verdict and reason.
``--json`` writes every result (tracebacks included) after each model, so an interrupted sweep
keeps what it did; ``--resume`` skips the models already in that file.

Last run (torch 2.13.0, transformers 5.24.0, Python 3.11, one thread; 900 s wall): 582 model types
tried, 511 built (71 not: 21 configs and 32 models this shrinking or transformers' defaults break,
18 needing timm/natten/torchaudio/detectron2), 368 ran eagerly on the generated inputs and were
compiled; 328 one graph and correct in both modes, 2 one graph whose eager run draws random
numbers (NONDET), 17 BREAK, 19 GUARD_MISS (all ``ACT2FN["silu"]``), 2 FALLBACK (vilt, fastspeech2
-conformer), no WRONG, CRASH or TIMEOUT.  ``sweep_repros/`` reduces each finding (README there).
"""
from __future__ import annotations

import argparse
import contextlib
import dataclasses
import gc
import inspect
import json
import logging
import os
import re
import signal
import sys
import time
import traceback
import warnings
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

if __package__ in (None, ""):  # run as `python benchmarks/transformers_sweep.py`
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402

import magpy  # noqa: E402
from benchmarks.models import hf_zoo  # noqa: E402
from benchmarks.run import compare  # noqa: E402
from benchmarks.transformers_survey import MODES, ModeResult, _first_line, _run, _short_path  # noqa: E402

VOCAB = 512
RESERVED = 16            # the top ids of the vocabulary: special ids moved into range; inputs avoid them
HIDDEN, HEADS, HEAD_DIM, FFN, LAYERS = 64, 4, 16, 64, 2
IMAGE, PATCH = 32, 8
AUDIO_SAMPLES = 1600
EAGER_LIMIT_S = 5.0

# Families the brief asks for first (popular ones): run before the rest, alphabetical.
PRIORITY = """
qwen2_moe qwen3_moe olmo olmo2 olmoe cohere cohere2 stablelm starcoder2 granite granitemoe mpt codegen
gpt_bigcode persimmon recurrent_gemma mamba mamba2 jamba falcon_mamba rwkv gemma3_text glm glm4 helium
ministral smollm3 nemotron exaone4 biogpt ctrl xglm openai-gpt diffllama zamba bamba falcon_h1 dbrx
jetmoe deepseek_v2 deepseek_v3 minimax phimoe gpt_oss
xlm-roberta camembert layoutlm canine longformer reformer nystromformer mpnet squeezebert ernie roformer
luke ibert convbert deberta data2vec-text esm flaubert xlm megatron-bert rembert roc_bert xmod yoso mra
fnet splinter tapas lilt markuplm bros nomic_bert modernbert eurobert
mt5 longt5 mbart blenderbot blenderbot-small led prophetnet m2m_100 nllb-moe switch_transformers umt5
plbart fsmt mvp bigbird_pegasus pegasus_x
beit dinov2 dinov2_with_registers convnextv2 efficientnet mobilenet_v1 mobilenet_v2 mobilevit mobilevitv2
regnet poolformer levit pvt pvt_v2 swinv2 focalnet dpt bit cvt dinat data2vec-vision vit_mae vit_msn
ijepa yolos hiera hgnet_v2 swiftformer glpn
hubert wavlm sew sew-d data2vec-audio unispeech unispeech-sat speech_to_text wav2vec2-conformer
wav2vec2-bert audio-spectrogram-transformer moonshine
blip siglip siglip2 owlvit owlv2 flava chinese_clip altclip groupvit clipseg blip-2 x_clip vilt
""".split()

# Optional libraries whose absence a build error names; a model needing one is skipped as "needs X".
_NEEDS = ("timm", "torchvision", "detectron2", "natten", "pytesseract", "scipy", "sentencepiece",
          "librosa", "torchaudio", "mamba_ssm", "causal_conv1d", "einops", "accelerate", "pandas",
          "soundfile", "av", "decord", "protobuf", "spacy", "ftfy", "phonemizer", "essentia", "pretty_midi",
          "levenshtein", "g2p_en", "kenlm", "pyctcdecode", "fla", "flash_attn", "tokenizers", "PIL")


# ---------------------------------------------------------------------------------------------
# shrinking a default config


_LAYER_KEYS = {"num_hidden_layers", "num_layers", "n_layer", "n_layers", "encoder_layers", "decoder_layers",
               "num_encoder_layers", "num_decoder_layers", "text_layers", "vision_layers",
               "num_hidden_layers_decoder", "num_text_layers", "num_vision_layers", "depth"}
_HIDDEN_KEYS = {"hidden_size", "d_model", "n_embd", "embed_dim", "embedding_dim", "hidden_dim_model",
                "word_embed_proj_dim", "text_hidden_size", "vision_hidden_size", "projection_dim",
                "projection_size", "proj_dim", "image_text_hidden_size", "text_embed_dim",
                "vision_embed_dim", "dim"}
_EMBED_KEYS = {"embedding_size"}   # factorised embeddings (ALBERT-style): narrower than hidden
_HEAD_KEYS = {"num_attention_heads", "n_head", "n_heads", "num_heads", "encoder_attention_heads",
              "decoder_attention_heads", "attention_heads"}
_KV_KEYS = {"num_key_value_heads", "num_kv_heads", "n_kv_heads", "multi_query_group_num",
            "encoder_num_key_value_heads", "decoder_num_key_value_heads"}
_HEAD_DIM_KEYS = {"head_dim", "d_kv", "kv_channels", "attention_head_size", "d_head", "attention_head_dim",
                  "qk_nope_head_dim", "v_head_dim"}
_SMALL_DIM_KEYS = {"qk_rope_head_dim": 8, "rotary_dim": 8, "q_lora_rank": 32, "kv_lora_rank": 32,
                   "rotary_emb_dim": 8, "index_head_dim": 16, "index_n_heads": 2, "state_size": 16,
                   "ssm_state_size": 16, "mamba_d_state": 16, "d_state": 16, "time_step_rank": 8,
                   "mamba_n_heads": 4, "mamba_d_head": 16, "mamba_head_dim": 16, "n_groups": 1,
                   "mamba_n_groups": 1, "lru_width": 64, "block_size": 16,
                   "chunk_size": 16, "mamba_chunk_size": 16,
                   "num_query_tokens": 4, "max_2d_position_embeddings": 128,
                   "max_source_positions": 64, "max_target_positions": 64, "num_codebooks": 2}
_FFN_KEYS = {"intermediate_size", "ffn_dim", "encoder_ffn_dim", "decoder_ffn_dim", "d_ff", "d_inner",
             "n_inner", "moe_intermediate_size", "shared_expert_intermediate_size",
             "expert_intermediate_size", "ffn_hidden_size", "mlp_dim", "dim_feedforward",
             "encoder_ffn_dim_vision", "mlp_hidden_size", "moe_ffn_hidden_size", "intermediate_size_mlp",
             "ff_dim"}
_EXPERT_KEYS = {"num_local_experts", "num_experts", "n_routed_experts", "moe_num_experts",
                "num_experts_total"}
_TOPK_KEYS = {"num_experts_per_tok", "top_k", "moe_topk", "moe_k", "num_selected_experts", "moe_top_k",
              "num_experts_per_token", "topk_group", "n_group"}
_POSITION_KEYS = {"max_position_embeddings", "n_positions", "n_ctx", "max_seq_len", "max_sequence_length",
                  "seq_length"}
_WIDTH_LIST_KEYS = {"hidden_sizes", "embed_dims", "hidden_dims", "dims", "embed_dim", "channels",
                    "neck_hidden_sizes", "stage_out_channels", "widths"}
_HEAD_LIST_KEYS = {"num_heads", "num_attention_heads", "heads"}
# Per-architecture options on top of shrink(): what its layer pattern or a size relation needs at this size.
EXTRA: dict[str, dict] = {
    "jamba": dict(attn_layer_period=2, attn_layer_offset=1, expert_layer_period=2, expert_layer_offset=1),
    "recurrent_gemma": dict(num_hidden_layers=3),   # block_types recurrent, recurrent, attention
    # hybrids whose default (or 2-layer) pattern has no attention layer, which their cache needs
    "bamba": dict(attn_layer_indices=[1]),
    "granitemoehybrid": dict(layer_types=["linear_attention", "attention"]),
    "reformer": dict(axial_pos_embds_dim=[32, 32], axial_pos_shape=[4, 4], max_position_embeddings=16,
                     local_attn_chunk_length=4, lsh_attn_chunk_length=4, num_buckets=4),
    "mobilevitv2": dict(image_size=64),
    "esm": dict(pad_token_id=1, mask_token_id=4),    # defaults None, read by the embeddings
    "bit": dict(num_groups=8),                       # group norm over the narrow widths
    "audio-spectrogram-transformer": dict(max_length=64, patch_size=8, frequency_stride=8, time_stride=8),
}
_ID_KEY = re.compile(r".*_(token_id|token_ids|token_index|id)$")


def shrink(defaults: dict) -> dict:
    """The config options that make ``defaults`` (a config's ``to_dict()``) tiny.

    Returns only the options to pass to the config class (so its ``__init__`` recomputes what
    derives from them, such as ``layer_types``); an option is only ever made smaller, and one
    whose default is not an int (None, a float, a bool) is left alone.  Nested sub-configs (a
    dict with a ``model_type``) are shrunk the same way and passed as dicts with their model
    type.  Special token ids at or above the new vocabulary are moved to its top
    ``RESERVED`` ids (one id per distinct value)."""
    out: dict = {}

    def small(key, target):
        v = defaults.get(key)
        if isinstance(v, int) and not isinstance(v, bool) and v > target:
            out[key] = target

    hierarchical = isinstance(defaults.get("depths"), (list, tuple))
    for key in _LAYER_KEYS:
        if not (key == "depth" and hierarchical):
            small(key, LAYERS)
    heads = defaults.get("num_attention_heads", defaults.get("num_heads", defaults.get("n_head")))
    for key in _HEAD_KEYS:
        small(key, HEADS)
    mla = "qk_rope_head_dim" in defaults   # DeepSeek-style latent attention: head_dim derives from it
    if not hierarchical:
        for key in _HIDDEN_KEYS:
            small(key, HIDDEN)
        for key in _HEAD_DIM_KEYS:
            if not (mla and key == "head_dim"):
                small(key, HEAD_DIM)
    else:
        small("embed_dim", 16)
        small("hidden_size", 16 * 2 ** (len(defaults["depths"]) - 1))
    for key in _EMBED_KEYS:
        # factorised embeddings stay narrower than hidden; ones as wide as hidden stay as wide
        same = defaults.get(key) == defaults.get("hidden_size") and "hidden_size" in out
        small(key, out["hidden_size"] if same else 32)
    new_heads = out.get("num_attention_heads", heads if isinstance(heads, int) else HEADS)
    for key in _KV_KEYS:
        v = defaults.get(key)
        if isinstance(v, int) and not isinstance(v, bool) and v > 1:
            # keep the kind of attention: grouped stays grouped (2 of 4), full stays full
            out[key] = new_heads if isinstance(heads, int) and v >= heads else min(2, new_heads)
    for key, target in _SMALL_DIM_KEYS.items():
        small(key, target)
    # options left None that the modeling code of some architectures reads as numbers
    hidden, n_heads = out.get("hidden_size", defaults.get("hidden_size")), out.get("num_attention_heads")
    if "head_dim" in defaults and defaults["head_dim"] is None and not mla and isinstance(hidden, int) \
            and isinstance(n_heads, int):
        out["head_dim"] = hidden // n_heads
    if "num_key_value_heads" in defaults and defaults["num_key_value_heads"] is None \
            and isinstance(n_heads, int):
        out["num_key_value_heads"] = n_heads
    if "vocab_size" in defaults and defaults["vocab_size"] is None:
        out["vocab_size"] = VOCAB
    if defaults.get("num_experts_per_tok", 0) is None and any(k in defaults for k in _EXPERT_KEYS):
        out["num_experts_per_tok"] = 2
    # Mamba-2 heads: num_heads * head_dim must equal expand * hidden_size
    for expand, heads_key, dim_key in (("expand", "num_heads", "head_dim"),
                                       ("mamba_expand", "mamba_n_heads", "mamba_d_head")):
        if all(k in defaults for k in (expand, heads_key, dim_key)) and isinstance(defaults[expand], int) \
                and isinstance(hidden, int) and ("state_size" in defaults or expand == "mamba_expand"):
            out[dim_key] = 16
            out[heads_key] = defaults[expand] * hidden // 16
            if isinstance(defaults.get("mamba_d_ssm"), int):
                out["mamba_d_ssm"] = out[heads_key] * 16
    for key in _FFN_KEYS:
        small(key, FFN)
    for key in _EXPERT_KEYS:
        small(key, 4)
    for key in _TOPK_KEYS:
        small(key, 2 if key not in ("topk_group", "n_group") else 1)
    for key in _POSITION_KEYS:
        small(key, 128)

    # vocabulary and special ids
    vocab = defaults.get("vocab_size")
    if isinstance(vocab, int) and vocab > VOCAB:
        out["vocab_size"] = vocab = VOCAB
    for key in ("text_vocab_size", "decoder_vocab_size", "target_vocab_size", "output_vocab_size"):
        small(key, VOCAB)
    if isinstance(vocab, int):
        moved: dict[int, int] = {}

        def move(i):
            if not isinstance(i, int) or isinstance(i, bool) or i < vocab:
                return i
            return moved.setdefault(i, vocab - 1 - len(moved) % RESERVED)
        for key, v in sorted(defaults.items()):
            if _ID_KEY.match(key) and not key.endswith("model_id"):
                if isinstance(v, list) and all(isinstance(i, int) for i in v):
                    new = [move(i) for i in v]
                else:
                    new = move(v)
                if new != v:
                    out[key] = new
        for key in ("suppress_tokens", "begin_suppress_tokens"):
            if defaults.get(key):
                out[key] = []

    # images
    image = defaults.get("image_size")
    if isinstance(image, int) and image > IMAGE:
        out["image_size"] = IMAGE
    elif isinstance(image, (list, tuple)) and len(image) == 2 and all(isinstance(i, int) for i in image) \
            and max(image) > IMAGE:
        out["image_size"] = [IMAGE, IMAGE]
    patch = defaults.get("patch_size")
    if isinstance(patch, int) and patch > PATCH and not hierarchical:
        out["patch_size"] = PATCH
    if hierarchical:
        n = len(defaults["depths"])
        out["depths"] = [1] * n
        for key in _WIDTH_LIST_KEYS:
            v = defaults.get(key)
            if isinstance(v, (list, tuple)) and len(v) == n and all(isinstance(i, int) for i in v):
                out[key] = [min(i, 16 * 2 ** s) for s, i in enumerate(v)]
        widths = next((out[k] for k in _WIDTH_LIST_KEYS if isinstance(out.get(k), list)), None)
        if widths is None and isinstance(out.get("embed_dim", defaults.get("embed_dim")), int):
            widths = [out.get("embed_dim", defaults.get("embed_dim")) * 2 ** s for s in range(n)]
        for key in _HEAD_LIST_KEYS:
            v = defaults.get(key)
            if isinstance(v, (list, tuple)) and len(v) == n and all(isinstance(i, int) for i in v):
                out[key] = [max(1, min(i, 2 ** s, (widths[s] // 16) if widths else 2 ** s))
                            for s, i in enumerate(v)]
    # audio: a 2-layer conv feature extractor (wav2vec2-style)
    conv = defaults.get("conv_dim")
    if isinstance(conv, (list, tuple)) and len(conv) > 2:
        out.update(conv_dim=[32, 32], conv_kernel=[10, 3], conv_stride=[5, 2])
        if "num_feat_extract_layers" in defaults:
            out["num_feat_extract_layers"] = 2
    small("num_conv_pos_embeddings", 16)
    if isinstance(defaults.get("num_conv_pos_embedding_groups"), int):
        out["num_conv_pos_embedding_groups"] = min(defaults["num_conv_pos_embedding_groups"], 4)
    for key in ("num_mel_bins", "feature_size", "input_feat_per_channel"):
        small(key, 16)

    # rotary sections (multimodal RoPE) must add up to half the head dimension
    rope = defaults.get("rope_parameters") or defaults.get("rope_scaling")
    if isinstance(rope, dict) and isinstance(rope.get("mrope_section"), list):
        head_dim = out.get("head_dim", HEAD_DIM)
        sec = rope["mrope_section"]
        half = head_dim // 2
        new = [max(1, s * half // sum(sec)) for s in sec]
        new[0] += half - sum(new)
        key = "rope_parameters" if defaults.get("rope_parameters") else "rope_scaling"
        out[key] = dict(rope, mrope_section=new)

    # lists that follow the layer count (layer_types, mlp_only_layers, ...) are recomputed by the
    # config from the new count when not passed; ones that index layers keep only valid entries
    layers = defaults.get("num_hidden_layers")
    for key, v in defaults.items():
        if key in out or not isinstance(v, list) or not isinstance(layers, int):
            continue
        if len(v) == layers and layers > LAYERS and key.endswith(("layer_types", "_layers_block_type",
                                                                   "layers_block_type")):
            # keep each kind of layer once (a hybrid model keeps its attention and its SSM layers)
            kinds = list(dict.fromkeys(v))
            out[key] = (kinds + kinds)[:max(LAYERS, len(kinds))]
            if len(kinds) > LAYERS:
                out["num_hidden_layers"] = len(kinds)
        elif key.endswith("_layers") and v and all(isinstance(i, int) for i in v):
            out[key] = [i for i in v if i < out.get("num_hidden_layers", LAYERS)]

    # sub-configs
    for key, v in defaults.items():
        if isinstance(v, dict) and "model_type" in v:
            sub = shrink(v)
            if v["model_type"]:   # (an unnamed sub-config, DBRX's, is built by its parent's class)
                sub["model_type"] = v["model_type"]
            out[key] = sub
    return out


# ---------------------------------------------------------------------------------------------
# model types, building


class Skip(Exception):
    """The sweep cannot run this model type (not a magpy finding)."""

    def __init__(self, stage: str, reason: str):
        super().__init__(f"{stage}: {reason}")
        self.stage, self.reason = stage, reason


def zoo_model_types() -> set[str]:
    import transformers
    return {getattr(transformers, spec.config).model_type for spec in hf_zoo.SPECS.values()}


def model_types() -> list[str]:
    """Every model type of ``MODEL_MAPPING_NAMES`` not in the zoo; the priority families first."""
    from transformers.models.auto.modeling_auto import MODEL_MAPPING_NAMES
    zoo = zoo_model_types()
    names = [t for t in MODEL_MAPPING_NAMES if t not in zoo]
    first = [t for t in PRIORITY if t in names]
    return first + sorted(set(names) - set(first))


def _model_class_name(model_type: str) -> str:
    from transformers.models.auto.modeling_auto import MODEL_MAPPING_NAMES
    name = MODEL_MAPPING_NAMES[model_type]
    return name[0] if isinstance(name, (tuple, list)) else name


def _missing_library(exc: BaseException) -> str | None:
    text = f"{type(exc).__name__}: {exc}"
    if isinstance(exc, (ImportError, ModuleNotFoundError)) or "requires" in text or "install" in text:
        for lib in _NEEDS:
            if re.search(rf"\b{re.escape(lib)}\b", text, re.IGNORECASE):
                return lib
        name = getattr(exc, "name", None)
        if name:
            return name
    return None


def make_config(model_type: str):
    """The model type's default config, shrunk by :func:`shrink`."""
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING
    try:
        cls = CONFIG_MAPPING[model_type]
        defaults = cls().to_dict()
    except Exception as exc:
        lib = _missing_library(exc)
        raise Skip("needs " + lib if lib else "config", _describe(exc)) from exc
    options = shrink(defaults)
    options.update(EXTRA.get(model_type, {}))
    try:
        return cls(**options), options
    except Exception as exc:
        raise Skip("config", f"{_describe(exc)} (options {options})") from exc


def build_model(model_type: str):
    """``(model, config options)``: the base model of ``model_type``, tiny, random, eval mode."""
    import transformers
    config, options = make_config(model_type)
    name = _model_class_name(model_type)
    try:
        cls = getattr(transformers, name)
        torch.manual_seed(0)
        model = cls(config).eval()
    except Exception as exc:
        lib = _missing_library(exc)
        raise Skip("needs " + lib if lib else "build", _describe(exc)) from exc
    return model, options


def _describe(exc: BaseException) -> str:
    frame = traceback.extract_tb(exc.__traceback__)[-1] if exc.__traceback__ else None
    where = f" [{_short_path(frame.filename)}:{frame.lineno}]" if frame else ""
    return f"{type(exc).__name__}: {_first_line(exc) or '(no message)'}{where}"


# ---------------------------------------------------------------------------------------------
# inputs


BATCH, SEQ, PAD, DECODER_SEQ = hf_zoo.BATCH, hf_zoo.SEQ, hf_zoo.PAD, hf_zoo.DECODER_SEQ


def _text_config(config):
    return getattr(config, "text_config", None) or config


def _vision_config(config):
    return getattr(config, "vision_config", None) or config


def _int(x, default):
    if isinstance(x, (list, tuple)) and x:
        x = x[0]
    return x if isinstance(x, int) and not isinstance(x, bool) else default


def text_inputs(config, g: torch.Generator, decoder: bool = False, eos_last: bool = True) -> dict:
    """``input_ids`` ``[2, 16]`` (ids in ``[3, vocab - RESERVED)``), row 1 ends in 4 pads; its mask."""
    cfg = _text_config(config)
    vocab = _int(getattr(cfg, "vocab_size", None), VOCAB)
    top = max(4, min(vocab, VOCAB) - RESERVED) if vocab >= 2 * RESERVED else vocab
    ids = torch.randint(3 if top > 3 else 0, top, (BATCH, SEQ), generator=g)
    mask = torch.ones(BATCH, SEQ, dtype=torch.long)
    mask[1, SEQ - PAD:] = 0
    pad = _int(getattr(cfg, "pad_token_id", None), 0)
    eos = _int(getattr(cfg, "eos_token_id", None), None)
    if eos_last and eos is not None and eos < vocab:
        ids[0, SEQ - 1] = eos
        ids[1, SEQ - PAD - 1] = eos
    ids[1, SEQ - PAD:] = pad if pad < vocab else 0
    out = {"input_ids": ids, "attention_mask": mask}
    if decoder:
        out["decoder_input_ids"] = torch.randint(3 if top > 3 else 0, top, (BATCH, DECODER_SEQ), generator=g)
    return out


def _image_size(config) -> int:
    size = getattr(_vision_config(config), "image_size", IMAGE)
    if isinstance(size, (list, tuple)):
        size = size[0]
    return size if isinstance(size, int) and size > 0 else IMAGE


def candidate_inputs(model) -> list[tuple[str, dict]]:
    """Input sets to try, most specific first: ``[(description, kwargs)]``."""
    config = model.config
    try:
        params = inspect.signature(model.forward).parameters
    except (TypeError, ValueError):
        params = {}
    main = getattr(model, "main_input_name", "input_ids")
    g = torch.Generator().manual_seed(0)
    cands: list[tuple[str, dict]] = []
    pixels = None
    if "pixel_values" in params:
        vc = _vision_config(config)
        channels = _int(getattr(vc, "num_channels", None), 3)
        size = _image_size(config)
        pixels = torch.randn(1, channels, size, size, generator=g)
    decoder = "decoder_input_ids" in params
    if "input_ids" in params:
        text = text_inputs(config, g, decoder=decoder)
        if "attention_mask" not in params:
            text.pop("attention_mask")
        if pixels is not None:
            cands.append(("text+pixels", dict(text, pixel_values=pixels)))
            two = pixels.expand(2, -1, -1, -1).clone()
            cands.append(("text+pixels (batch 2)", dict(text, pixel_values=two)))
        cands.append(("text", text))
        plain_ids = text_inputs(config, torch.Generator().manual_seed(0), decoder=decoder, eos_last=False)
        cands.append(("text, no mask", {k: v for k, v in plain_ids.items() if k != "attention_mask"}))
    if pixels is not None:
        cands.append(("pixels", {"pixel_values": pixels}))
        if decoder:
            cands.append(("pixels+decoder", {"pixel_values": pixels, "decoder_input_ids":
                                             torch.randint(3, 64, (1, DECODER_SEQ), generator=g)}))
    if "input_values" in params:
        cands.append(("audio", {"input_values": torch.randn(1, AUDIO_SAMPLES, generator=g)}))
    if "input_values" in params and isinstance(getattr(config, "max_length", None), int):
        bins = _int(getattr(config, "num_mel_bins", None), 16)   # a spectrogram (AST)
        cands.append(("spectrogram", {"input_values": torch.randn(1, config.max_length, bins, generator=g)}))
    if "input_features" in params:
        keys = ("feature_projection_input_dim", "num_mel_bins", "feature_size", "input_feat_per_channel",
                "n_mels", "num_mel_bins_audio")
        feat = next((v for k in keys if (v := _int(getattr(config, k, None), None))), 16)
        frames = 2 * _int(getattr(config, "max_source_positions", None), 32)
        frames = min(frames, 128)
        extra = {}
        if decoder:
            extra["decoder_input_ids"] = torch.randint(3, 64, (1, DECODER_SEQ), generator=g)
        cands.append(("features [B, F, T]", dict(input_features=torch.randn(1, feat, frames, generator=g),
                                                   **extra)))
        cands.append(("features [B, T, F]", dict(input_features=torch.randn(1, frames, feat, generator=g),
                                                   **extra)))
    if not cands:
        raise Skip("inputs", f"no input maker for main input {main!r} (forward takes {list(params)[:8]})")
    return cands


# ---------------------------------------------------------------------------------------------
# one model


class SweepTimeout(BaseException):
    """The per-model time limit (a BaseException: nothing on the way catches it as a failure)."""


@contextlib.contextmanager
def time_limit(seconds: float):
    def handler(signum, frame):
        raise SweepTimeout(f"over {seconds:.0f} s")
    old = signal.signal(signal.SIGALRM, handler)
    # fire again every 5 s in case something on the way swallowed the first one
    signal.setitimer(signal.ITIMER_REAL, seconds, 5.0)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


@dataclasses.dataclass
class SweepResult:
    model_type: str
    model: str = ""                  # class name
    verdict: str = ""                # one of _VERDICT_ORDER
    reason: str = ""                 # one line
    skip_stage: str | None = None    # for SKIP: config / build / needs X / inputs / eager / slow
    inputs: str = ""                 # the candidate used, with shapes
    eager_s: float | None = None
    params: int | None = None
    options: dict = dataclasses.field(default_factory=dict)
    modes: list = dataclasses.field(default_factory=list)   # ModeResult as dicts
    wall_s: float = 0.0


_VERDICT_ORDER = ("CRASH", "WRONG", "TIMEOUT", "FALLBACK", "BREAK", "GUARD_MISS", "NONDET", "ONE_GRAPH",
                  "SKIP")


def _eager_ok(model, kwargs) -> tuple[bool, float, str]:
    """Eager forward on ``kwargs`` and fresh inputs (twice each): (deterministic, seconds, error)."""
    fresh = hf_zoo.fresh_inputs((), kwargs)[1]
    deterministic = True
    t0 = time.perf_counter()
    with torch.no_grad():
        a = model(**kwargs)
        elapsed = time.perf_counter() - t0
        if elapsed > EAGER_LIMIT_S:
            return True, elapsed, ""
        b = model(**kwargs)
        deterministic = compare(hf_zoo.plain(a), hf_zoo.plain(b), rtol=0, atol=0).ok
        model(**fresh)
    with torch.enable_grad():   # grad mode too: the sweep calls in both
        model(**kwargs)
    return deterministic, elapsed, ""


def prepare(model_type: str, res: SweepResult):
    """Build the model and pick inputs that run eagerly; raises :class:`Skip`."""
    model, options = build_model(model_type)
    res.model, res.options = type(model).__name__, options
    res.params = sum(p.numel() for p in model.parameters())
    errors = []
    for desc, kwargs in candidate_inputs(model):
        try:
            deterministic, elapsed, _ = _eager_ok(model, kwargs)
        except SweepTimeout:
            raise
        except Exception as exc:
            errors.append(f"{desc}: {_describe(exc)}")
            continue
        res.inputs = f"{desc}: {hf_zoo.describe((), kwargs)}"
        res.eager_s = elapsed
        if elapsed > EAGER_LIMIT_S:
            raise Skip("slow", f"eager forward {elapsed:.1f} s > {EAGER_LIMIT_S} s")
        return model, kwargs, deterministic
    raise Skip("eager", "eager forward fails on every input candidate: " + " | ".join(errors))


class _LogList(logging.Handler):
    def __init__(self):
        super().__init__(logging.INFO)
        self.messages: list[str] = []

    def emit(self, record):
        self.messages.append(record.getMessage())


@contextlib.contextmanager
def magpy_logs(topics=("recompiles", "breaks")):
    """The messages of magpy's loggers ``magpy.<topic>`` at INFO (``MAGPY_LOGS``' topics): why a
    record's guard missed, and where each eager step is."""
    handler = _LogList()
    loggers = [logging.getLogger(f"magpy.{t}") for t in topics]
    saved = [(lg.level, lg.propagate) for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.INFO)
        lg.propagate = False   # (not also printed by magpy's own stderr handler)
        lg.addHandler(handler)
    try:
        yield handler.messages
    finally:
        for lg, (level, propagate) in zip(loggers, saved):
            lg.removeHandler(handler)
            lg.setLevel(level)
            lg.propagate = propagate


def _mode_verdict(r: ModeResult, deterministic: bool, logs: list[str] = ()) -> tuple[str, str]:
    verdict, reason = _mode_verdict_raw(r, deterministic, logs)
    return verdict, re.sub(r"\S*/(site|dist)-packages/", "", reason)


def _log_reason(logs, marker: str) -> str | None:
    """The first log message with ``marker``, from the marker on, on one line."""
    msg = next((m for m in logs if marker in m), None)
    return " ".join(msg.split(marker, 1)[1].split()) if msg else None


def _mode_verdict_raw(r: ModeResult, deterministic: bool, logs=()) -> tuple[str, str]:
    if r.error:
        if "SweepTimeout" in (r.traceback or "") or r.error.startswith("SweepTimeout"):
            return "TIMEOUT", r.reason()
        where = f" (raised at {r.error_where})" if r.error_where else ""
        return "CRASH", r.reason() + where
    if not r.correct and deterministic:
        return "WRONG", r.reason()
    verdict, reason = _stats_verdict(r, logs)
    if not r.correct:   # eager is not repeatable on these inputs: its results cannot be compared
        return ("NONDET" if verdict == "ONE_GRAPH" else verdict), (
            f"{reason} [eager not repeatable: results not compared]".lstrip())
    return verdict, reason


def _stats_verdict(r: ModeResult, logs=()) -> tuple[str, str]:
    capture = [w for w in r.warnings
               if "magpy" in w.lower() and ("capture" in w.lower() or "failed" in w.lower())]
    monitor, mock, eager, graphs = r.stats or (0, 0, 0, 0)
    if any("capture failed" in b or "magpy failed" in b for b in r.break_reasons) or (capture and eager):
        return "FALLBACK", (capture[0] if capture else _first_line(r.break_reasons[0]))
    if eager or r.break_reasons or (graphs > 1 and monitor == 1):
        reasons = [_first_line(b) for b in r.break_reasons]
        magpy_warning = next((w for w in r.warnings if "magpy" in w), None)
        step = _log_reason(logs, "eager step: ")
        text = reasons[0] if reasons else (f"eager step: {step}" if step else magpy_warning or r.reason())
        return "BREAK", text + (f" (+{len(set(reasons)) - 1} more)" if len(set(reasons)) > 1 else "")
    if monitor > 1:
        why = _log_reason(logs, "recording again; ")
        return "GUARD_MISS", f"{monitor} monitor runs for 3 calls: {why}" if why else r.reason()
    return "ONE_GRAPH", ""


def run_model(model_type: str, timeout: float) -> SweepResult:
    res = SweepResult(model_type)
    t0 = time.perf_counter()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with time_limit(timeout):
                model, kwargs, deterministic = prepare(model_type, res)
        builds = iter([model])

        def builder():
            # the first mode reuses the model built for the eager check; the second builds anew
            m = next(builds, None)
            if m is None:
                m, _ = build_model(model_type)
            return m, (), kwargs
        key = f"sweep:{model_type}"
        verdicts = []
        for mode in MODES:
            hf_zoo.HF_ZOO[key] = builder
            logs: list[str] = []
            try:
                with time_limit(timeout), magpy_logs() as logs:
                    r = _run(key, mode, "magpy", lambda m: magpy.compile(m, backend="eager"))
            except SweepTimeout as exc:
                r = ModeResult(model_type, mode, "magpy", error=f"SweepTimeout: {exc}", error_call="?")
            finally:
                hf_zoo.HF_ZOO.pop(key, None)
                magpy.reset()
            r.model = model_type
            res.modes.append(dict(dataclasses.asdict(r), logs=logs[:20]))
            verdicts.append(_mode_verdict(r, deterministic, logs))
            if verdicts[-1][0] == "TIMEOUT":
                break
        verdict, reason = min(verdicts, key=lambda v: _VERDICT_ORDER.index(v[0]))
        modes = [m for m, (v, _) in zip(MODES, verdicts) if v == verdict]
        res.verdict = verdict
        every = len(modes) == len(MODES) or verdict == "ONE_GRAPH"
        res.reason = reason if every else f"[{','.join(modes)}] {reason}"
    except Skip as exc:
        res.verdict, res.skip_stage, res.reason = "SKIP", exc.stage, exc.reason
    except SweepTimeout as exc:
        res.verdict, res.skip_stage = "SKIP", "slow"
        res.reason = f"build/eager check over the time limit ({exc})"
    except Exception as exc:   # the sweep's own failure: report it, go on
        res.verdict, res.skip_stage, res.reason = "SKIP", "sweep", _describe(exc)
    finally:
        magpy.reset()
        gc.collect()
    res.wall_s = time.perf_counter() - t0
    return res


# ---------------------------------------------------------------------------------------------
# report


def table(results: list[SweepResult], width: int = 120) -> str:
    header = ["model type", "verdict", "params", "eager ms", "stats ng/g", "wall s", "reason"]
    rows = []
    for r in results:
        stats = " ".join("/".join(map(str, m["stats"])) if m.get("stats") else "-" for m in r.modes) or "-"
        verdict = r.verdict if r.verdict != "SKIP" else f"SKIP({r.skip_stage})"
        reason = r.reason if len(r.reason) <= width else r.reason[:width - 3] + "..."
        rows.append([r.model_type, verdict, f"{r.params:,}" if r.params else "-",
                     f"{1000 * r.eager_s:.0f}" if r.eager_s is not None else "-", stats, f"{r.wall_s:.1f}",
                     reason])
    widths = [max(len(h), *(len(row[i]) for row in rows)) for i, h in enumerate(header)] if rows else []

    def line(cells):
        return "  ".join(c.ljust(w) for c, w in zip(cells, widths)).rstrip()
    return "\n".join([line(header), "-" * len(line(header))] + [line(row) for row in rows])


def _generic(reason: str) -> str:
    """A reason without model-specific details, so that the same cause groups together."""
    reason = re.sub(r"^\[[a-z_,]+\] ", "", reason)
    for prefix in ("first call: ", "repeated call: ", "fresh call: "):
        reason = reason.replace(prefix, "")
    reason = re.sub(r"transformers/models/[^/]+/modeling_[a-z0-9_]+\.py:\d+", "transformers/models/*", reason)
    reason = re.sub(r"\(options \{.*\}\)", "", reason)
    reason = re.sub(r"max abs diff [0-9.e+-]+", "max abs diff *", reason)
    return reason.strip()[:200]


def summary(results: list[SweepResult]) -> str:
    counts = {v: sum(r.verdict == v for r in results) for v in _VERDICT_ORDER}
    ran = [r for r in results if r.verdict != "SKIP"]
    lines = [f"{len(results)} model types tried: {len(results) - counts['SKIP']} ran eagerly and were "
             "compiled, "
             f"{counts['SKIP']} skipped",
             "verdicts: " + ", ".join(f"{v} {n}" for v, n in counts.items() if n)]
    skips: dict[str, int] = {}
    for r in results:
        if r.verdict == "SKIP":
            skips[r.skip_stage] = skips.get(r.skip_stage, 0) + 1
    if skips:
        by_count = sorted(skips.items(), key=lambda kv: -kv[1])
        lines.append("skipped at: " + ", ".join(f"{k} {n}" for k, n in by_count))
    if ran:
        misses = [r.model_type for r in ran if any((m.get("stats") or (0,))[0] > 1 for m in r.modes)]
        lines.append(f"guard misses (more than one monitor run in some mode): {len(misses)}"
                     + (f": {', '.join(misses)}" if misses else ""))
    for verdict in _VERDICT_ORDER:
        group: dict[str, list[str]] = {}
        for r in results:
            if r.verdict == verdict and verdict != "ONE_GRAPH":
                key = (_generic(r.reason) if verdict != "SKIP"
                       else f"{r.skip_stage}: {_generic(r.reason)[:150]}")
                group.setdefault(key, []).append(r.model_type)
        if group:
            lines.append(f"\n{verdict} ({counts[verdict]}), by reason:")
            for reason, models in sorted(group.items(), key=lambda kv: -len(kv[1])):
                lines.append(f"  {len(models):3d}x {reason}\n        {', '.join(models)}")
    ok = [r.model_type for r in results if r.verdict == "ONE_GRAPH"]
    if ok:
        lines.append(f"\nONE_GRAPH ({len(ok)}): {', '.join(ok)}")
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------
# main


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", help="comma-separated model types (default: every type not in the zoo)")
    parser.add_argument("--limit", type=int, help="only the first N model types (priority families first)")
    parser.add_argument("--timeout", type=float, default=120.0,
                        help="seconds per model and mode (default %(default)s)")
    parser.add_argument("--json", metavar="PATH", help="write the results as JSON (after every model)")
    parser.add_argument("--resume", action="store_true", help="skip the model types already in --json")
    parser.add_argument("--list", action="store_true", help="print the model types and exit")
    return parser.parse_args(argv)


def main(argv=None) -> int:
    opts = parse_args(argv)
    torch.set_num_threads(1)
    magpy.config.verify_fast_guard = True
    names = model_types() if not opts.models else [m for m in opts.models.split(",") if m]
    if opts.limit:
        names = names[:opts.limit]
    if opts.list:
        print("\n".join(names))
        return 0
    results: list[SweepResult] = []
    if opts.resume and opts.json and Path(opts.json).exists():
        results = [SweepResult(**row) for row in json.loads(Path(opts.json).read_text())]
        done = {r.model_type for r in results}
        names = [n for n in names if n not in done]
    import transformers
    print(f"torch {torch.__version__}, transformers {transformers.__version__}, magpy backend 'eager' (not "
          f"fullgraph), verify_fast_guard=True; {len(names)} model types x {list(MODES)}", flush=True)
    start = time.perf_counter()
    for i, name in enumerate(names):
        r = run_model(name, opts.timeout)
        results.append(r)
        verdict = r.verdict if r.verdict != "SKIP" else f"SKIP({r.skip_stage})"
        print(f"  [{i + 1}/{len(names)}] {name:28s} {verdict:18s} {r.wall_s:6.1f} s  {r.reason[:150]}",
              flush=True)
        if opts.json:
            Path(opts.json).parent.mkdir(parents=True, exist_ok=True)
            rows = [dataclasses.asdict(x) for x in results]
            Path(opts.json).write_text(json.dumps(rows, indent=1, default=str))
    print("\n" + table(results))
    print("\nstats: magpy.stats monitor_runs/mock_runs/eager_runs/graph_count for no_grad and grad "
          "(one graph: 1/2/0/1)")
    print("\n" + summary(results))
    print(f"\ntotal wall time {time.perf_counter() - start:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
