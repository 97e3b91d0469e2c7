"""torch's function-mode stack as the program sees it in eager: without magpy's recorder.

A recording run pushes :class:`magpy.graphs.opgraph.OpRecorder`, a ``TorchFunctionMode``, to see the
program's tensor operations.  A program (or a library) that asks torch about the mode stack
would see it and take another path than eager does: ``torch._C._is_torch_function_mode_enabled()``
is True under the recorder, a silent wrong result where a branch depends on it.  The queries
the program makes are intrinsics that answer from the stack less magpy's own modes; torch's
Python that runs natively (``F.*``'s ``has_torch_function``) keeps seeing the recorder, which
is how the recorder sees those operations.
"""
from __future__ import annotations

import torch
import torch.overrides

from magpy.graphs.opgraph import OpRecorder


def program_modes() -> list:
    """The function modes on the stack, bottom first, less magpy's recorder."""
    stack = (torch._C._get_function_stack_at(i) for i in range(torch._C._len_torch_function_stack()))
    return [m for m in stack if not isinstance(m, OpRecorder)]


def _no_arguments(answer):
    def intrinsic(monitor, args, kwargs):
        if args or kwargs:
            raise TypeError("takes no arguments")
        return answer()
    return intrinsic


def _stack_at(monitor, args, kwargs):
    (level,) = args
    return program_modes()[level]


def _mode_enabled() -> bool:
    return torch._C._is_torch_function_mode_enabled() and bool(program_modes())


def _current_mode():
    modes = program_modes()
    return modes[-1] if modes else None


# (query, intrinsic) for the recording's call policy.
INTRINSICS = (
    (torch._C._len_torch_function_stack, _no_arguments(lambda: len(program_modes()))),
    (torch._C._get_function_stack_at, _stack_at),
    (torch._C._is_torch_function_mode_enabled, _no_arguments(_mode_enabled)),
    (torch.overrides._is_torch_function_mode_enabled, _no_arguments(_mode_enabled)),
    (torch.overrides._get_current_function_mode_stack, _no_arguments(program_modes)),
    (torch.overrides._get_current_function_mode, _no_arguments(_current_mode)),
)
