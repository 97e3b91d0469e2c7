"""Dynamic shapes on transformers models with their default settings (issue 12, item 5).

* Decoding: ``model.forward = magpy.compile(model.forward)`` then greedy ``generate()`` with a
  KV cache that grows every step gives eager's tokens, and the number of recordings does not
  grow with ``max_new_tokens`` (prefill, the first step, the step that lifts the cache length).
* Encoding: BERT over batch sizes and sequence lengths drawn at random records at most three
  times (the first call, then once per dimension found to change) and matches eager.
Random weights from small configs (no downloads); backend "eager" (bit-exact) unless marked.
"""
import random

import pytest
import torch

import magpy
from tests.harness.compile_harness import fresh_magpy  # noqa: F401 - autouse: magpy.reset() per test


@pytest.fixture(autouse=True)
def _restore_dynamic():
    saved = magpy.config.dynamic
    yield
    magpy.config.dynamic = saved


transformers = pytest.importorskip("transformers")


def _gpt2():
    cfg = transformers.GPT2Config(n_embd=64, n_layer=2, n_head=4, vocab_size=500, n_positions=256,
                                  bos_token_id=0, eos_token_id=0)
    return transformers.GPT2LMHeadModel(cfg).eval()


def _llama():
    cfg = transformers.LlamaConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                                   num_key_value_heads=2, intermediate_size=128, vocab_size=500,
                                   max_position_embeddings=256, bos_token_id=0, eos_token_id=0)
    return transformers.LlamaForCausalLM(cfg).eval()


def _mistral():
    # A sliding window shorter than the generation: its cache adds each step's length to
    # ``cumulative_length``, which the mock writes from the new sizes.
    cfg = transformers.MistralConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                                     num_key_value_heads=2, intermediate_size=128, vocab_size=500,
                                     max_position_embeddings=256, sliding_window=16, bos_token_id=0,
                                     eos_token_id=0)
    return transformers.MistralForCausalLM(cfg).eval()


def _generate(model, prompt, n):
    # eos = pad = 0 never ends early here: min_new_tokens keeps every run at n tokens.
    return model.generate(prompt, max_new_tokens=n, min_new_tokens=n, do_sample=False, pad_token_id=0)


def _decode(build, backend, lengths):
    torch.manual_seed(0)
    model = build()
    prompt = torch.randint(1, 500, (1, 8))
    orig = model.forward
    with torch.no_grad():
        expected = [_generate(model, prompt, n) for n in lengths]
        model.forward = magpy.compile(orig, backend=backend)
        runs = []
        for n, want in zip(lengths, expected):
            before = magpy.stats(model.forward).monitor_runs
            got = _generate(model, prompt, n)
            assert torch.equal(got, want), f"max_new_tokens={n}: tokens differ from eager's"
            runs.append(magpy.stats(model.forward).monitor_runs - before)
    return magpy.stats(model.forward), runs


@pytest.mark.parametrize("build, first", [(_gpt2, 3), pytest.param(_llama, 3, marks=pytest.mark.slow),
                                           (_mistral, 6)], ids=["gpt2", "llama", "mistral_sliding_window"])
def test_generate_records_do_not_grow_with_new_tokens(build, first):
    stats, runs = _decode(build, "eager", [32, 64])
    # Prefill, the first decoding step, and the step where the cache length is seen to change
    # (Mistral: the same again once the window is full, and at the step that fills it).
    assert runs == [first, 0], runs
    assert stats.eager_runs == 0
    assert stats.mock_runs == 32 + 64 - first


@pytest.mark.slow
def test_generate_with_inductor_gives_eager_tokens():
    # The second generate() starts from a compiled prefill, whose KV cache keeps eager's
    # layout (backends.EagerLayout): its decoding steps hit the records of the first.
    stats, runs = _decode(_gpt2, "inductor", [24, 32])
    assert runs == [3, 0] and stats.eager_runs == 0, (runs, stats)


@pytest.mark.parametrize("attention", [None, "eager"], ids=["default", "eager_attention"])
def test_bert_random_batch_and_length(attention):
    # Eager attention builds its mask through keyword dicts (``sdpa_mask(batch_size=b, ...)``).
    torch.manual_seed(0)
    cfg = transformers.BertConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                                  intermediate_size=128, vocab_size=500, attn_implementation=attention)
    model = transformers.BertModel(cfg).eval()
    compiled = magpy.compile(model, backend="eager")
    rng = random.Random(0)
    with torch.no_grad():
        for _ in range(12):
            ids = torch.randint(0, 500, (rng.randint(2, 8), rng.randint(8, 64)))
            assert torch.equal(compiled(ids).last_hidden_state, model(ids).last_hidden_state)
    stats = magpy.stats(compiled)
    assert stats.monitor_runs <= 3 and stats.eager_runs == 0, stats
    assert stats.mock_runs == 12 - stats.monitor_runs


# ----------------------------------------------------------------------------- the text zoo

_NOT_TEXT = {"convnext", "deit", "detr", "resnet", "segformer", "swin", "vit", "wav2vec2", "whisper"}
# The default run's share: decoder and encoder families, a custom autograd.Function (BLOOM),
# F.pad on a lifted size (MobileBERT), sizes read from the first result of a lifted input
# (GPT-J), sizes stored in state (Mistral, Funnel).
_DEFAULT_RUN = {"gpt2", "llama", "gptj", "bloom", "t5", "bert", "mobilebert"}


def _text_models() -> list:
    from benchmarks.models import hf_zoo
    return [pytest.param(name, marks=() if name in _DEFAULT_RUN else (pytest.mark.slow,), id=name)
            for name in hf_zoo.HF_ZOO if name not in _NOT_TEXT]


# Models that store a size into their own state (``self.cumulative_length += t`` of a
# sliding-window cache, Funnel's ``self.seq_len = t``): the stored value is guarded, so each
# length records (the results stay eager's).
STORES_SIZES = {"mistral", "gemma2", "funnel"}
LENGTHS = [16, 12, 10, 14, 9]


@pytest.mark.parametrize("name", _text_models())
def test_zoo_models_over_sequence_lengths(name):
    """Every text model of the transformers zoo (default settings) called with its sequence
    length cut to each of LENGTHS: eager's outputs on every call, and two recordings (the
    first length, then the lifted one) unless the model stores a size in its state."""
    _zoo_sweep(name, None, 2)


@pytest.mark.slow
@pytest.mark.parametrize("name", _text_models())
def test_zoo_models_with_dynamic_true(name):
    """The same with ``magpy.config.dynamic = True``: one recording (BigBird: two, as it
    switches itself to full attention for lengths too short for its blocks, rewriting its
    own ``attention_type``)."""
    _zoo_sweep(name, True, 2 if name == "big_bird" else 1)


def _zoo_sweep(name, mode, recordings):
    from benchmarks.models import hf_zoo
    from benchmarks.transformers_survey import compare
    magpy.config.dynamic = mode
    model, args, kwargs = hf_zoo.HF_ZOO[name]()
    ids = kwargs.get("input_ids", args[0] if args else None)
    if not (isinstance(ids, torch.Tensor) and ids.dim() == 2 and ids.shape[1] == LENGTHS[0]):
        pytest.skip("not a text model")
    compiled = magpy.compile(model, backend="eager")

    def cut(v, n):
        text = isinstance(v, torch.Tensor) and v.dim() >= 2 and v.shape[1] == LENGTHS[0]
        return v[:, :n].contiguous() if text else v

    with torch.no_grad():
        for n in LENGTHS:
            a, k = tuple(cut(v, n) for v in args), {key: cut(v, n) for key, v in kwargs.items()}
            result = compare(hf_zoo.plain(model(*a, **k)), hf_zoo.plain(compiled(*a, **k)),
                             rtol=1e-5, atol=1e-5)
            assert result.ok, (n, result.problems[:3])
    stats = magpy.stats(compiled)
    assert stats.eager_runs == 0, stats.break_reasons
    assert stats.monitor_runs == (len(set(LENGTHS)) if name in STORES_SIZES else recordings), stats
