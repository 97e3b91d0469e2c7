"""The protocol steps opcodes ask of the monitor: attribute reads and iteration.

``obj.name``, ``iter(obj)`` and ``next(it)`` run type slots from C (``slot_tp_getattr_hook``,
``slot_tp_iter``, ``slot_tp_iternext``).  Run natively, a property's getter or a Python
``__next__`` would execute unmonitored; so where a type defines them in Python, the monitor
takes CPython's steps itself and *enters* the Python code (``Monitor.call``).  Which of a
type's attributes may run Python code is worked out once per type (:func:`attribute_access`).
"""
import types

from magpy.capture.monitor import generators
from magpy.capture.monitor.protocols import NULL, lookup_special, py_method, tp_name, type_lookup

FunctionType = types.FunctionType
_OBJECT_GETATTRIBUTE = object.__dict__["__getattribute__"]
_attribute_access = {}   # type -> _AttributeAccess (classes are assumed not to change)


class ProtocolSteps:
    """The protocol steps of :class:`~magpy.capture.monitor.interpreter.Monitor`, which calls
    (``call``), raises (``reraise``) and follows its call policy (``policy``) for them."""

    def load_attr(self, obj, name):
        """``getattr(obj, name)``, entering Python-level descriptors (properties ...) and a
        Python ``__getattribute__`` / ``__getattr__`` (``slot_tp_getattr_hook``)."""
        tp = type(obj)
        access = attribute_access(tp)
        getattribute, fallback = access.getattribute, access.getattr
        if getattribute is not None and not self.policy.runs_natively(getattribute):
            return self._getattr_hooked(obj, name, getattribute, fallback)
        if name in access.descriptors:
            return self._descriptor_get(obj, tp, name)
        if fallback is None or self.policy.runs_natively(fallback):
            return getattr(obj, name)
        return self._getattr_hooked(obj, name, type_lookup(tp, "__getattribute__"), fallback)

    def _getattr_hooked(self, obj, name, getattribute, fallback):
        """``__getattribute__`` (entered when Python), then ``__getattr__`` on AttributeError."""
        try:
            if type(getattribute) is FunctionType:
                return self.call(getattribute, (obj, name), None)
            return getattribute(obj, name)
        except AttributeError:
            if fallback is None:
                raise
        self.propagating = None   # CPython clears the error before calling __getattr__
        return self.call(fallback, (obj, name), None)

    def _descriptor_get(self, obj, tp, name):
        if type_lookup(tp, "__getattribute__") is not _OBJECT_GETATTRIBUTE:
            return getattr(obj, name)
        raw = type_lookup(tp, name)
        dtp = type(raw)
        if dtp is property:
            if type(raw.fget) is not FunctionType:
                return getattr(obj, name)
            fn, args = raw.fget, (obj,)
        else:
            get = py_method(dtp, "__get__")
            if get is None:
                return getattr(obj, name)
            if type_lookup(dtp, "__set__") is NULL and type_lookup(dtp, "__delete__") is NULL:
                d = getattr(obj, "__dict__", None)
                if type(d) is dict and name in d:
                    return d[name]
            fn, args = get, (raw, obj, tp)
        failed = None
        try:
            return self.call(fn, args, None)
        except AttributeError as e:
            failed = e
        fallback = lookup_special(obj, "__getattr__")
        if fallback is NULL:
            self.reraise(failed)
        return self.call(fallback, (name,), None)

    def get_iter(self, obj):
        """GET_ITER: ``iter(obj)``, entering a Python ``__iter__``."""
        fn = py_method(type(obj), "__iter__")
        if fn is None or self.policy.runs_natively(fn):
            return iter(obj)
        it = self.call(fn, (obj,), None)
        if not generators.is_iterator(it):
            raise TypeError(f"iter() returned non-iterator of type '{tp_name(type(it))}'")
        return it

    def call_next(self, it):
        """``next(it)``, entering a Python ``__next__``; StopIteration propagates."""
        fn = py_method(type(it), "__next__")
        if fn is None or self.policy.runs_natively(fn):
            return next(it)
        return self.call(fn, (it,), None)

    def iter_next(self, it):
        """FOR_ITER's step: the next value, or NULL when ``it`` is exhausted."""
        try:
            return self.call_next(it)
        except StopIteration:
            self.propagating = None
            return NULL


class _AttributeAccess:
    """What reading an attribute of an instance of a type may run in Python."""

    __slots__ = ("descriptors", "getattribute", "getattr")

    def __init__(self, tp):
        self.descriptors = _python_descriptors(tp)
        self.getattribute = py_method(tp, "__getattribute__")
        self.getattr = py_method(tp, "__getattr__")


def attribute_access(tp) -> _AttributeAccess:
    """How attribute reads on ``tp``'s instances go: its Python descriptors (properties ...)
    and its Python ``__getattribute__``/``__getattr__``, if any (cached per type)."""
    access = _attribute_access.get(tp)
    if access is None:
        access = _attribute_access[tp] = _AttributeAccess(tp)
    return access


def _python_descriptors(tp):
    """Names of ``tp``'s attributes whose access runs Python code (properties, descriptors)."""
    names = set()
    for klass in reversed(tp.__mro__):
        for name, value in klass.__dict__.items():
            vt = type(value)
            if (vt is property and type(value.fget) is FunctionType) or (
                    vt is not FunctionType and vt is not property and py_method(vt, "__get__") is not None):
                names.add(name)
    return frozenset(names)
