"""benchmarks/interleaved.py's plumbing on the CPU (eager and magpy's eager backend: no compiles)."""
from __future__ import annotations

import json

import magpy
from benchmarks import interleaved


def _variants(monkeypatch, **extra):
    monkeypatch.setattr(interleaved, "VARIANTS", {
        "eager": (lambda m: m, {}, False),
        "magpy": (lambda m: magpy.compile(m, backend="eager"), {}, False),
        "on a GPU only": (lambda m: m, {}, True),
        **extra})


def test_rounds_compare_every_variant_with_eager(tmp_path, monkeypatch):
    _variants(monkeypatch)
    out = tmp_path / "rows.json"
    status = interleaved.main(["--models", "mlp,blockdrop", "--rounds", "2", "--calls", "1",
                               "--json", str(out)])
    rows = json.loads(out.read_text())["rows"]
    assert status == 0
    assert [(r["model"], r["variant"]) for r in rows] == [
        ("mlp", "eager"), ("mlp", "magpy"), ("blockdrop", "eager"), ("blockdrop", "magpy")]
    assert all(r["correct"] == "yes" and r["ms"] > 0 for r in rows)
    assert all(r["x_eager"] == 1.0 for r in rows if r["variant"] == "eager")


def test_a_wrong_or_failing_variant_is_reported(tmp_path, monkeypatch, capsys):
    def broken(model):
        raise RuntimeError("cannot compile this")

    def wrong(model):
        return lambda x: model(x) + 1
    _variants(monkeypatch, wrong=(wrong, {}, False), broken=(broken, {}, False))
    status = interleaved.main(["--models", "mlp", "--rounds", "1", "--calls", "1"])
    text = capsys.readouterr().out
    assert status == 1
    assert "broken failed: RuntimeError: cannot compile this" in text
    assert "max abs diff 1.00e+00" in text
