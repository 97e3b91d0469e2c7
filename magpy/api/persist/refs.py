"""References: how a saved program finds the objects its records were made with, in another
process.

A record's guard and mock name the objects of the program they read (``K3 = torch``, ``K10 =
model[0]``, ``K22 = SGD.step``), and a guard compares what the call reaches with them by
identity.  A saved record holds, for each, a reference that finds the same object in the
loading process, and a fingerprint that says it is the same: a module by name; a module's
globals by the module's name; a class, function or builtin by its import path; the objects
the compiled callable holds (``roots``: the module, the function) in their place; and other
objects by a path of attribute, item and closure steps from one of those (the process's
own submodules and parameters, a decorator's wrapped function).

The fingerprint of a function is a hash of its code objects, of a class the hashes of the
code of every class in its MRO; an object found by a path has its type's.  Loading a record
whose references find nothing, or something whose fingerprint differs (the program's code
changed, another model), is refused with the reason (:class:`Mismatch`), never guessed.
"""
from __future__ import annotations

import collections
import functools
import gc
import hashlib
import importlib
import sys
import types

import torch

from magpy.api.persist.values import Unsaveable, decode, encode

Ref = list   # a reference: its kind first ("root", "value", "module", "globals", "import", "path")

# Constants referred to by value (immutable: a guard's identity check of one falls back to
# equality, codegen.source.value_checks); lists, dicts and tensors are the program's objects.
_VALUE_TYPES = frozenset({type(None), bool, int, float, str, bytes, complex, tuple, frozenset, slice,
                          type(Ellipsis), torch.Size, torch.dtype, torch.device, torch.layout,
                          torch.memory_format})
_WALK_DEPTH = 16         # steps from an anchor to an object found by a path (nested submodules: 2 each)
_WALK_BUDGET = 500_000   # objects visited looking for paths (a program's globals may hold a lot)
_NEAR_DEPTH = 6          # steps from the object at an import path to the function a decorator wrapped


class Mismatch(Exception):
    """A reference finds nothing, or another object than the one saved (the message says why)."""


def code_hash(code: types.CodeType) -> str:
    """A hash of ``code`` and the code objects it holds (stable across processes)."""
    h = hashlib.sha256()

    def feed(c):
        h.update(c.co_code)
        h.update(repr((c.co_names, c.co_varnames, c.co_freevars, c.co_cellvars)).encode())
        for k in c.co_consts:
            if isinstance(k, types.CodeType):
                feed(k)
            else:   # (a frozenset's order varies with the string hash seed)
                h.update((repr(sorted(map(repr, k))) if isinstance(k, frozenset) else repr(k)).encode())
    feed(code)
    return h.hexdigest()[:24]


@functools.lru_cache(maxsize=None)
def _class_hash(cls: type) -> str:
    h = hashlib.sha256()
    for c in cls.__mro__[:-1]:   # (not object)
        h.update(f"{c.__module__}.{c.__qualname__}".encode())
        for name, v in sorted(vars(c).items()):
            code = _code_of(v)
            if code is not None:
                h.update(name.encode() + code_hash(code).encode())
    return h.hexdigest()[:24]


def _code_of(v):
    v = getattr(v, "__func__", v)   # (staticmethod, classmethod)
    if isinstance(v, property):
        v = v.fget
    return getattr(v, "__code__", None) if isinstance(v, types.FunctionType) else None


def fingerprint(obj) -> str:
    """What tells ``obj`` from another object in the same place (module docstring)."""
    if isinstance(obj, types.FunctionType):
        return "code " + code_hash(obj.__code__)
    if isinstance(obj, type):
        return "class " + _class_hash(obj)
    if isinstance(obj, types.ModuleType):
        return "module " + obj.__name__
    t = type(obj)
    return f"a {t.__module__}.{t.__qualname__} " + _class_hash(t)


class Referrer:
    """Makes the references of one compiled callable's objects; ``roots`` are the objects the
    compiled callable holds (magpy.api.compiled.roots_of: reads from them are reads of the call's node)."""

    def __init__(self, roots: tuple):
        self.roots = roots
        self._found: dict[int, tuple] | None = None   # id -> (anchor ref, steps), by walking

    def refer(self, obj) -> Ref:
        """The reference of ``obj``; :class:`Unsaveable` if there is none."""
        ref = self._direct(obj)
        if ref is not None:
            return ref
        hit = self._near_import(obj) or _in_class(obj)
        if hit is None:
            if self._found is None:
                self._walk()
            hit = self._found.get(id(obj))
        if hit is None and type(obj) is types.CellType:
            hit = self._in_closure(obj)
        if hit is None:
            raise Unsaveable(f"{_words(obj)}{_holders(obj)} is reachable neither by import nor from what "
                             "the compiled callable holds")
        anchor, steps = hit
        return ["path", anchor, steps, fingerprint(obj)]

    def _direct(self, obj) -> Ref | None:
        for i, r in enumerate(self.roots):
            if obj is r:
                return ["root", i, fingerprint(obj)]
        if type(obj) in _VALUE_TYPES:
            try:
                return ["value", encode(obj)]
            except Unsaveable:   # (a tuple holding an object)
                pass
        op = _op_name(obj)
        if op is not None:
            return ["op", *op]
        if isinstance(obj, types.ModuleType) and sys.modules.get(obj.__name__) is obj:
            return ["module", obj.__name__]
        if type(obj) is dict and isinstance(obj.get("__name__"), str):
            key = _module_key(obj)
            if key is not None:
                return ["globals", key]
        path = _import_path(obj)
        if path is not None:
            return ["import", *path, fingerprint(obj)]
        return None

    def _walk(self) -> None:
        """Index the objects reachable from the roots (and a root function's globals) by
        their shortest path."""
        anchors = [(["root", i, fingerprint(r)], r) for i, r in enumerate(self.roots)]
        anchors += [(["globals", r.__module__], r.__globals__) for r in self.roots
                    if isinstance(r, types.FunctionType)]
        reached = _reach(anchors, _WALK_DEPTH, _WALK_BUDGET)
        self._found = {id(child): (ref, steps) for child, ref, steps in reached}

    def _in_closure(self, cell) -> tuple | None:
        """A closure cell of a function that has a reference (a decorator's flag), found
        through the function that holds it."""
        for fn, i in _closure_holders(cell):
            try:
                ref = self.refer(fn)
            except Unsaveable:
                continue
            return (ref[1], ref[2] + [["closure", i]]) if ref[0] == "path" else (ref, [["closure", i]])
        return None

    def _near_import(self, obj) -> tuple | None:
        """A function a decorator wrapped (``SGD.step``'s own, in the closure of the one its
        import path gives), or a cell of one: found from the object at its import path."""
        target = getattr(obj, "cell_contents", obj) if type(obj) is types.CellType else obj
        module, qualname = getattr(target, "__module__", None), getattr(target, "__qualname__", None)
        owner = _resolve_import(module, qualname)
        if owner is None or owner is obj:
            return None
        anchor = ["import", module, qualname, fingerprint(owner)]
        return next(((anchor, steps) for child, _, steps in _reach([(anchor, owner)], _NEAR_DEPTH)
                     if child is obj), None)


def _reach(anchors: list, depth: int, budget: int | None = None):
    """``(object, anchor's reference, steps)`` for each object reachable from the ``anchors``
    (``(reference, object)`` pairs) within ``depth`` steps, nearest first, each once (not
    values, modules, the anchors themselves); ``budget``: at most that many objects looked into."""
    seen = {id(obj) for _, obj in anchors}
    queue = collections.deque((obj, ref, [], 0) for ref, obj in anchors)
    while queue and budget != 0:
        obj, ref, steps, level = queue.popleft()
        budget = None if budget is None else budget - 1
        if level >= depth:
            continue
        for step, child in _children(obj):
            if id(child) in seen or _leaf(child):
                continue
            seen.add(id(child))
            path = steps + [step]
            yield child, ref, path
            queue.append((child, ref, path, level + 1))


def _module_key(d: dict) -> str | None:
    """The name in ``sys.modules`` of the module whose globals are ``d``: its ``__name__``, or
    another (``_collections_abc`` names itself ``collections.abc``)."""
    module = sys.modules.get(d["__name__"])
    if module is not None and getattr(module, "__dict__", None) is d:
        return d["__name__"]
    return next((k for k, m in list(sys.modules.items()) if getattr(m, "__dict__", None) is d), None)


def _op_name(obj) -> tuple | None:
    """``(namespace, name, overload)`` of one of torch's operators (``torch.ops.aten.add.Tensor``,
    a packet, a higher-order operator), else None."""
    if isinstance(obj, torch._ops.OpOverload):
        return obj.namespace, obj._opname, obj._overloadname
    if isinstance(obj, torch._ops.OpOverloadPacket):
        namespace, name = obj._qualified_op_name.split("::")
        return namespace, name, None
    if isinstance(obj, torch._ops.HigherOrderOperator):
        return "higher_order", obj.name(), None
    return None


def _in_class(obj) -> tuple | None:
    """A function set on a class other than the one its name says (Dynamo puts its disabled
    ``Adam._init_group`` on ``AdamW``): found as that class's attribute."""
    if type(obj) is not types.FunctionType:
        return None
    for d in gc.get_referrers(obj):
        name = next((k for k, v in d.items() if v is obj), None) if type(d) is dict else None
        for cls in gc.get_referrers(d) if name is not None else ():
            path = _import_path(cls) if isinstance(cls, type) and vars(cls).get(name) is obj else None
            if path is not None:
                return ["import", *path, fingerprint(cls)], [["attr", name]]
    return None


def _children(obj):
    """The (step, object) pairs one step from ``obj``: attributes of its ``__dict__``, items of
    dicts, lists and tuples, a function's closure cells and attributes (the function a decorator
    wrapped), a cell's content.
    Not into magpy's own objects (a compiled callable's records: this process's only)."""
    t = type(obj)
    if _magpy_own(obj):
        return
    if t is types.CellType:
        try:
            yield ["contents"], obj.cell_contents
        except ValueError:   # (empty)
            pass
        return
    if t is types.FunctionType:
        for i, cell in enumerate(obj.__closure__ or ()):
            yield ["closure", i], cell
        for k, v in list(vars(obj).items()):   # (__wrapped__; torch's __dynamo_disable)
            yield ["attr", k], v
        return
    if isinstance(obj, dict):
        for k, v in list(obj.items()):
            if type(k) in (str, int):
                yield ["item", k], v
        return
    if t in (list, tuple):
        for i, v in enumerate(obj):
            yield ["item", i], v
        return
    if isinstance(obj, (type, types.ModuleType)):
        return
    d = getattr(obj, "__dict__", None)
    if type(d) is dict:
        for k, v in list(d.items()):
            if type(k) is str:
                yield ["attr", k], v


def _magpy_own(obj) -> bool:
    module = obj.__module__ if type(obj) is types.FunctionType else type(obj).__module__
    return isinstance(module, str) and (module == "magpy" or module.startswith("magpy."))


def _leaf(v) -> bool:
    # Not worth a path: values (referred to by value), modules and importables (by name).
    return v is None or type(v) in (bool, int, float, str, bytes) or isinstance(v, types.ModuleType)


def _import_path(obj) -> tuple[str, str] | None:
    """``(module, qualname)`` if importing them gives ``obj`` itself."""
    if not isinstance(obj, (type, types.FunctionType, types.BuiltinFunctionType, types.MethodDescriptorType,
                            types.WrapperDescriptorType, types.BuiltinMethodType)) and \
            not callable(obj):
        return None
    module, qualname = getattr(obj, "__module__", None), getattr(obj, "__qualname__", None)
    if module is None and isinstance(obj, types.BuiltinFunctionType):
        module = "builtins"
    # (torch.conv2d's qualname is _VariableFunctionsClass.conv2d: found by its name)
    for name in (qualname, getattr(obj, "__name__", None)):
        if _resolve_import(module, name) is obj:
            return module, name
    # (the interpreter's own types, ``method`` or ``cell``: importable from ``types`` only)
    return next((("types", k) for k, v in vars(types).items() if v is obj and isinstance(obj, type)), None)


def _resolve_import(module, qualname):
    if not isinstance(module, str) or not isinstance(qualname, str) or "<" in qualname:
        return None
    try:
        obj = importlib.import_module(module)
        for part in qualname.split("."):
            obj = getattr(obj, part)
        return obj
    except Exception:  # noqa: BLE001 - not importable: some other reference
        return None


class Resolver:
    """Finds the objects references name in this process, holding ``roots`` (:func:`resolve`),
    each reference once (a graph names one operator at many nodes)."""

    def __init__(self, roots: tuple):
        self.roots = roots
        self._found: dict[str, object] = {}

    def __call__(self, ref: Ref):
        key = repr(ref)
        if key not in self._found:
            self._found[key] = resolve(ref, self.roots)
        return self._found[key]


def resolve(ref: Ref, roots: tuple):
    """The object ``ref`` finds in this process, holding ``roots``; :class:`Mismatch` if it
    finds none or another one."""
    kind = ref[0]
    if kind == "value":
        return decode(ref[1])
    if kind == "root":
        if ref[1] >= len(roots):
            raise Mismatch("the saved program held more objects than the one given")
        return _checked(roots[ref[1]], ref[2], "the object given")
    if kind == "op":
        try:
            op = getattr(getattr(torch.ops, ref[1]), ref[2])
            return op if ref[3] is None else getattr(op, ref[3])
        except AttributeError:
            raise Mismatch(f"torch has no operator {ref[1]}::{ref[2]}") from None
    if kind == "module":
        try:
            return importlib.import_module(ref[1])
        except Exception as e:  # noqa: BLE001 - reported as the mismatch it is
            raise Mismatch(f"module {ref[1]} does not import here ({type(e).__name__}: {e})") from None
    if kind == "globals":
        module = sys.modules.get(ref[1])
        if module is None:
            try:
                module = importlib.import_module(ref[1])
            except Exception as e:  # noqa: BLE001
                raise Mismatch(f"module {ref[1]} does not import here ({type(e).__name__}: {e})") from None
        return vars(module)
    if kind == "import":
        obj = _resolve_import(ref[1], ref[2])
        if obj is None:
            raise Mismatch(f"{ref[1]}.{ref[2]} does not import here")
        return _checked(obj, ref[3], f"{ref[1]}.{ref[2]}")
    if kind == "path":
        obj = resolve(ref[1], roots)
        for step in ref[2]:
            obj = _step(obj, step, ref)
        return _checked(obj, ref[3], path_words(ref))
    raise Mismatch(f"not a reference magpy wrote: {kind!r}")


def _step(obj, step, ref):
    try:
        if step[0] == "attr":
            return getattr(obj, step[1])
        if step[0] == "item":
            return obj[step[1]]
        if step[0] == "closure":
            return obj.__closure__[step[1]]
        if step[0] == "contents":
            return obj.cell_contents
    except Exception as e:  # noqa: BLE001 - the program here holds other objects
        raise Mismatch(f"{path_words(ref)} finds nothing here ({type(e).__name__}: {e})") from None
    raise Mismatch(f"not a path step magpy wrote: {step!r}")


def _checked(obj, saved: str, words: str):
    now = fingerprint(obj)
    if now != saved:
        raise Mismatch(f"{words} is not what the program was saved with ({_fingerprint_words(saved)}; "
                       f"here: {_fingerprint_words(now)})")
    return obj


def _fingerprint_words(fp: str) -> str:
    kind, _, rest = fp.partition(" ")
    if kind in ("code", "class"):
        return f"{kind} {rest[:8]}"
    return f"{kind} {rest.rsplit(' ', 1)[0]}" if kind == "a" else fp


def path_words(ref: Ref) -> str:
    """Where a ``path`` reference goes, in words: ``model._modules['0']``."""
    base = ref[1]
    text = {"root": lambda: "the compiled object" if base[1] == 0 else f"root {base[1]}",
            "globals": lambda: f"{base[1]} globals",
            "import": lambda: f"{base[1]}.{base[2]}"}.get(base[0], lambda: base[0])()
    for step in ref[2]:
        text += {"attr": f".{step[-1]}", "item": f"[{step[-1]!r}]", "closure": f".__closure__[{step[-1]}]",
                 "contents": ".cell_contents"}[step[0]]
    return text


def _holders(obj) -> str:
    """For a closure cell: the functions that hold it, in words (what the message names)."""
    if type(obj) is not types.CellType:
        return ""
    names = sorted({f"{fn.__module__}.{fn.__qualname__}" for fn, _ in _closure_holders(obj)})
    return f" (in the closure of {', '.join(names)})" if names else ""


def _closure_holders(cell):
    """``(function, index)`` for each function whose closure holds ``cell`` there."""
    for holder in gc.get_referrers(cell):
        if type(holder) is tuple:
            for fn in gc.get_referrers(holder):
                if type(fn) is types.FunctionType and fn.__closure__ is holder:
                    yield fn, holder.index(cell)


def _words(obj) -> str:
    t = type(obj)
    name = getattr(obj, "__qualname__", None)
    return f"{t.__module__}.{t.__qualname__}" + (f" {name}" if isinstance(name, str) else "")
