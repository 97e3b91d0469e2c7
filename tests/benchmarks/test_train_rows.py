"""The README's training rows on a backend (``benchmarks/train_rows.py``): its comparison, and a
small in-process run with backend "eager" that must report the row bit-exact with its
records."""
from __future__ import annotations

import json

import torch

import magpy
from benchmarks import train_rows


def test_agreement_sees_a_difference_a_tolerance_and_a_structure():
    exact = train_rows.Agreement()
    exact.add(1, {"w": torch.ones(3), "n": 2}, {"w": torch.ones(3), "n": 2}, 1e-4, 1e-5)
    assert exact.exact and exact.within

    close = train_rows.Agreement()
    close.add(1, {"w": torch.ones(3)}, {"w": torch.ones(3) + 1e-6}, 1e-4, 1e-5)
    assert not close.exact and close.within and close.first_inexact == 1 and close.where == "step 1 w"

    far = train_rows.Agreement()
    far.add(1, {"w": torch.ones(3)}, {"w": torch.ones(3)}, 1e-4, 1e-5)
    far.add(2, {"w": torch.ones(3)}, {"w": torch.ones(3) * 1.01}, 1e-4, 1e-5)
    assert not far.within and far.first_outside == 2

    shaped = train_rows.Agreement()
    shaped.add(1, {"w": torch.ones(3)}, {"w": None}, 1e-4, 1e-5)
    assert not shaped.within and shaped.mismatch


def test_a_row_on_backend_eager(tmp_path, monkeypatch):
    # (main() sets these for the whole process: put them back afterwards)
    monkeypatch.setattr(magpy.config, "background_compile", magpy.config.background_compile)
    monkeypatch.setattr(magpy.config, "autopilot", magpy.config.autopilot)
    threads = torch.get_num_threads()
    out = tmp_path / "rows.json"
    try:
        assert train_rows.main(["--rows", "ema", "--backends", "eager", "--steps-scale", "0.5",
                                "--json", str(out)]) == 0
    finally:
        torch.set_num_threads(threads)
    (row,) = json.loads(out.read_text())["results"]
    assert (row["row"], row["backend"], row["steps"]) == ("ema", "eager", 4)
    assert row["agreement"]["exact"] and row["run_kinds"] == "RRmm", row
    assert (row["records"], row["mock_runs"], row["eager_runs"]) == (2, 2, 0), row
