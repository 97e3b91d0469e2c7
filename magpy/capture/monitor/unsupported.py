"""The bytecode module of an interpreter the monitor does not run: nothing executes.

``magpy.compile`` checks ``bytecode.SUPPORTED`` first and raises ``UnsupportedPythonError``;
these names only let the modules above the monitor import.
"""
HANDLERS, NEVER_EXECUTED, FORMS = {}, {}, ()
BRANCH_JUMPS, LOOP_JUMPS, EFFECT_OPS = {}, {}, frozenset()
CALL_SEQUENCE, THROW_LEAVES_YIELD_FROM, TRUSTS_DICT_VERSION = ("CALL",), False, False
LOCALS_PROXY = CLOSE_RETURNS_VALUE = False
own_dicts = None


def call_layout(inputs):
    """Nothing is observed on this interpreter."""
    return 0, 1


def decode(code, instructions, n):
    """Refuse: this interpreter's bytecode is not one the monitor executes."""
    from magpy.capture.monitor.frame import unsupported_python_message
    raise RuntimeError(unsupported_python_message())
