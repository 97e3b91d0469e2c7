"""The end-to-end benchmark script (``benchmarks/run.py``): its output comparison, and a small
in-process run at ``--size test`` whose JSON must say every variant is correct and that magpy
ran one graph through the mock."""
from __future__ import annotations

import collections
import json
import math

import pytest
import torch

from benchmarks import run

# ---------------------------------------------------------------------------------------------
# compare(): the correctness check must notice wrong outputs


Pair = collections.namedtuple("Pair", "a b")


def test_compare_equal_structures():
    x = torch.randn(3, 4)
    out = {"logits": x, "rest": (x * 2, [x + 1, None], 3, "s"), "n": Pair(1.5, torch.arange(3))}
    same = {"logits": x.clone(), "rest": (x * 2, [x + 1, None], 3, "s"), "n": Pair(1.5, torch.arange(3))}
    c = run.compare(out, same)
    assert c.ok and c.max_abs_diff == 0.0 and c.tensors == 4, c


def test_compare_within_tolerance_reports_max_diff():
    x = torch.randn(100)
    c = run.compare(x, x + 5e-4)
    assert c.ok
    assert c.max_abs_diff == pytest.approx(5e-4, rel=1e-2)


@pytest.mark.parametrize("actual, problem", [
    ((torch.ones(3) + 1e-2, torch.zeros(2)), "not allclose"),          # a value off by 1e-2
    ((torch.ones(3), torch.zeros(3)), "shape"),                         # shape
    ((torch.ones(3, dtype=torch.float64), torch.zeros(2)), "dtype"),    # dtype
    ((torch.ones(3),), "length"),                                       # a missing output
    ([torch.ones(3), torch.zeros(2)], "type"),                          # list instead of tuple
    ((torch.ones(3), None), "expected a tensor"),
    ((torch.ones(3), torch.full((2,), float("nan"))), "not allclose"),  # NaN where eager had 0
])
def test_compare_detects_differences(actual, problem):
    expected = (torch.ones(3), torch.zeros(2))
    c = run.compare(expected, actual)
    assert not c.ok
    assert any(problem in p for p in c.problems), c.problems


def test_compare_mappings_and_nan():
    assert not run.compare({"a": torch.ones(2)}, {"b": torch.ones(2)}).ok
    assert not run.compare({"a": 1, "b": 2}, {"a": 1, "b": 3}).ok
    assert not run.compare(torch.arange(4), torch.arange(4) + 1).ok  # integer tensors: exact
    nan = torch.tensor([1.0, float("nan")])
    assert run.compare(nan, nan.clone()).ok  # NaNs in the same places are equal
    c = run.compare(torch.tensor([1.0, 2.0]), torch.tensor([1.0, float("inf")]))
    assert not c.ok and math.isinf(c.max_abs_diff)


def test_compare_model_output():
    transformers = pytest.importorskip("transformers")
    Out = transformers.modeling_outputs.BaseModelOutputWithPooling
    x = torch.randn(1, 4, 8)
    expected = Out(last_hidden_state=x, pooler_output=x[:, 0])
    assert run.compare(expected, Out(last_hidden_state=x.clone(), pooler_output=x[:, 0].clone())).ok
    assert not run.compare(expected, Out(last_hidden_state=x, pooler_output=x[:, 1])).ok
    assert not run.compare(expected, Out(last_hidden_state=x)).ok  # a field missing
    assert not run.compare(expected, (x, x[:, 0])).ok               # a plain tuple


# ---------------------------------------------------------------------------------------------
# end to end


@pytest.mark.slow   # (18 s; the plumbing's parts have tests of their own above)
def test_run_small(tmp_path, capsys):
    path = tmp_path / "run.json"
    status = run.main(["--size", "test", "--models", "resnet50,bert", "--quick",
                       "--variants", "eager,magpy-eager,torch.compile-eager", "--json", str(path)])
    printed = capsys.readouterr().out
    data = json.loads(path.read_text())
    assert status == 0, printed
    assert data["complete"] and data["machine"]["torch"] == torch.__version__
    assert data["machine"]["threads"] >= 1 and data["machine"]["cpu_count"] >= 1
    rows = data["rows"]
    assert [(r["model"], r["variant"]) for r in rows] == [
        (m, v) for m in ("resnet50", "bert") for v in ("eager", "torch.compile-eager", "magpy-eager")]
    for r in rows:
        where = f"{r['model']}/{r['variant']}"
        assert r["error"] is None, (where, r["error"])
        assert r["correct"] is True, (where, r["checks"])
        assert set(r["checks"]) == {"first call", "later call"}
        assert all(c["ok"] and c["tensors"] >= 1 for c in r["checks"].values()), (where, r["checks"])
        assert r["median_ms"] > 0 and r["compile_s"] > 0 and r["repeats"] >= 5, where
        assert r["speedup"] > 0, where
        if r["compiler"] == "magpy":
            s = r["magpy_stats"]
            assert r["graphs"] == 1 and s["graph_count"] == 1, (where, s, r["break_reasons"])
            assert s["eager_runs"] == 0 and s["mock_runs"] > 0 and s["monitor_runs"] == 1, (where, s)
            assert "mock" in r["notes"], where
        if r["compiler"] == "torch.compile":
            assert r["graphs"] >= 1, where
    assert "| resnet50 | magpy-eager |" in printed  # the markdown table


@pytest.mark.slow   # compiles with Inductor: 11 s
def test_run_reports_wrong_variant(tmp_path, monkeypatch, capsys):
    """A variant whose output is wrong makes the row incorrect and the exit status 1."""

    class Off(run.Variant):
        def make(self, model):
            return lambda *args, **kwargs: model(*args, **kwargs) + 0.1

    class Raises(run.Variant):
        def make(self, model):
            def fn(*args, **kwargs):
                raise RuntimeError("boom")
            return fn

    variants = dict(run.VARIANTS, off=Off("off", "eager", None), raises=Raises("raises", "eager", None))
    monkeypatch.setattr(run, "VARIANTS", variants)
    path = tmp_path / "run.json"
    argv = ["--size", "test", "--models", "resnet50", "--variants", "off,raises", "--quick",
            "--json", str(path)]
    assert run.main(argv) == 1
    rows = {r["variant"]: r for r in json.loads(path.read_text())["rows"]}
    assert set(rows) == {"eager", "off", "raises"}   # eager is always run
    assert rows["eager"]["correct"] is True
    assert rows["off"]["correct"] is False and rows["off"]["error"] is None
    assert rows["off"]["max_abs_diff"] == pytest.approx(0.1, rel=1e-3)
    assert rows["raises"]["correct"] is False and "RuntimeError" in rows["raises"]["error"]
    assert "boom" in rows["raises"]["error"]
    assert run.main(argv + ["--no-fail"]) == 0
    capsys.readouterr()
