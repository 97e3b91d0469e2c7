"""Differential harness: run a program natively and under the monitor, compare everything.

A case is a zero-argument *setup* callable returning ``(fn, args, kwargs)`` built from
fresh objects, so the native run and the monitored run start from equal, independent
states.  After each run the harness compares

- the returned value, or the raised exception (type and message),
- everything written to stdout,
- the arguments afterwards (in-place mutations are side effects too),
- an optional ``observe()`` snapshot of external state (globals, class attributes, ...),
  taken after each run; ``reset()`` restores that state before each run.

Values are compared structurally: tensors with ``torch.equal``, floats treating NaN as
equal, containers element-wise, plain objects by type name and ``vars()``.
"""
from __future__ import annotations

import contextlib
import io
import math
import os
import types
from typing import Any, Callable

import magpy.capture.monitor as monitor

_MISSING = object()


def same(a: Any, b: Any, _seen: set | None = None) -> bool:
    """Structural equality that treats independent-but-equal object graphs as equal."""
    if _seen is None:
        _seen = set()
    key = (id(a), id(b))
    if key in _seen:
        return True
    ta, tb = type(a), type(b)
    if ta is not tb:
        # Classes defined inside the case run twice are distinct objects with one name.
        if ta.__qualname__ != tb.__qualname__ or ta.__module__ != tb.__module__:
            return False
    try:
        import torch
        if isinstance(a, torch.Tensor):
            return (a.dtype == b.dtype and a.shape == b.shape and a.requires_grad == b.requires_grad
                    and bool(torch.equal(a.detach(), b.detach())))
    except ImportError:  # pragma: no cover - torch is a dependency
        pass
    if isinstance(a, float):
        return (math.isnan(a) and math.isnan(b)) or a == b
    if isinstance(a, BaseException):
        return str(a) == str(b) and same(a.args, b.args, _seen)
    if isinstance(a, (int, str, bytes, bool, type(None), complex, range, slice)):
        return a == b
    if isinstance(a, (types.FunctionType, types.BuiltinFunctionType, type, types.ModuleType,
                      types.CodeType)):
        return a is b or getattr(a, "__qualname__", None) == getattr(b, "__qualname__", None)
    _seen.add(key)
    if isinstance(a, dict):
        return (list(a.keys()) == list(b.keys()) if all(_plain_key(k) for k in a)
                else len(a) == len(b)) and all(same(va, vb, _seen) for va, vb in zip(a.values(), b.values()))
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(same(x, y, _seen) for x, y in zip(a, b))
    if isinstance(a, (set, frozenset)):
        return a == b
    if hasattr(a, "__dict__") and not isinstance(a, types.GeneratorType):
        return same(vars(a), vars(b), _seen)
    try:
        return bool(a == b)
    except Exception:
        return repr(a) == repr(b)


def _plain_key(k: Any) -> bool:
    return isinstance(k, (int, str, bytes, bool, float, type(None), tuple))


class Outcome:
    """What one run of a case produced."""

    def __init__(self, value: Any, error: BaseException | None, stdout: str, args: Any, observed: Any):
        self.value, self.error, self.stdout, self.args, self.observed = value, error, stdout, args, observed

    def describe(self) -> str:
        if self.error is not None:
            what = f"raised {type(self.error).__name__}: {self.error}"
        else:
            what = f"returned {self.value!r}"
        return f"{what}; stdout={self.stdout!r}; args after={self.args!r}; observed={self.observed!r}"


def _run(runner: Callable, setup: Callable, observe: Callable | None, reset: Callable | None) -> Outcome:
    if reset is not None:
        reset()
    fn, args, kwargs = setup()
    out = io.StringIO()
    value, error = None, None
    with contextlib.redirect_stdout(out):
        try:
            value = runner(fn, *args, **kwargs)
        except KeyboardInterrupt:
            raise
        except BaseException as e:  # noqa: BLE001 - every exception is a result to compare
            error = e
    observed = observe() if observe is not None else None
    return Outcome(value, error, out.getvalue(), (args, kwargs), observed)


def _native(fn, *args, **kwargs):
    return fn(*args, **kwargs)


def check(setup: Callable[[], tuple], *, observe: Callable[[], Any] | None = None,
          reset: Callable[[], None] | None = None, runner: Callable | None = None) -> Outcome:
    """Assert that ``setup()``'s program behaves identically natively and under the monitor.

    Returns the monitored outcome so a test can add its own assertions.
    """
    native = _run(_native, setup, observe, reset)
    if runner is None:
        # MAGPY_DIFF_RUNNER=native checks a corpus against itself (is each case deterministic?).
        runner = _native if os.environ.get("MAGPY_DIFF_RUNNER") == "native" else monitor.run
    monitored = _run(runner, setup, observe, reset)
    problems = []
    if (native.error is None) != (monitored.error is None):
        problems.append("one run raised and the other did not")
    elif native.error is not None:
        if type(native.error) is not type(monitored.error):
            problems.append("different exception types")
        elif str(native.error) != str(monitored.error):
            problems.append("different exception messages")
    elif not same(native.value, monitored.value):
        problems.append("different results")
    if native.stdout != monitored.stdout:
        problems.append("different stdout")
    if not same(native.args, monitored.args):
        problems.append("different argument state afterwards")
    if not same(native.observed, monitored.observed):
        problems.append("different observed state afterwards")
    if problems:
        raise AssertionError(
            f"{'; '.join(problems)}\n  native:    {native.describe()}\n  monitored: {monitored.describe()}")
    return monitored


def case(fn: Callable, *args: Any, **kwargs: Any) -> Callable[[], tuple]:
    """A setup for ``fn(*args, **kwargs)`` where args are immutable or rebuilt by the caller."""
    return lambda: (fn, args, kwargs)
