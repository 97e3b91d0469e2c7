"""transformers models built with their default settings compile to one graph (GitHub issue 9).

For every model of ``benchmarks.models.hf_zoo`` (SDPA attention where transformers picks it,
default config options, random weights, test size), with and without ``torch.no_grad()``:
``magpy.compile(model, backend="eager", fullgraph=True)`` called on the example inputs, on
the same inputs again and on fresh inputs of the same shapes must match eager on every call
(every tensor of the output structure, caches included: atol 1e-5, rtol 1e-4) and leave
``magpy.stats`` at exactly monitor_runs 1, mock_runs 2, eager_runs 0, graph_count 1.  The
checks are ``benchmarks.transformers_survey.check_magpy``, which the survey script prints as
a table; these tests assert the desired behaviour and carry no xfail marks.

The default run (``-m 'not slow'``) covers ``DEFAULT``, one or two cheap models per family;
the rest of the corpus is marked ``slow`` (``python -m pytest -m slow
tests/models/test_transformers_models.py``).
"""
from __future__ import annotations

import json

import pytest
import torch

from benchmarks.models import hf_zoo
from benchmarks.run import compare
from benchmarks.transformers_survey import EXPECTED_STATS, MODES, check_magpy

# Representative and cheap: decoders (learned positions; RoPE + GQA; QKV bias), an
# encoder-decoder with relative positions and one with an audio front end, two encoders, a
# ViT, a CNN and a two-tower model.
DEFAULT = ("gpt2", "llama", "qwen2", "t5", "whisper", "bert", "distilbert", "vit", "resnet", "clip")


def _models():
    for name in hf_zoo.HF_ZOO:
        yield pytest.param(name, id=name, marks=() if name in DEFAULT else (pytest.mark.slow,))


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", _models())
def test_model_is_one_graph_and_matches_eager(name, mode):
    r = check_magpy(name, mode, backend="eager")
    assert r.error is None, f"{r.error_call} call raised {r.error}\n{r.traceback}"
    for c in r.checks:
        assert c.ok, f"{c.call} call differs from eager: {c.problems}"
    assert [c.call for c in r.checks] == ["first", "repeated", "fresh"]
    assert r.stats == EXPECTED_STATS, (
        f"(monitor_runs, mock_runs, eager_runs, graph_count) = {r.stats}: {r.reason()}")


# ---------------------------------------------------------------------------------------------
# the corpus itself (cheap: no compilation)


def test_corpus_covers_the_issue():
    assert len(hf_zoo.HF_ZOO) >= 37
    assert set(DEFAULT) <= hf_zoo.FAST
    families = {hf_zoo.SPECS[n].family for n in DEFAULT}
    assert {"decoder", "encoder-decoder", "encoder", "vision", "multimodal"} <= families


@pytest.mark.parametrize("name", list(hf_zoo.HF_ZOO))
def test_zoo_model_builds_with_default_attention(name):
    """Every builder works offline, keeps transformers' default attention and runs eagerly."""
    model, args, kwargs = hf_zoo.HF_ZOO[name]()
    assert not model.training
    assert type(model).__name__ == hf_zoo.SPECS[name].model
    assert model.config._attn_implementation == hf_zoo.SPECS[name].attention
    with torch.no_grad():
        model(*args, **kwargs)


@pytest.mark.parametrize("name", ["bert", "clip", "detr"])
def test_zoo_builds_are_deterministic(name):
    (m1, a1, k1), (m2, a2, k2) = hf_zoo.HF_ZOO[name](), hf_zoo.HF_ZOO[name]()
    assert all(torch.equal(p, q) for p, q in zip(m1.state_dict().values(), m2.state_dict().values()))
    with torch.no_grad():
        assert compare(hf_zoo.plain(m1(*a1, **k1)), hf_zoo.plain(m2(*a2, **k2)), rtol=0, atol=0).ok


def test_fresh_inputs_keep_shapes_ranges_and_masks():
    _, args, kwargs = hf_zoo.HF_ZOO["bert"]()
    _, fresh = hf_zoo.fresh_inputs(args, kwargs)
    ids, new_ids = kwargs["input_ids"], fresh["input_ids"]
    assert new_ids.shape == ids.shape and new_ids.dtype == ids.dtype and not torch.equal(new_ids, ids)
    assert ids.min() <= new_ids.min() and new_ids.max() <= ids.max()
    assert torch.equal(fresh["attention_mask"], kwargs["attention_mask"])
    _, _, image = hf_zoo.HF_ZOO["vit"]()
    _, fresh = hf_zoo.fresh_inputs((), image)
    assert fresh["pixel_values"].shape == image["pixel_values"].shape
    assert not torch.equal(fresh["pixel_values"], image["pixel_values"])


def test_plain_makes_caches_comparable():
    """Caches are compared by their tensors: equal caches match, a changed key does not."""
    model, args, kwargs = hf_zoo.HF_ZOO["llama"]()
    with torch.no_grad():
        a, b = model(*args, **kwargs), model(*args, **kwargs)
    assert type(a.past_key_values).__name__ == "DynamicCache"
    assert compare(hf_zoo.plain(a), hf_zoo.plain(b)).ok
    assert not compare(a, b).ok   # without plain: a cache has no ==
    b.past_key_values.layers[1].keys.add_(1e-2)
    c = compare(hf_zoo.plain(a), hf_zoo.plain(b))
    assert not c.ok and any("layers" in p and "keys" in p for p in c.problems), c.problems


# ---------------------------------------------------------------------------------------------
# benchmarks/run.py --suite transformers


def test_benchmark_suite_transformers(tmp_path, capsys):
    """The suite builds hf_zoo models at batch size 1 and compares outputs with caches in them."""
    from benchmarks import run

    path = tmp_path / "run.json"
    status = run.main(["--suite", "transformers", "--models", "gpt2", "--variants", "eager,magpy-eager",
                       "--quick", "--min-repeats", "2", "--max-repeats", "2", "--json", str(path)])
    printed = capsys.readouterr().out
    assert status == 0, printed
    data = json.loads(path.read_text())
    assert data["options"]["suite"] == "transformers" and data["options"]["size"] == "test"
    rows = data["rows"]
    assert [(r["model"], r["variant"]) for r in rows] == [("gpt2", "eager"), ("gpt2", "magpy-eager")]
    assert rows[0]["inputs"] == "input_ids[1, 16] attention_mask[1, 16]"
    for r in rows:
        assert r["error"] is None and r["correct"] is True, r
        assert all(c["tensors"] > 2 for c in r["checks"].values()), r["checks"]  # the cache's tensors too


def test_benchmark_suite_transformers_arguments():
    from benchmarks import run

    opts = run.parse_args(["--suite", "transformers"])
    assert opts.model_list == list(hf_zoo.HF_ZOO) and opts.size == "test"
    assert [v.name for v in opts.variant_list] == ["eager", "torch.compile", "magpy"]
    assert opts.json.endswith("run_transformers.json")
    default = run.parse_args([])
    assert default.size == "bench" and default.model_list == run.DEFAULT_MODELS
    # (on the CPU, the default device: reduce-overhead is a GPU's variant)
    assert [v.name for v in default.variant_list] == [v for v in run.VARIANTS if v not in run.CUDA_ONLY_VARIANTS]
    with pytest.raises(SystemExit):
        run.parse_args(["--suite", "transformers", "--size", "bench"])
    with pytest.raises(SystemExit):
        run.parse_args(["--suite", "transformers", "--models", "resnet101"])
