"""Attribute reads (``obj.name``, ``getattr``, ``hasattr``) as Python's lookup made them: an
instance ``__dict__``, an nn.Module's parameters, buffers and submodules, a ``__slots__``
member, a class of the MRO or the metaclass, or none of them.  What the guard checks is what
the lookup looked at, so a guard that passes gives the same value: where the lookup found the
name, and that no class it looked at before (one that can change) has it.
"""
from __future__ import annotations

import sys
import types

import torch

from magpy.capture import annotations as ann
from magpy.capture.callees import torchscript
from magpy.capture.monitor.protocol_steps import attribute_access
from magpy.capture.monitor.protocols import NULL, py_method, type_lookup
from magpy.capture.refgraph.breaker import Breaker, is_library_file
from magpy.capture.refgraph.graph import ATTR, DICT, GETATTR, ITEM, Kind, RefGraph
from magpy.capture.refgraph.reads import CONTAINERS, MISSING, Reads

_HEAPTYPE = 1 << 9   # Py_TPFLAGS_HEAPTYPE: a class defined in Python (its attributes can change)
MODULE_DICTS = ("_parameters", "_buffers", "_modules")   # an nn.Module's dicts its __setattr__ fills
_METHOD_PARTS = ("__func__", "__self__")   # a bound method's C members


class AttributeReads:
    """What the program's attribute lookups read of objects and classes from outside."""

    def __init__(self, graph: RefGraph, breaker: Breaker, reads: Reads):
        self.g = graph
        self.dynamic = breaker
        self.reads = reads

    def read_attr(self, obj, name, value):
        """``value = obj.name`` where ``obj`` may be a node."""
        node = self.reads.node(obj)
        if node is None or node.kind is Kind.VALUE:
            return
        if node.kind is Kind.TENSOR:
            # A leaf's .grad as the call found it (not one it wrote since): state it read.
            snap = node.snapshot
            if name in ann.TORCH_REFERENCES and snap is not None and snap.get(name, MISSING) is value:
                self.g.child(node, ATTR, name, value)
            return
        if node.kind is Kind.METHOD:
            self._method_attr(node, obj, name, value)
            return
        tp = type(obj)
        if isinstance(obj, types.ModuleType):
            if not ann.is_builtin_module_attr(obj) and not self.g.overwritten(node, ATTR, name):
                self.g.child(node, ATTR, name, value)
            return
        if tp is types.FunctionType and name in obj.__dict__:
            # A function's own attribute (``step.calls``, ``fn.cache``): state as a module's
            # are, which the program or its caller changes.
            if not self.g.overwritten(node, ATTR, name):
                self.g.child(node, ATTR, name, value)
            return
        if name in attribute_access(tp).descriptors:
            return  # a property or Python descriptor: the monitor entered it
        if isinstance(obj, type):
            self._class_attr(obj, name, value)
            return
        self._instance_attr(node, obj, name, value)

    def _instance_attr(self, node, obj, name, value):
        """``value = obj.name`` for an instance: its ``__dict__``, its ScriptModule or nn.Module
        stores, a class of its MRO, or a ``__getattr__``."""
        tp = type(obj)
        d = getattr(obj, "__dict__", None)
        snap = node.snapshot if type(node.snapshot) is dict else None
        if type(d) is dict and (name in d or (snap is not None and name in snap)):
            if snap is not None and snap.get(name, MISSING) is value \
                    and not self.g.overwritten(node, ATTR, name):
                self.g.child(node, ATTR, name, value)
            return
        getattr_fn = py_method(tp, "__getattr__")
        if getattr_fn in torchscript.NATIVE_GETATTRS and type_lookup(tp, name) is NULL:
            # A ScriptModule's __getattr__ (torch's, run natively) reads its C++ module, which
            # holds parameters, submodules and attributes alike: the guard asks it again.
            self.g.child(node, GETATTR, name, value)
            return
        if isinstance(obj, torch.nn.Module):
            for dname in MODULE_DICTS:
                store = d.get(dname)
                if store is not None and name in store:
                    dnode = self.g.child(node, ATTR, dname, store)
                    self.reads.read_item(dnode, name, value)
                    return
        for i, klass in enumerate(tp.__mro__):
            if name in klass.__dict__:
                if type(d) is dict:
                    node.mark_absent(ATTR, name)
                for before in tp.__mro__[:i]:
                    # Found on a base class: a class earlier in the MRO could gain it.
                    if _mutable_class(before):
                        self.g.const(before).mark_absent(ATTR, name)
                self._class_attr(klass, name, klass.__dict__[name], raw=True)
                if type(klass.__dict__[name]) is types.MemberDescriptorType \
                        and (ATTR, name) not in node.written:
                    # A __slots__ attribute: the object's own value, as the call found it.
                    self.g.child(node, ATTR, name, value)
                return
        # Neither the object nor its class has it: a Python __getattr__ made the value.  The
        # monitor enters those; one that ran natively read unseen state.
        if getattr_fn is not None and getattr_fn is not torch.nn.Module.__getattr__ \
                and self.dynamic.monitor.policy.runs_natively(getattr_fn):
            self.dynamic(f"{tp.__qualname__}.{name} read through {getattr_fn.__qualname__}, "
                         "which runs natively")
            return
        # (where the object or a class gains it, __getattr__ is not asked)
        self.missing_attr(obj, name)

    def _method_attr(self, node, m, name, value):
        # A bound method's own members are its function and its object (the nodes that guard
        # it, RefGraph._method_parts); the rest of its attributes are its function's.  (The
        # method type's other entries, its special methods and ``__doc__``, run no program
        # code and say nothing the function's identity does not.)
        if name in _METHOD_PARTS:
            self.g.child(node, GETATTR, name, value)
        elif type_lookup(types.MethodType, name) is NULL:
            self.read_attr(m.__func__, name, value)

    def missing_attr(self, obj, name) -> None:
        """``obj`` has no attribute ``name`` (``getattr`` took its default, ``hasattr`` said
        False, an AttributeError): neither it nor a class of its MRO that can gain one may
        have it."""
        node = self.reads.node(obj)
        if node is None or type(name) is not str or node.kind is Kind.TENSOR:
            return
        if node.kind is Kind.METHOD:
            self.missing_attr(obj.__func__, name)   # (looked up on its function)
            return
        d = getattr(obj, "__dict__", None)
        if node.kind in (Kind.OBJECT, Kind.STATIC) and type(d) in (dict, types.MappingProxyType) \
                and name not in (node.snapshot if type(node.snapshot) is dict else {}):
            node.mark_absent(ATTR, name)
        elif node.kind in CONTAINERS and type(d) is dict:
            # A container subclass's instance attributes (a FrozenDict's): not its snapshot.
            self.g.child(node, ATTR, "__dict__", d).mark_absent(ITEM, name)
        for klass in (obj if isinstance(obj, type) else type(obj)).__mro__:
            if _mutable_class(klass) and klass is not obj:
                self.g.const(klass).mark_absent(ATTR, name)

    def natively_made(self, tp) -> bool:
        """Does an attribute ``tp``'s instances lack come from a ``__getattr__`` that runs
        natively (reading state the monitor does not see)?"""
        getattr_fn = py_method(tp, "__getattr__")
        return getattr_fn is not None and self.dynamic.monitor.policy.runs_natively(getattr_fn)

    def _class_attr(self, klass, name, value, raw=False):
        """``value = klass.name``; with ``raw``, ``value`` is ``klass.__dict__[name]`` (an
        attribute lookup found it there).  What is guarded is what ``type.__getattribute__``
        looked at, so a guard can pass again: a data descriptor of the metaclass
        (``__name__``, ``__qualname__``: read by value), else the raw entry of the first class
        of the MRO (then the metaclass's) that has the name, and its absence before that."""
        if raw:
            if _mutable_class(klass):
                self.g.child(self.g.const(klass), DICT, name, value)
            return
        meta = type(klass)
        desc = type_lookup(meta, name)
        if desc is not NULL and type_lookup(type(desc), "__set__") is not NULL:
            # A class's __dict__ is a new proxy at each read: the class's identity fixes it.
            if _mutable_class(klass) and type(value) is not types.MappingProxyType:
                self.g.child(self.g.const(klass), ATTR, name, value)
            return
        lookup = klass.__mro__ + meta.__mro__
        for i, owner in enumerate(lookup):
            if name in owner.__dict__:
                for before in lookup[:i]:
                    if _mutable_class(before):
                        self.g.const(before).mark_absent(ATTR, name)
                self._class_attr(owner, name, owner.__dict__[name], raw=True)
                return


def _mutable_class(klass) -> bool:
    # C types cannot change; torch's classes are assumed not to be monkeypatched.
    return bool(klass.__flags__ & _HEAPTYPE) and not is_library_file(
        getattr(sys.modules.get(klass.__module__), "__file__", None) or "")
