"""The monitor: runs real Python functions instruction by instruction.

``run(fn, *args, **kwargs)`` executes ``fn``'s real CPython bytecode (3.11, 3.12 or 3.13),
one instruction at a time, each carried out by CPython's own operation on the real values,
and returns its result.  Attach :class:`Observer` instances to a :class:`Monitor` to see
every execution state (instruction, inputs, outputs, frame) and every call.
"""
from magpy.capture.monitor.frame import NULL, Frame, code_info
from magpy.capture.monitor.interpreter import Monitor, UnsupportedPythonError, shared_default_policy
from magpy.capture.monitor.observer import Observer
from magpy.capture.monitor.policy import CallPolicy

__all__ = ["run", "Monitor", "Observer", "Frame", "CallPolicy", "shared_default_policy", "NULL",
           "UnsupportedPythonError", "code_info"]


def run(fn, /, *args, **kwargs):
    """Run ``fn(*args, **kwargs)`` under a fresh monitor and return its result.

    Exceptions propagate with the same type and message as in a native call, and the
    program's side effects are those of a native call.
    """
    return Monitor().run(fn, *args, **kwargs)
