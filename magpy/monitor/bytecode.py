"""Per-Python-version bytecode handling, selected once at import.

Everything that depends on the CPython version's instruction set lives in one module per
version (``py311`` today); the rest of the monitor only uses this module's names.
``DICT_VERSION`` is the other interpreter detail magpy relies on: a function giving a
dict's version tag, which changes on every change of its contents (PEP 509), or None.
"""
import sys


def _dict_version():
    # ma_version_tag exists up to 3.13 (deprecated since 3.12): trust it on 3.11 only.
    try:
        from torch._C._dynamo.guards import dict_version
    except ImportError:  # pragma: no cover - torch without dynamo's guard helpers
        return None
    d = {}
    before = dict_version(d)
    d[0] = 0
    return dict_version if dict_version(d) != before else None


DICT_VERSION = _dict_version() if sys.version_info[:2] == (3, 11) else None

if sys.version_info[:2] == (3, 11):
    from magpy.monitor.py311 import (  # noqa: F401
        BACKWARD_JUMP,
        BRANCH_JUMPS,
        CELL_MAKE,
        CELL_WRITES,
        EFFECT_OPS,
        FORWARD_JUMP,
        HANDLERS,
        ITER_MAKE,
        ITER_NEXT,
        LOOP_JUMPS,
        NEVER_EXECUTED,
        binder_code,
        decode,
        pops,
    )
    SUPPORTED = True
else:  # pragma: no cover - exercised only on other interpreters
    SUPPORTED = False
    HANDLERS, NEVER_EXECUTED = {}, {}
    BRANCH_JUMPS, LOOP_JUMPS, FORWARD_JUMP, EFFECT_OPS = {}, {}, None, frozenset()
    BACKWARD_JUMP = None
    CELL_MAKE, CELL_WRITES = None, frozenset()
    ITER_MAKE = ITER_NEXT = None

    def decode(code, instructions, n):
        from magpy.monitor.frame import unsupported_python_message
        raise RuntimeError(unsupported_python_message())
