"""Small pieces of CPython's object protocols, as the interpreter's C code performs them.

These are lookups CPython does on *types* (``_PyType_Lookup``, ``_PyObject_LookupSpecial``)
and the names it prints in error messages (``tp_name``, ``_PyObject_FunctionStr``).  The
monitor needs them to decide whether a protocol step runs a Python-level method (which it
then enters) and to raise exactly CPython's errors.
"""
import types


class _Null:
    """The interpreter's NULL: an unbound local, or the NULL that LOAD_GLOBAL/PUSH_NULL push."""

    __slots__ = ()

    def __repr__(self):
        return "NULL"


NULL = _Null()

FunctionType = types.FunctionType
_HEAPTYPE = 1 << 9


def cell_value(cell):
    """The contents of a cell, or NULL when it is empty."""
    try:
        return cell.cell_contents
    except ValueError:
        return NULL


# Functions another thread puts on a type for a while: attribute name -> {their code: the
# attribute they stand in for} (add_patch).
_PATCHES: dict[str, dict] = {}


def add_patch(name: str, code: types.CodeType, original) -> None:
    """Type lookups of ``name`` see ``original`` where they find a function of ``code``: a
    patch that another thread puts on a type while it works (torch.fx's tracing patches
    ``nn.Module``: magpy.capture.callees.fx_tracing) is not the program's."""
    _PATCHES.setdefault(name, {})[code] = original


def type_lookup(tp, name):
    """``_PyType_Lookup``: the raw attribute ``name`` along ``tp``'s MRO, or NULL."""
    for klass in tp.__mro__:
        d = klass.__dict__
        if name in d:
            raw = d[name]
            patched = _PATCHES.get(name)   # (one miss for every name but the patched ones)
            return patched.get(raw.__code__, raw) if patched and type(raw) is FunctionType else raw
    return NULL


def py_method(tp, name):
    """The Python function implementing special method ``name`` of ``tp``, else None.

    The cheap ``getattr`` on the type filters out the common native case; the MRO walk
    confirms the raw attribute really is a plain function (not e.g. a staticmethod).
    """
    if type(getattr(tp, name, None)) is not FunctionType:
        return None
    raw = type_lookup(tp, name)
    return raw if type(raw) is FunctionType else None


def lookup_special(obj, name):
    """``_PyObject_LookupSpecial``: look ``name`` up on the type and bind it to ``obj``."""
    tp = type(obj)
    raw = type_lookup(tp, name)
    if raw is NULL:
        return NULL
    get = getattr(type(raw), "__get__", None)
    if get is None:
        return raw
    return get(raw, obj, tp)


def tp_name(tp) -> str:
    """The C-level ``tp_name`` CPython prints: qualified by module for static types."""
    if tp.__flags__ & _HEAPTYPE or tp.__module__ == "builtins":
        return tp.__name__
    return f"{tp.__module__}.{tp.__name__}"


def function_str(func) -> str:
    """``_PyObject_FunctionStr``: how CPython names a callable in call-site errors."""
    try:
        qualname = func.__qualname__
    except AttributeError:
        return str(func)
    module = getattr(func, "__module__", None)
    if module is not None and module != "builtins":
        return f"{module}.{qualname}()"
    return f"{qualname}()"


def not_iterable(obj) -> bool:
    """True when CPython would report ``obj`` as not iterable at a ``*`` site."""
    tp = type(obj)
    if type_lookup(tp, "__iter__") is not NULL:
        return False
    return type_lookup(tp, "__getitem__") is NULL or issubclass(tp, dict)


def set_context(exc, context):
    """Implicit exception chaining as ``_PyErr_SetObject`` does it, cycles broken."""
    if context is None or context is exc:
        return
    o = context
    seen = set()
    while id(o) not in seen:  # a pre-existing cycle not through exc must not hang us
        seen.add(id(o))
        nxt = o.__context__
        if nxt is None:
            break
        if nxt is exc:
            o.__context__ = None
            break
        o = nxt
    exc.__context__ = context
