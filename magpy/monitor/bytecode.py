"""Per-Python-version bytecode handling, selected once at import.

Everything that depends on the CPython version's instruction set lives in one module per
version (``py311`` today); the rest of the monitor only uses this module's names.
"""
import sys

if sys.version_info[:2] == (3, 11):
    from magpy.monitor.py311 import HANDLERS, NEVER_EXECUTED, binder_code, decode, pops  # noqa: F401
    SUPPORTED = True
else:  # pragma: no cover - exercised only on other interpreters
    SUPPORTED = False
    HANDLERS, NEVER_EXECUTED = {}, {}

    def decode(code, instructions, n):
        from magpy.monitor.frame import unsupported_python_message
        raise RuntimeError(unsupported_python_message())
