"""Tracebacks that show the program's frames, not the monitor's.

Natively, an exception passing through a frame gains a traceback entry for that frame at
its current line.  Under the monitor the exception passes through the monitor's own host
frames instead (``execute``, the opcode handlers ...).  So whenever an exception passes a
monitored frame, the monitor drops its own entries and adds one for the program's frame.

Python cannot create frame objects, but it can run a tiny code object compiled with the
program's file name, function name and line number: the frame that code raises in is a real
frame object with those values (the technique template engines use to show template lines
in tracebacks).  ``tb_lasti`` is -1, so the traceback module prints the line without
pointing at columns of the stub.
"""
from __future__ import annotations

import functools
import os
import sys
import types

# magpy's own source files, wherever in the package they sit
MAGPY_DIR = os.path.dirname(os.path.abspath(sys.modules["magpy"].__file__)) + os.sep


class _Stub(Exception):
    pass


@functools.lru_cache(maxsize=4096)
def _stub_code(filename: str, name: str, lineno: int) -> types.CodeType:
    return compile("\n" * (max(lineno, 1) - 1) + "raise _Stub", filename, "exec").replace(co_name=name)


def frame_object(filename: str, name: str, lineno: int) -> types.FrameType:
    """A real frame object that reports ``filename``, ``name`` and ``lineno``."""
    try:
        exec(_stub_code(filename, name, lineno), {"_Stub": _Stub})
    except _Stub as e:
        return e.__traceback__.tb_next.tb_frame
    raise AssertionError("unreachable: the stub always raises")


def is_magpy(filename: str) -> bool:
    """Code of magpy itself (the monitor, its thunks, generated guards and mocks)."""
    return filename.startswith(MAGPY_DIR) or filename.startswith("<magpy")


def program_entries(tb: types.TracebackType | None) -> types.TracebackType | None:
    """``tb`` without magpy's own entries, in the same order (natively run library code stays)."""
    kept = []
    while tb is not None:
        if not is_magpy(tb.tb_frame.f_code.co_filename):
            kept.append(tb)
        tb = tb.tb_next
    # The usual shape is magpy's entries on top of entries already rebuilt: reuse the longest
    # tail that is intact (contiguous to the end of the chain).
    i = len(kept)
    if kept and kept[-1].tb_next is None:
        i -= 1
        while i > 0 and kept[i - 1].tb_next is kept[i]:
            i -= 1
    chain = kept[i] if i < len(kept) else None
    for entry in reversed(kept[:i]):
        chain = types.TracebackType(chain, entry.tb_frame, entry.tb_lasti, entry.tb_lineno)
    return chain


def with_entry(tb: types.TracebackType | None, code: types.CodeType, lineno: int) -> types.TracebackType:
    """``tb`` after the exception passed a monitored frame of ``code`` at ``lineno``."""
    frame = frame_object(code.co_filename, code.co_name, lineno)
    return types.TracebackType(tb, frame, -1, lineno)


def user_stacklevel() -> int:
    """The ``warnings.warn`` stacklevel, for the function calling this one, that points at the
    innermost caller outside magpy (the user's call)."""
    f, level = sys._getframe(1), 1
    while f is not None and is_magpy(f.f_code.co_filename):
        f, level = f.f_back, level + 1
    return level
