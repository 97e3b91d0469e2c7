"""How each instruction moves, computes or consumes symbolic shadows (``magpy.graphs.dynamic``), and
where a tensor operation's arguments sit among its instruction's inputs."""
from __future__ import annotations

import math
import operator

import torch

from magpy.capture.monitor import bytecode, operators
from magpy.capture.monitor.observer import Entries, returns_to_caller
from magpy.graphs.dynamic.lifted_shadows import (
    IntFloat,
    Items,
    Scalar,
    SymInt,
    Walk,
    int_float,
    items_of,
    symbolic,
    value_of,
)

# rule(shapes, frame, instruction, inputs, outputs, input shadows) -> True if it handled the
# symbolic shadows among the inputs (setting output shadows), False to specialise them.

def int_result(out, r):
    """``r``, the symbolic twin of int ``out``, if it is one."""
    if type(out) is int and type(r) is SymInt and r.node.hint == out:
        return r
    return None


def _binary(sh, f, ins, inputs, outputs, in_sh):
    a, b = inputs
    out = outputs[0]
    if type(out) is float:
        return _float_arithmetic(sh, f, ins, inputs, out, in_sh)
    if type(a) is int and type(b) is int:
        if any(map(sh.eager_value, inputs)):
            return False   # (``N + int(t.sum())``: an eager step computes it, from N's value)
        op = operators.BINARY[ins.arg % len(operators.BINARY)][3]
        r = int_result(out, op(value_of(a, in_sh[0]), value_of(b, in_sh[1])))
        if r is None:
            return False
        sh.set_output(f, 0, r)
        return True
    if ins.arg % len(operators.BINARY) == 0 and isinstance(out, (tuple, list)):   # s[:-1] + (h, d)
        left, right = items_of(a, in_sh[0]), items_of(b, in_sh[1])
        if left is None or right is None or len(left) + len(right) != len(out):
            return False
        sh.set_output(f, 0, Items(left + right))
        return True
    return False


def _meets_eager_value(sh, inputs, in_sh) -> bool:
    """Does a lifted float (or one computed from lifted values) meet a value an eager step
    computed (ReduceLROnPlateau's ``loss < best * rel_eps``, NAdam's ``-lr * (1 - mu)``)?
    The operation is an eager step too, given the float with its shadow
    (``Segmenter._freeze``): nothing to guard or compute here."""
    return any(map(sh.eager_value, inputs)) and any(type(s) in (Scalar, IntFloat) for s in in_sh)


def _compare(sh, f, ins, inputs, outputs, in_sh):
    a, b = inputs
    if _meets_eager_value(sh, inputs, in_sh):
        return True   # (its outcome checked where the step is)
    if any(type(s) is IntFloat for s in in_sh) or float in (type(a), type(b)):
        # (a float computed from lifted ints, or a lifted int against a float: ``step <= 4.5``)
        return sh.float_condition(in_sh, inputs, operators.COMPARE[ins.arg][0], outputs[0])
    if not (type(a) is int and type(b) is int):
        return False
    cond = operators.COMPARE_OPS[ins.arg](value_of(a, in_sh[0]), value_of(b, in_sh[1]))
    if not sh.conditional(f, inputs, in_sh, operators.COMPARE[ins.arg][0], outputs[0], cond):
        bool(cond)   # guards the outcome
    return True


def _unary(op):
    def rule(sh, f, ins, inputs, outputs, in_sh):
        if type(inputs[0]) is not int:
            return False
        r = int_result(outputs[0], op(in_sh[0]))
        if r is None:
            return False
        sh.set_output(f, 0, r)
        return True
    return rule


_int_negative = _unary(operator.neg)


def _negative(sh, f, ins, inputs, outputs, in_sh):
    # ``-lr`` of a lifted float (SGD's ``alpha=-lr``): the mock negates each call's value.
    s = in_sh[0]
    if type(s) is Scalar and type(outputs[0]) is float:
        sh.set_output(f, 0, s.derive(f"(-{s.source})", outputs[0]))
        return True
    if type(s) is IntFloat:
        sh.set_output(f, 0, int_float((s,), "(-{})", outputs[0]))
        return True
    return _int_negative(sh, f, ins, inputs, outputs, in_sh)


def _float_arithmetic(sh, f, ins, inputs, out, in_sh) -> bool:
    """``lr * gamma``: a lifted float and a number the record holds as a constant (no shadow,
    not computed by an eager step) give a float the mock computes, by the same Python
    arithmetic, from each call's lifted value."""
    symbol = operators.BINARY[ins.arg % len(operators.BINARY)][0]
    if _meets_eager_value(sh, inputs, in_sh):
        return True   # (its result a graph input where a tensor operation takes it)
    if any(type(s) in (IntFloat, SymInt) for s in in_sh) or all(type(s) is Scalar for s in in_sh) \
            or symbol == "**":
        return _int_float_arithmetic(sh, f, symbol, inputs, out, in_sh)
    if symbol not in _FLOAT_OPS or sum(type(s) is Scalar for s in in_sh) != 1:
        return False
    if symbol == "/" and (type(in_sh[0]) is not Scalar or not inputs[1]):
        return False   # (``c / lr`` would raise in the mock for a zero lr, where eager raises mid-call)
    parts = []
    for v, s in zip(inputs, in_sh):
        if type(s) is Scalar:
            scalar = s
            parts.append(s.source)
        elif s is None and type(v) in (int, float) and math.isfinite(v) and not sh.eager_value(v):
            parts.append(repr(v))
        else:
            return False
    sh.set_output(f, 0, scalar.derive(f"({parts[0]} {symbol} {parts[1]})", out))
    return True


def float_parts(values, shadows, eager_value) -> tuple | None:
    """The parts (``shadows.int_float``'s) of an operation on ``values`` whose shadows are
    ``shadows``: floats computed from lifted ints, the ints, lifted floats, finite constants
    the record holds (their sources; None where a value is something else, or a number an
    eager step computed: ``eager_value``)."""
    parts = []
    for v, s in zip(values, shadows):
        if type(s) is IntFloat or type(s) is SymInt and type(v) is int or type(s) is Scalar and s.value is v:
            parts.append(s)
        elif s is None and type(v) in (int, float) and math.isfinite(v) and not eager_value(v):
            parts.append(repr(v))
        else:
            return None
    return tuple(parts)


# Float arithmetic that cannot raise (``**`` may overflow), given a nonzero divisor.
_FLOAT_OPS = frozenset({"+", "-", "*", "/"})


def _int_float_arithmetic(sh, f, symbol, inputs, out, in_sh) -> bool:
    """``float(step) / 10.0``, ``0.95 ** epoch``: a float computed from lifted ints (and
    lifted floats, constants the record holds) is one the mock computes again from each
    call's ints and floats (``IntFloat``).  Only what cannot raise: a divisor is a nonzero
    constant or one the guard requires nonzero (``Shapes.nonzero``); a power's base a
    constant of magnitude at most 1 and its exponent an int guarded to be nonnegative, or its
    exponent a constant in (0, 1] and its base guarded nonnegative."""
    parts = float_parts(inputs, in_sh, sh.eager_value)
    if parts is None:
        return False
    right = parts[1]
    if symbol == "/" and not (inputs[1] and (type(right) is str or sh.nonzero(right))):
        return False
    if symbol == "**" and type(parts[0]) is not str and type(right) is str:
        # A root of a lifted float (RAdam's ``bias_correction2 ** 0.5``): an exponent in (0, 1]
        # cannot overflow, a base guarded nonnegative gives no complex number.
        if type(inputs[1]) is not float or not 0 < inputs[1] <= 1 or not sh.nonnegative(parts[0]):
            return False
    elif symbol == "**":
        if type(parts[0]) is not str or not 0 < abs(inputs[0]) <= 1 or type(right) is not SymInt:
            return False
        bool(right >= 0)   # (guards the outcome: a negative exponent could overflow)
    elif symbol not in _FLOAT_OPS:
        return False
    sh.set_output(f, 0, int_float(tuple(parts), f"({{}} {symbol} {{}})", out))
    return True


def _truth(sh, f, ins, inputs, outputs, in_sh):
    # ``if b:`` on a size: the guard keeps the outcome (b != 0), not the value; so on a float.
    if type(in_sh[0]) in (IntFloat, Scalar):
        return sh.float_condition(in_sh + (None,), inputs + (0.0,), "!=", bool(inputs[0]))
    if type(inputs[0]) is not int:
        return False
    bool(in_sh[0])
    return True


def _subscript(sh, f, ins, inputs, outputs, in_sh):
    seq, index = inputs
    items = items_of(seq, in_sh[0])
    if items is None or symbolic(in_sh[1]) or type(index) not in (int, slice):
        return False
    sh.set_output(f, 0, Items(items[index]) if type(index) is slice else items[index])
    return True


def _binary_slice(sh, f, ins, inputs, outputs, in_sh):
    # ``seq[start:stop]`` in one instruction (3.12): a slice of the items, bounds not symbolic.
    seq, start, stop = inputs
    if symbolic(in_sh[1]) or symbolic(in_sh[2]):
        return False
    return _subscript(sh, f, ins, (seq, slice(start, stop)), outputs, (in_sh[0], None))


def _unpack(sh, f, ins, inputs, outputs, in_sh):
    items = items_of(inputs[0], in_sh[0])
    if items is None or len(items) != len(outputs):
        return False
    for i, s in enumerate(reversed(items)):
        sh.set_output(f, i, s)
    return True


def _iter(sh, f, ins, inputs, outputs, in_sh):
    # ``for x in seq``: a walk over a list or tuple of lifted values (an iterator's iter() is itself).
    seq, s = inputs[0], in_sh[0]
    if type(s) is Walk and outputs[0] is seq:
        sh.set_output(f, 0, s)
        return True
    if type(seq) not in (list, tuple) or type(s) is not Items or len(s) != len(seq):
        return False
    sh.set_output(f, 0, Walk(tuple(seq), tuple(s)))
    return True


def _next(sh, f, ins, inputs, outputs, in_sh):
    walk = in_sh[0]
    if type(walk) is not Walk:
        return False
    if len(outputs) < 2:
        return True   # (exhausted)
    s = walk.step(outputs[-1])
    if s is None:
        return False
    sh.set_output(f, 0, walk)
    sh.set_output(f, len(outputs) - 1, s)
    return True


def _contains(sh, f, ins, inputs, outputs, in_sh):
    # ``"state_steps" in kwargs``: a dict's keys, not its lifted values, decide.
    return type(inputs[1]) is dict and not symbolic(in_sh[0])


def _method(sh, f, ins, inputs, outputs, in_sh):
    # ``kwargs.get``, ``lrs.append``: the bound method carries the dict's entry shadows or the
    # list's item shadows to its call (dict_get, list_append).
    if _BOUND_SHADOWS.get((type(inputs[0]), ins.argval)) is not type(in_sh[0]):
        return False
    sh.set_output(f, -1, in_sh[0])   # the bound method, the last output in every version
    return True


_BOUND_SHADOWS = {(dict, "get"): Entries, (list, "append"): Items}


def list_append(callee, args) -> list | None:
    """The list ``callee`` appends ``args`` to (a bound ``lst.append``), or None."""
    if type(callee) is BUILTIN_METHOD and type(callee.__self__) is list and callee.__name__ == "append" \
            and len(args) == 1:
        return callee.__self__
    return None


def dict_get(callee, args, callee_shadow, shadows):
    """``d.get(key[, default])`` of a dict whose entry shadows are known: the result's
    shadow (None if there is none); False for any other call."""
    if type(callee) is not BUILTIN_METHOD or type(callee.__self__) is not dict or callee.__name__ != "get":
        return False
    if type(callee_shadow) is not Entries or not args or type(args[0]) is not str:
        return False
    if args[0] in callee.__self__:
        return callee_shadow.get(args[0])
    return shadows[-1] if len(args) == 2 else None


BUILTIN_METHOD = type({}.get)


def zip_walk(args, shadows) -> Walk | None:
    """The walk of ``zip(*args)`` over lists and tuples (a last bool: ``strict=``), or None."""
    if args and type(args[-1]) is bool:
        args, shadows = args[:-1], shadows[:-1]
    columns = [items_of(a, s) if type(a) in (list, tuple) else None for a, s in zip(args, shadows)]
    if not args or None in columns:
        return None
    return Walk(tuple(zip(*args)), tuple(Items(row) for row in zip(*columns)))


def _build(sh, f, ins, inputs, outputs, in_sh):
    sh.set_output(f, 0, Items(in_sh))
    return True


def _append(sh, f, ins, inputs, outputs, in_sh):
    # LIST_APPEND / LIST_EXTEND: inputs are (list, ..., added); the list stays (output 0).
    lst = inputs[0]
    added = (in_sh[-1],) if ins.opname == "LIST_APPEND" else items_of(inputs[-1], in_sh[-1])
    if added is None:
        return False
    start = len(lst) - len(added)
    appended = enumerate(zip(lst[start:], added), start)
    if sh.refgraph.node_of(lst) is not None and not all(
            not symbolic(s) or _store(sh, lst, i, v, s) for i, (v, s) in appended):
        # (A list from outside the call, a comprehension's taken where a continuation resumed
        # it: the mock writes what the call appended from its own sizes and floats.)
        return False
    before = items_of(lst[:start], in_sh[0])
    if before is None:
        return False
    sh.set_output(f, 0, Items(before + added))
    return True


def _to_tuple(sh, f, ins, inputs, outputs, in_sh):
    sh.set_output(f, 0, in_sh[0])
    return True


def _slice(sh, f, ins, inputs, outputs, in_sh):
    sh.set_output(f, 0, slice(*in_sh) if len(in_sh) == 3 else slice(in_sh[0], in_sh[1]))
    return True


def _dict_merge(sh, f, ins, inputs, outputs, in_sh):
    # ``f(**kwargs)`` builds the dict it passes by merging: keep the values' shadows.
    before, added = in_sh[0], in_sh[-1]
    if any(s is not None and type(s) is not Entries for s in (before, added)):
        return False
    merged = inputs[-1]
    entries = {k: s for k, s in (before or {}).items() if k not in merged}
    sh.set_output(f, 0, Entries({**entries, **(added or {})}))
    return True


def _const_key_map(sh, f, ins, inputs, outputs, in_sh):
    # ``f(a=b, **kw)`` builds its keyword dict from constant keys: keep the values' shadows.
    sh.set_output(f, 0, Entries({k: s for k, s in zip(inputs[-1], in_sh[:-1]) if s is not None}))
    return True


def _build_map(sh, f, ins, inputs, outputs, in_sh):
    keys = inputs[0::2]
    if not all(type(k) is str for k in keys):
        return False
    sh.set_output(f, 0, Entries({k: s for k, s in zip(keys, in_sh[1::2]) if s is not None}))
    return True


def _store_attr(sh, f, ins, inputs, outputs, in_sh):
    # ``obj.n = b`` (``self.cumulative_length += t``) on an object from outside the call: the
    # mock writes the value from the new sizes instead of guarding it; so for a lifted float
    # or a list of them (a scheduler's ``self._last_lr``).
    value, obj = inputs
    if sh.refgraph.node_of(obj) is None or in_sh[1] is not None:
        return False
    if getattr(obj, "__dict__", {}).get(ins.argval, None) is not value:
        return False   # (a property, a slot, a __setattr__ that stores elsewhere)
    return _store(sh, obj, ins.argval, value, in_sh[0])


def _store_item(sh, f, ins, inputs, outputs, in_sh):
    # ``d[key] = lr`` into a dict from outside the call (a scheduler's ``group["lr"] = lr``).
    value, obj, key = inputs
    if type(obj) is not dict or type(key) is not str or sh.refgraph.node_of(obj) is None:
        return False
    return in_sh[1] is None and in_sh[2] is None and _store(sh, obj, key, value, in_sh[0])


def _store_global(sh, f, ins, inputs, outputs, in_sh):
    # ``global N; N += 1``: as an item of the globals dict (read back: dynamic.number_reads).
    if sh.refgraph.node_of(f.globals) is None:
        return False
    return _store(sh, f.globals, ins.argval, inputs[0], in_sh[0])


def _store(sh, holder, key, value, s) -> bool:
    """Remember that ``holder`` (an object's attribute, a dict's or list's item ``key``) was
    given ``value``, whose shadow is ``s``: the mock writes it from the call's own sizes or
    lifted floats.  False where it cannot (the shadow is specialised)."""
    if type(s) is SymInt and type(value) is int or type(s) in (Scalar, IntFloat) and value is s.value:
        sh.stores[(id(holder), key)] = (holder, value, s)
        return True
    if type(s) is not Items or type(value) not in (list, tuple) or len(s) != len(value):
        return False
    if sh.refgraph.node_of(value) is not None:
        return False   # (the mock writes a list from outside as it was left, not from shadows)
    # A list or tuple the call made (OneCycleLR's ``group["betas"] = (momentum, *rest)``), of
    # lifted floats (and values the record keeps): the mock builds it with each call's.
    return all(not symbolic(x) or type(x) in (Scalar, IntFloat) and _store(sh, value, i, v, x)
               for i, (v, x) in enumerate(zip(value, s)))


def _kept(sh, f, ins, inputs, outputs, in_sh):
    return True


def _returned(sh, f, ins, inputs, outputs, in_sh):
    # To the calling instruction, which the monitor moves the shadow to, or a number to the
    # attribute load a property's return lands on, which Shapes gives it (``attribute_load``);
    # else its lifted values are specialised: left unchecked, one went on as a constant
    # (a scheduler's ``step_index`` property, before Shapes followed it there).
    number = type(in_sh[0]) in (SymInt, Scalar, IntFloat)
    return returns_to_caller(f, sh.levels, attribute=number)


def _call(sh, f, ins, inputs, outputs, in_sh):
    return sh.called(f, inputs, outputs, in_sh)


RULES = {
    "BINARY_OP": _binary, "COMPARE_OP": _compare, "UNARY_NEGATIVE": _negative,
    "UNARY_POSITIVE": _unary(operator.pos), "BINARY_SUBSCR": _subscript, "UNPACK_SEQUENCE": _unpack,
    "BINARY_SLICE": _binary_slice,
    "BUILD_TUPLE": _build, "BUILD_LIST": _build, "LIST_APPEND": _append, "LIST_EXTEND": _append,
    "LIST_TO_TUPLE": _to_tuple, "BUILD_SLICE": _slice, "DICT_MERGE": _dict_merge,
    "BUILD_CONST_KEY_MAP": _const_key_map, "BUILD_MAP": _build_map,
    "POP_JUMP_FORWARD_IF_TRUE": _truth, "POP_JUMP_FORWARD_IF_FALSE": _truth,
    "POP_JUMP_BACKWARD_IF_TRUE": _truth, "POP_JUMP_BACKWARD_IF_FALSE": _truth,
    "JUMP_IF_TRUE_OR_POP": _truth, "JUMP_IF_FALSE_OR_POP": _truth, "UNARY_NOT": _truth,
    "TO_BOOL": _truth,
    "POP_JUMP_FORWARD_IF_NONE": _kept, "POP_JUMP_FORWARD_IF_NOT_NONE": _kept,
    "POP_JUMP_BACKWARD_IF_NONE": _kept, "POP_JUMP_BACKWARD_IF_NOT_NONE": _kept,
    "STORE_FAST": _kept, "STORE_FAST_LOAD_FAST": _kept, "STORE_FAST_STORE_FAST": _kept,
    "POP_TOP": _kept, "COPY": _kept, "SWAP": _kept,
    "RETURN_VALUE": _returned, "CALL": _call, "CALL_FUNCTION_EX": _call, "STORE_ATTR": _store_attr,
    "STORE_SUBSCR": _store_item, "STORE_GLOBAL": _store_global, "GET_ITER": _iter, "FOR_ITER": _next,
    "CONTAINS_OP": _contains,
    "LOAD_METHOD": _method,
}

CELL_OPS = frozenset({"STORE_DEREF", "LOAD_DEREF", "MAKE_CELL"})
# Native callees that compute an int from ints: (callee, the same computation on SymInts).
# Pairs, looked up by identity: hashing a callee could run the program's __hash__.
NATIVE_INT = ((int, int), (abs, abs), (max, torch.sym_max), (min, torch.sym_min), (math.floor, math.floor),
              (math.ceil, math.ceil), (operator.add, operator.add), (operator.sub, operator.sub),
              (operator.mul, operator.mul), (operator.floordiv, operator.floordiv),
              (operator.mod, operator.mod), (operator.neg, operator.neg), (operator.index, operator.index))
# Native callees that compute a float and cannot raise on finite floats: (callee, its source
# in the mock and the guard, whose namespace has ``math`` as MATH, the types its arguments
# may have).  ``max`` and ``min`` of floats pick the value the program would: computed
# again, their choice needs no guard (of an int and a float, the type would depend on it).
NATIVE_FLOAT = ((float, "float", (int, float)), (max, "max", (float,)), (min, "min", (float,)),
                (abs, "abs", (float,)), (math.cos, "MATH.cos", (float,)), (math.sin, "MATH.sin", (float,)),
                (math.sqrt, "MATH.sqrt", (float,)))
# How many arguments they take (others: one).
FLOAT_ARITY = {"max": range(2, 8), "min": range(2, 8)}
# Native callees that rebuild a sequence with the same items.
NATIVE_SEQ = (tuple, list, torch.Size)
# Metadata reads whose result the program gets directly: their result is the twin's.
_SIZE_ATTRS = frozenset({"shape"})
_SIZE_CALLS = frozenset({"size", "numel", "__len__", "stride", "dim", "nelement"})


def direct_read(ins, inputs) -> bool:
    """Does this instruction itself read a tensor's size (not native code inside it)?"""
    if ins.opname == "LOAD_ATTR":
        return ins.argval in _SIZE_ATTRS and isinstance(inputs[0], torch.Tensor)
    if ins.opname != "CALL":
        return False
    callee, args = bytecode.call_operands(inputs)
    name = getattr(callee, "__name__", None)
    if callee is len:
        return len(args) == 1 and isinstance(args[0], torch.Tensor)
    if name not in _SIZE_CALLS:
        return False
    owner = getattr(callee, "__self__", None)
    return isinstance(owner, torch.Tensor) or bool(args) and isinstance(args[0], torch.Tensor)


def argument_shadows(f, args, kwargs):
    """The shadows of a tensor operation's ``(args, kwargs)``, by where they sit among the
    inputs of the instruction frame ``f`` is executing (None if they are not its inputs)."""
    ins = f.info.instructions[f.lasti]
    inputs, shadows = f.ins_inputs, f.ins_shadows
    name = ins.opname
    if name == "CALL":
        nkw = len(kwargs)
        for n in (len(args), len(args) - 1):
            k = n + nkw
            if n < 0 or k > len(inputs):
                continue
            tail, tail_sh = inputs[len(inputs) - k:], shadows[len(shadows) - k:]
            got = args[len(args) - n:] + tuple(kwargs.values())
            if all(a is b for a, b in zip(tail, got)):
                pos = (None,) * (len(args) - n) + tuple(tail_sh[:n])
                return pos, dict(zip(kwargs, tail_sh[n:]))
        return None
    if name == "CALL_FUNCTION_EX":
        seq = inputs[-2] if ins.arg & 1 else inputs[-1]
        sh = shadows[-2] if ins.arg & 1 else shadows[-1]
        kw_sh = shadows[-1] if ins.arg & 1 and type(shadows[-1]) is Entries else {}
        if type(sh) is not Items or len(sh) != len(seq):
            sh = (None,) * len(seq)
        for skip in (0, 1):
            if len(args) - skip == len(seq) and all(a is b for a, b in zip(args[skip:], seq)):
                return (None,) * skip + tuple(sh), dict(kw_sh)
        return None
    order = _ORDERS.get(name)
    if order is None or kwargs:
        return None
    for perm in order:
        if len(perm) == len(args) == len(inputs) and all(args[i] is inputs[p] for i, p in enumerate(perm)):
            return tuple(shadows[p] for p in perm), {}
    return None


_ORDERS = {"BINARY_OP": ((0, 1), (1, 0)), "COMPARE_OP": ((0, 1), (1, 0)), "BINARY_SUBSCR": ((0, 1),),
           "STORE_SUBSCR": ((1, 2, 0),), "UNARY_NEGATIVE": ((0,),),
           "LOAD_ATTR": ((0,),)}   # (a tensor property: ``y.T``)
