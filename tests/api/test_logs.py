"""MAGPY_LOGS: what each topic logs (issue 11), checked on the records' content."""
from __future__ import annotations

import logging
import subprocess
import sys
import textwrap

import pytest
import torch

import magpy
from magpy import logs
from tests.harness.compile_harness import fresh_magpy  # noqa: F401 - autouse fixture

THRESHOLD = 0.5


class Scaled(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.scale = 2.0

    def forward(self, x):
        return x * self.scale + THRESHOLD


@pytest.fixture
def recompiles(caplog):
    logs.configure("recompiles")
    caplog.set_level(logging.INFO, logger="magpy")
    yield caplog
    logs.configure(None)


@pytest.mark.magpy_rerecords
def test_recompiles_name_the_failing_guard(recompiles):
    global THRESHOLD
    m = Scaled()
    c = magpy.compile(m, backend="eager")
    c(torch.randn(8, 4))
    magpy.config.cache_size_limit = 100
    try:
        steps = [
            (lambda: c(torch.randn(9, 4)), "tensor 'x' size mismatch at index 0. expected 8, actual 9"),
            (lambda: c(torch.randn(8, 4, dtype=torch.float64)), "tensor 'x' dtype mismatch"),
        ]
        for call, words in steps:
            recompiles.clear()
            call()
            messages = [r.getMessage() for r in recompiles.records]
            assert any(words in m for m in messages), messages
        recompiles.clear()
        THRESHOLD = 0.7
        c(torch.randn(8, 4))
        assert any("THRESHOLD: expected 0.5, got 0.7" in r.getMessage() for r in recompiles.records), \
            [r.getMessage() for r in recompiles.records]
        recompiles.clear()
        m.scale = 3.0
        c(torch.randn(8, 4))
        assert any("self.scale: expected 2.0, got 3.0" in r.getMessage() for r in recompiles.records), \
            [r.getMessage() for r in recompiles.records]
    finally:
        THRESHOLD = 0.5
        magpy.config.cache_size_limit = 8


def test_breaks_and_graphs_topics(caplog):
    logs.configure("breaks,graphs")
    caplog.set_level(logging.INFO, logger="magpy")
    try:
        def f(x):
            y = x * 2
            v = y.sum().tolist()
            return y + v
        magpy.compile(f, backend="eager")(torch.ones(3))
    finally:
        logs.configure(None)
    text = "\n".join(r.getMessage() for r in caplog.records)
    assert "eager step: Tensor.tolist reads tensor data into Python at" in text and __file__ in text, text
    assert text.count("compiled a graph of") == 2, text


def test_unknown_topic_is_a_clear_error():
    with pytest.raises(ValueError, match="unknown topic.*recompile.*known: recompiles"):
        logs.configure("recompile")


def test_env_switch_prints_to_stderr():
    prog = textwrap.dedent("""
        import torch, magpy
        f = magpy.compile(lambda x: x * 2, backend="eager")
        f(torch.ones(2)); f(torch.ones(3))
    """)
    out = subprocess.run([sys.executable, "-c", prog], env={"MAGPY_LOGS": "recompiles", "PATH": ""},
                         capture_output=True, text=True, timeout=120)
    assert "[magpy.recompiles]" in out.stderr, out.stderr
    assert "size mismatch at index 0. expected 2, actual 3" in out.stderr, out.stderr


def _warnings_of(call):
    import warnings
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        call()
    return [w for w in caught if "magpy" in str(w.message)]


@pytest.mark.magpy_rerecords
def test_magpys_warnings_point_at_the_users_call(monkeypatch):
    # A capture failure, a backend failure and the cache limit: each warning's file is this one.
    from magpy.records import record

    def boom(*a, **k):
        raise RuntimeError("injected fault")

    monkeypatch.setattr(record, "generate", boom)
    f = magpy.compile(lambda x: x + 1, backend="eager")
    caught = _warnings_of(lambda: f(torch.ones(2)))
    assert caught and all(w.filename == __file__ for w in caught), [(w.filename, str(w.message)) for w in caught]
    monkeypatch.undo()

    def failing_backend(gm, example):
        raise RuntimeError("backend fault")

    g = magpy.compile(lambda x: x * 3, backend=failing_backend)
    caught = _warnings_of(lambda: g(torch.ones(2)))
    assert caught and all(w.filename == __file__ for w in caught), [(w.filename, str(w.message)) for w in caught]

    magpy.config.cache_size_limit = 1
    try:
        h = magpy.compile(lambda x: x - 1, backend="eager")
        h(torch.ones(2))
        caught = _warnings_of(lambda: h(torch.ones(3)))
        assert caught and all(w.filename == __file__ for w in caught), [(w.filename, str(w.message)) for w in caught]
    finally:
        magpy.config.cache_size_limit = 8
