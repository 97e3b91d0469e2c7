"""The ``bert_log`` zoo model (``benchmarks/models/logging_hooks.py``) at test size: BERT with a
forward hook on every encoder layer appending ``float(hidden.norm())`` to a Python list.

Eager only: nothing here says how a compiler segments the model.  Also checks that
``benchmarks/run.py`` compares the log (a wrong log makes the row incorrect)."""
from __future__ import annotations

import pytest
import torch

pytest.importorskip("transformers")

from benchmarks import run  # noqa: E402
from benchmarks.models import MODELS, SIZES, logging_hooks  # noqa: E402


def build():
    return MODELS["bert_log"]("test")


def layers(model) -> int:
    return model.bert.config.num_hidden_layers


def test_registered_with_bert_sizes():
    assert "bert_log" in MODELS and "bert_log" in run.DEFAULT_MODELS
    assert SIZES["bert_log"] == SIZES["bert"]
    model, args, kwargs = build()
    assert isinstance(model, logging_hooks.BertWithLogging)
    assert args == () and set(kwargs) == {"input_ids", "attention_mask"}
    assert not any(m.training for m in model.modules())


def test_same_bert_as_the_zoo():
    model, _, kwargs = build()
    bert, _, bert_kwargs = MODELS["bert"]("test")
    assert model.bert.config.to_dict() == bert.config.to_dict()
    s1, s2 = model.bert.state_dict(), bert.state_dict()
    assert s1.keys() == s2.keys() and all(torch.equal(s1[k], s2[k]) for k in s1)
    assert all(torch.equal(kwargs[k], bert_kwargs[k]) for k in kwargs)
    with torch.no_grad():
        out, ref = model(**kwargs), bert(**bert_kwargs)
    assert type(out) is type(ref)
    assert torch.equal(out.last_hidden_state, ref.last_hidden_state)
    assert torch.equal(out.pooler_output, ref.pooler_output)


def test_log_one_entry_per_layer_and_deterministic():
    model, args, kwargs = build()
    assert model.logger.history == []
    with torch.no_grad():
        out1 = model(*args, **kwargs)
        log1 = model.log_snapshot()
        out2 = model(*args, **kwargs)
        log2 = model.log_snapshot()
    assert len(log1) == layers(model) == 2
    assert all(type(v) is float and v > 0 for v in log1)
    assert log1 == log2  # same inputs: the same norms, bit for bit
    assert torch.equal(out1.last_hidden_state, out2.last_hidden_state)
    assert torch.equal(out1.pooler_output, out2.pooler_output)
    # the last entry is the norm of the encoder's output
    assert log1[-1] == float(out1.last_hidden_state.norm())
    # a second build logs the same values
    other, oargs, okwargs = build()
    with torch.no_grad():
        other(*oargs, **okwargs)
    assert other.log_snapshot() == log1


def test_log_stays_bounded_and_snapshot_is_a_copy():
    model, args, kwargs = build()
    with torch.no_grad():
        model(*args, **kwargs)
        snap = model.log_snapshot()
        for _ in range(20):
            model(*args, **kwargs)
    assert len(model.logger.history) == layers(model)
    assert snap is not model.logger.history and len(snap) == layers(model)


def test_hook_appends_per_layer_call():
    # the append happens in the hook (once per layer forward), not in the wrapper
    model, args, kwargs = build()
    with torch.no_grad():
        model.bert(**kwargs)
        model.bert(**kwargs)
    assert len(model.logger.history) == 2 * layers(model)


def test_run_compares_the_log(monkeypatch):
    """run.py compares log_snapshot() with eager's: a variant that drops a hook entry is wrong."""

    class DropsLog(run.Variant):
        def make(self, model):
            def fn(*args, **kwargs):
                out = model(*args, **kwargs)
                model.logger.history.pop()
                return out
            return fn

    timing = run.Timing(warmup=0, budget_s=0.0, min_repeats=1, max_repeats=1)
    model, args, kwargs = build()
    with torch.no_grad():
        reference = model(*args, **kwargs)
        reference_log = model.log_snapshot()
        good = run.run_variant(run.VARIANTS["eager"], model, args, kwargs, reference, timing,
                               reference_log=reference_log)
        bad = run.run_variant(DropsLog("drops", "eager", None), model, args, kwargs, reference,
                              timing, reference_log=reference_log)
    assert good["correct"] is True and good["log_checked"], good["checks"]
    assert bad["correct"] is False and bad["error"] is None
    assert any(p.startswith("log: length") for c in bad["checks"].values() for p in c["problems"])


def test_table_shows_magpy_graphs_per_call(monkeypatch):
    """Once magpy's Stats has ``graphs_per_call``, the graphs cell shows it beside the total."""
    import types

    stats = types.SimpleNamespace(monitor_runs=1, mock_runs=5, eager_runs=0, graph_count=7,
                                  records=1, break_reasons=[])
    monkeypatch.setattr(run.magpy, "stats", lambda compiled: stats)
    info = run.graph_info(run.VARIANTS["magpy"], object())
    assert "graphs_per_call" not in info  # today's Stats: the cell is unchanged
    assert run._graphs_cell(info) == "7"
    stats.graphs_per_call = 7
    info = run.graph_info(run.VARIANTS["magpy"], object())
    assert info["graphs_per_call"] == 7 and info["magpy_stats"]["graphs_per_call"] == 7
    row = dict(info, model="bert_log", variant="magpy", compiler="magpy", correct=True, max_abs_diff=0.0)
    cells, _ = run.table_cells([row])
    assert cells[0][5] == "7 (7/call)"
    assert run._graphs_cell({"graphs": 14, "graphs_per_call": 6.5}) == "14 (6.5/call)"
    assert run._graphs_cell({"graphs": None, "graphs_per_call": 3}) == "-"
