"""Backends: graph compilers that turn a recorded ``torch.fx.GraphModule`` into a callable.

A backend is ``(gm, example_inputs) -> callable``; the callable takes the graph inputs
positionally and returns the graph outputs as a sequence.  Names map to built-in ones.
"""
from __future__ import annotations

from typing import Callable

import torch

from magpy.errors import BackendError

Backend = Callable[[torch.fx.GraphModule, list], Callable]


def _eager(gm: torch.fx.GraphModule, example_inputs: list) -> Callable:
    return gm.forward


def _inductor(gm: torch.fx.GraphModule, example_inputs: list) -> Callable:
    from torch._inductor.compile_fx import compile_fx
    return compile_fx(gm, example_inputs)


BACKENDS: dict[str, Backend] = {"eager": _eager, "inductor": _inductor}


def resolve(backend: str | Backend) -> tuple[str, Backend]:
    """``(name, backend callable)`` for a backend name or a user's callable."""
    if callable(backend):
        return getattr(backend, "__name__", type(backend).__name__), backend
    if not isinstance(backend, str):
        raise TypeError(f"backend must be a name or a callable (gm, example_inputs) -> callable, "
                        f"not {type(backend).__name__}")
    fn = BACKENDS.get(backend)
    if fn is None:
        raise BackendError(f"unknown backend {backend!r}; available: {', '.join(sorted(BACKENDS))}, "
                           "or any callable (gm, example_inputs) -> callable")
    return backend, fn
