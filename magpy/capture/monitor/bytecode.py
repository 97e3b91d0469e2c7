"""Per-Python-version bytecode handling, selected once at import.

Everything that depends on the CPython version's instruction set lives in one module per
version (``py311``, ``py312``, ``py313``, sharing :mod:`magpy.capture.monitor.opcodes`); the rest of
magpy only uses this module's names.  ``decode`` gives a code object's dispatch table and its
instructions as observers see them: the rules above the monitor speak one vocabulary of
instruction names (3.11's, plus the instructions later versions add), whatever the version.
``call_layout`` says where the callable sits among a call's inputs (3.13 moved it).
``DICT_VERSION`` is the other interpreter detail magpy relies on: a function giving a
dict's version tag, which changes on every change of its contents (PEP 509), or None.
"""
import sys

from magpy.capture.monitor.opcodes import (  # noqa: F401 - the facts every version shares
    BACKWARD_JUMP,
    CELL_MAKE,
    CELL_WRITES,
    FAST_MOVES,
    FAST_READS,
    FAST_STORES,
    FAST_WRITES,
    FORWARD_JUMP,
    INPLACE_BINARY,
    ITER_MAKE,
    ITER_NEXT,
    binder_code,
    fast_slots,
    pops,
)

VERSIONS = ((3, 11), (3, 12), (3, 13))
SUPPORTED = sys.version_info[:2] in VERSIONS

if sys.version_info[:2] == (3, 11):
    from magpy.capture.monitor import py311 as _version
elif sys.version_info[:2] == (3, 12):
    from magpy.capture.monitor import py312 as _version
elif sys.version_info[:2] == (3, 13):
    from magpy.capture.monitor import py313 as _version
else:  # pragma: no cover - exercised only on other interpreters
    from magpy.capture.monitor import unsupported as _version

HANDLERS = _version.HANDLERS
NEVER_EXECUTED = _version.NEVER_EXECUTED
FORMS = _version.FORMS
decode = _version.decode
call_layout = _version.call_layout


def call_operands(inputs) -> tuple:
    """The callable and positional arguments of a CALL's inputs (an observer's view)."""
    callee, first = call_layout(inputs)
    return inputs[callee], inputs[first:]
BRANCH_JUMPS = _version.BRANCH_JUMPS
LOOP_JUMPS = _version.LOOP_JUMPS
EFFECT_OPS = _version.EFFECT_OPS
CALL_SEQUENCE = _version.CALL_SEQUENCE
THROW_LEAVES_YIELD_FROM = _version.THROW_LEAVES_YIELD_FROM
LOCALS_PROXY = _version.LOCALS_PROXY
CLOSE_RETURNS_VALUE = _version.CLOSE_RETURNS_VALUE
# None, or (3.13) what makes objects' attribute stores move their __dict__'s version tag
# before DICT_VERSION can tell that their attributes changed: own_dicts(objects) -> bool.
OWN_DICTS = _version.own_dicts


def _dict_version():
    # Where the version module trusts ma_version_tag (see TRUSTS_DICT_VERSION), and this torch
    # reads it: a probe checks that a change moves it.
    if not _version.TRUSTS_DICT_VERSION:
        return None
    try:
        from torch._C._dynamo.guards import dict_version
    except ImportError:  # pragma: no cover - torch without dynamo's guard helpers
        return None
    d = {}
    before = dict_version(d)
    d[0] = 0
    return dict_version if dict_version(d) != before else None


DICT_VERSION = _dict_version()
