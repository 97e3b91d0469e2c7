"""The training benchmark (``benchmarks/train.py``): its correctness check, and small in-process
runs with backend "eager" (no Inductor compile), whose table must print and say every variant
reproduced eager's losses and state exactly."""
from __future__ import annotations

import json

import pytest
import torch

from benchmarks import train

# ---------------------------------------------------------------------------------------------
# check(): exact for backend "eager", float64-relative for Inductor


def _trained(w: float, n: int = 3, dtype=torch.float32) -> dict:
    """What a run returns: its losses, and its state (a float and an integer tensor)."""
    return {"loss": torch.tensor([2.0, 1.5], dtype=dtype),
            "state": {"w": torch.tensor([w, 1.0], dtype=dtype), "n": torch.tensor(n)}}


EAGER = train.VARIANTS["magpy-eager"]
INDUCTOR = train.VARIANTS["magpy"]


def test_check_exact_for_backend_eager():
    eager = _trained(0.5)
    assert train.check(EAGER, _trained(0.5), eager, None)["correct"]
    off = train.check(EAGER, _trained(0.5 + 2 ** -23), eager, None)   # two float32 ulps
    assert not off["correct"] and off["problems"][0].startswith("w: not allclose")
    assert off["state_diff"] == 2 ** -23 and off["loss_diff"] == 0.0


def test_check_inductor_tolerance_and_float64_rule():
    eager, truth = _trained(0.5), _trained(0.52, dtype=torch.float64)   # eager is 0.02 off float64
    assert train.check(INDUCTOR, _trained(0.5005), eager, truth)["correct"]   # allclose to eager
    near = train.check(INDUCTOR, _trained(0.53), eager, truth)   # closer to float64 than eager
    assert near["correct"] and near["fp64_ratio"] == pytest.approx(0.5, rel=1e-3)
    far = train.check(INDUCTOR, _trained(0.4), eager, truth)     # 6x further than eager
    assert not far["correct"] and "RMS distance to float64" in far["problems"][0]
    counted = train.check(INDUCTOR, _trained(0.5, n=4), eager, truth)   # integers: exact
    assert not counted["correct"] and counted["problems"] == ["n: integer/bool values differ"]


# ---------------------------------------------------------------------------------------------
# end to end


def _run(tmp_path, argv):
    path = tmp_path / "train.json"
    threads = torch.get_num_threads()
    try:   # one thread: on a loaded machine, more make every operator wait at OpenMP barriers
        status = train.main([*argv, "--threads", "1", "--json", str(path)])
    finally:
        torch.set_num_threads(threads)
    return status, json.loads(path.read_text())["rows"]


def _assert_exact(rows, printed, steps):
    for r in rows:
        where = f"{r['model']}/{r['variant']}"
        assert r["error"] is None and r["correct"] is True, (where, r.get("problems"), r.get("traceback"))
        assert len(r["losses"]) == 2 + train.WARMUP + steps and r["median_ms"] > 0, where
        if r["variant"] == "eager":
            continue
        # (torch.compile's own state is not held to bit-exactness: with backend "eager" its
        # ResNet-50 training state is 0.30 off eager's after the quick steps, torch 2.13)
        assert r["compiler"] != "magpy" or r["loss_diff"] == 0.0 and r["state_diff"] == 0.0, where
        assert f"| {r['model']} | {r['variant']} |" in printed
        # magpy: the whole step (magpy.training.backward); torch.compile: forward + loss, optimizer update
        assert r["graphs_per_step"] == (1 if r["compiler"] == "magpy" else 2), (where, r["break_reasons"])
        if r["compiler"] == "magpy":
            s = r["magpy_stats"]
            assert s["eager_runs"] == 0 and s["monitor_runs"] == 2, (where, s, r["break_reasons"])
    assert "yes (loss 0.0e+00, state 0.0e+00)" in printed


def test_train_small(tmp_path, capsys):
    status, rows = _run(tmp_path, ["--size", "test", "--models", "bert", "--steps", "1",
                                   "--variants", "eager,magpy-eager"])
    printed = capsys.readouterr().out
    assert status == 0, printed
    assert [r["variant"] for r in rows] == ["eager", "magpy-eager"]
    _assert_exact(rows, printed, steps=1)


@pytest.mark.slow
def test_train_backend_eager_both_models(tmp_path, capsys):
    status, rows = _run(tmp_path, ["--size", "test", "--quick", "--opt", "adamw", "--models", "resnet50,bert",
                                   "--variants", "magpy-eager,torch.compile-eager"])
    printed = capsys.readouterr().out
    assert status == 0, printed
    assert [(r["model"], r["variant"]) for r in rows] == [
        (m, v) for m in ("resnet50", "bert") for v in ("eager", "torch.compile-eager", "magpy-eager")]
    _assert_exact(rows, printed, steps=train.QUICK_STEPS)


# (model, its recordings, issue 30): the scheduled step records the first step, then one record
# for the warm-up and the decay; the micro-step step(i, x, y) with (i + 1) % ACCUM == 0
# stepping the optimizer lifts the loop index and guards the branch by its side, 4 records (the
# first call, the first step, then the accumulate-only and step records: the micro-step after a
# step, finding no .grad, replays the first, magpy.training.backward's buffers).  Then replays: exact, one
# graph a step.
@pytest.mark.slow
@pytest.mark.parametrize("model, records", [("bert-finetune", 2), ("bert-accum", 4)])
def test_train_records_then_replays(tmp_path, capsys, model, records):
    status, rows = _run(tmp_path, ["--size", "test", "--steps", "2", "--opt", "adamw",
                                   "--models", model, "--variants", "magpy-eager"])
    printed = capsys.readouterr().out
    assert status == 0, printed
    r = rows[1]
    assert r["correct"] is True and r["loss_diff"] == 0.0 and r["state_diff"] == 0.0, r.get("problems")
    s = r["magpy_stats"]
    assert s["eager_runs"] == 0 and s["monitor_runs"] == records and r["graphs_per_step"] == 1, s


@pytest.mark.slow
def test_train_ddp_backend_eager(tmp_path, capsys):
    # Two spawned processes; magpy may run DDP eagerly (its break reasons are footnotes).
    status, rows = _run(tmp_path, ["--ddp", "--steps", "1", "--variants", "magpy-eager"])
    printed = capsys.readouterr().out
    assert status == 0, printed
    assert [r["variant"] for r in rows] == ["eager", "magpy-eager"]
    assert all(r["correct"] is True and r["model"] == "resnet50 DDPx2" for r in rows), rows
    assert "| resnet50 DDPx2 | magpy-eager |" in printed
