"""Exceptions raised by the program reach the user with the program's own traceback.

Compared with the same call run eagerly: the same exception, the same frames (file,
function, line) in the same order, the same chaining, and at most two magpy frames on top
(the compiled callable and the cache's call).
"""
import traceback

import pytest
import torch

import magpy
from magpy.capture.monitor.tracebacks import is_magpy

# The suite's re-record check wraps RecordCache.miss with a function of tests/: off here,
# where every frame of the traceback is compared.
pytestmark = pytest.mark.magpy_rerecords


class Check(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)

    def width(self, x):
        if x.shape[-1] != 4:
            raise ValueError(f"bad width {x.shape[-1]}")
        return x

    def forward(self, x):
        return self.lin(self.width(x))


class Outer(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.inner = Check()

    def forward(self, x):
        return self.inner(x)


def chained(x):
    try:
        {}["missing"]
    except KeyError:
        raise ValueError("while looking up")


def chained_from_none(x):
    try:
        {}["missing"]
    except KeyError:
        raise ValueError("while looking up") from None


def shape_error(lin, x):
    return lin(x) * 2          # raised inside torch, in C: nn.Linear's frames stay


def _frames(exc):
    return [(fs.filename, fs.name, fs.lineno) for fs in traceback.extract_tb(exc.__traceback__)]


def _raised(fn, *args):
    with pytest.raises(Exception) as info:
        fn(*args)
    return info.value


def _compare(fn, *args, backend="eager"):
    eager = _raised(fn, *args)
    compiled = _raised(magpy.compile(fn, backend=backend), *args)
    assert type(compiled) is type(eager) and str(compiled) == str(eager)
    got, want = _frames(compiled), _frames(eager)
    ours = [i for i, f in enumerate(got) if is_magpy(f[0])]
    assert ours == [1, 2]      # under the caller's frame: the compiled callable, the cache's call
    assert got[:1] + got[3:] == want
    return eager, compiled


@pytest.mark.parametrize("make", [Outer, Check], ids=["two modules down", "one module"])
def test_program_exception_shows_the_program_frames(make):
    eager, compiled = _compare(make(), torch.randn(2, 5))
    assert _frames(compiled)[-1][1] == "width"


def test_exception_inside_torch_keeps_torch_frames():
    lin = torch.nn.Linear(4, 3)
    eager, compiled = _compare(shape_error, lin, torch.randn(2, 5))
    assert any("torch" in f[0] for f in _frames(compiled))


@pytest.mark.parametrize("fn", [chained, chained_from_none])
def test_chaining_is_eager_s(fn):
    eager, compiled = _compare(fn, torch.ones(2))
    assert type(compiled.__context__) is KeyError
    assert compiled.__suppress_context__ is eager.__suppress_context__
    assert _frames(compiled.__context__) == _frames(eager.__context__)


def test_exception_caught_and_inspected_by_the_program():
    def program(x):
        try:
            Outer()(x)
        except ValueError as e:
            return [(fs.name, fs.line) for fs in traceback.extract_tb(e.__traceback__)]

    x = torch.randn(2, 5)
    assert magpy.compile(program, backend="eager")(x) == program(x)


def test_magpy_frames_are_at_most_two_after_a_record_exists():
    f = magpy.compile(Outer(), backend="eager")
    f(torch.randn(2, 4))                               # a record: the next call misses it
    exc = _raised(f, torch.randn(2, 5))
    assert sum(is_magpy(fs[0]) for fs in _frames(exc)) <= 2
