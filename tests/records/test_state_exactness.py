"""Exactness of the program state a mock leaves behind (issue 33's A, F, G and their siblings).

- **Stores are replayed whatever they left** (A): a store that found the slot already holding
  the value it wrote changed nothing while recording, yet eager makes it on every call: when
  the caller changes the slot between calls, the mock must write it again.  Every kind of
  store: attribute, list and dict item, a Python ``__setitem__``, global, closure cell,
  ``setattr``, ``del``, ``dict.update`` / ``setdefault``, list methods.
- **Thread-local torch state** (F): grad mode (and autocast) after a mock is what eager leaves,
  on every path: a graph-less piece after a ``no_grad`` block, a failed check, an eager step
  that raises.
- **Paths an exception chose** (G): ``try: xs[1] except IndexError`` and its kin read the
  *absence* of an item, key or attribute; the guard checks it.

Every test is differential (``tests/harness/compile_harness.py``) and also compares torch's
thread-local state after each call (:func:`modes_checked`).
"""
import collections
import contextlib
import dataclasses
import io
import operator
import types

import pytest
import torch
import torch.nn as nn

from tests.harness.compile_harness import (
    ANY,
    MOCK,
    MONITOR,
    after,
    again,
    check_compiled,
    first,
    fresh,
    fresh_magpy,  # noqa: F401 - autouse fixture: magpy.reset() before each test
    globals_view,
    isolated,
)


def x2(state=None):
    return (torch.ones(2),)


class Obj:
    pass


def _obj(**attrs):
    o = Obj()
    o.__dict__.update(attrs)
    return o


# ----------------------------------------------------------------------------- thread-local state

def thread_state() -> tuple:
    """torch's thread-local modes a call may leave changed."""
    return (torch.is_grad_enabled(), torch.is_inference_mode_enabled(),
            torch.is_autocast_enabled("cpu"), torch.get_autocast_dtype("cpu"), torch.get_default_dtype())


DEFAULT_STATE = (True, False, False, torch.bfloat16, torch.float32)


def modes_checked(build, steps, **kwargs):
    """``check_compiled`` that also compares torch's thread-local state after each call
    (eager's, then the compiled one's), restoring the defaults after each."""
    log = []

    @contextlib.contextmanager
    def logged():
        try:
            yield
        finally:
            log.append(thread_state())
            torch.set_grad_enabled(True)
            torch.set_autocast_enabled("cpu", False)
            torch.set_autocast_dtype("cpu", torch.bfloat16)
            torch.set_default_dtype(torch.float32)

    def wrap(ctx):
        if ctx is None:
            return logged

        @contextlib.contextmanager
        def both():
            with logged(), ctx():
                yield
        return both

    trace = check_compiled(build, [dataclasses.replace(s, ctx=wrap(s.ctx)) for s in steps], **kwargs)
    for i, (e, c) in enumerate(zip(log[::2], log[1::2])):
        assert e == c, f"step {i} ({steps[i].name}): torch state after the call: eager {e}, compiled {c}"
    return trace


# ----------------------------------------------------------------------------- A: stores replayed

def stores_that_change_nothing(x):
    global N
    o.a = 5  # noqa: F821 - the isolated namespace's
    L[0] = 5  # noqa: F821
    N = 5
    G["a"] = 0.5  # noqa: F821
    return x + 1


def reset_state(ns):
    ns["o"].a = 0
    ns["L"][0] = 0
    ns["N"] = 0
    ns["G"].clear()


def test_stores_that_found_their_value_are_replayed():
    # Issue 33 A: eager leaves 5/[5]/5/{'a': 0.5} after every call; the caller resets in between.
    modes_checked(lambda: isolated(stores_that_change_nothing, o=_obj(a=5), L=[5], N=5, G={"a": 0.5}), [
        first(x2), again(), after(reset_state, expect=MOCK), fresh(x2), after(reset_state, expect=MOCK),
    ], observe=globals_view("o", "L", "N", "G"))


def global_counter(x):
    global N
    N += 1
    return x * N


def test_a_global_counter_is_lifted_and_written_back():
    # ``N += 1`` of a global: stored from the lifted int as an attribute's or a dict item's
    # is (was: the int guarded, a record every call, then eager); the caller's own value
    # taken on the next call.
    trace = check_compiled(lambda: isolated(global_counter, N=0), [
        first(x2), again(expect=MONITOR), again(expect=MOCK), again(expect=MOCK),
        after(lambda ns: ns.update(N=40), name="after N = 40", expect=MOCK), fresh(x2, expect=MOCK)],
        observe=globals_view("N"))
    assert trace.stats["records"] == 2, trace.stats


def class_counter(x):
    Counted.count += 1   # noqa: F821 - the isolated namespace's (read from the class's dict)
    return x * Counted.count  # noqa: F821


def test_a_class_counter_is_lifted_and_written_back():
    def reset(ns):
        ns["Counted"].count = 40

    def build():
        return isolated(class_counter, Counted=type("Counted", (), {"count": 0}))
    trace = check_compiled(build, [first(x2), again(expect=MONITOR), again(expect=MOCK), again(expect=MOCK),
                                   after(reset, expect=MOCK)], observe=lambda ns: ns["Counted"].count)
    assert trace.stats["records"] == 2, trace.stats


def setattr_and_item_stores(x):
    setattr(o, "a", 5)  # noqa: F821
    D.update({"k": 1})  # noqa: F821
    D.setdefault("s", 2)  # noqa: F821
    L[-1] = 7  # noqa: F821
    return x * 2


def test_setattr_update_and_negative_index_stores_replayed():
    def reset(ns):
        ns["o"].a = 0
        ns["D"]["k"] = 0
        ns["L"][-1] = 0

    modes_checked(lambda: isolated(setattr_and_item_stores, o=_obj(a=5), D={"k": 1, "s": 2}, L=[1, 7]), [
        first(x2), again(), after(reset, expect=MOCK), after(reset, expect=MOCK),
    ], observe=globals_view("o", "D", "L"))


def closure_store():
    n = 5

    def f(x):
        nonlocal n
        n = 5
        return x + 1

    def get():
        return n

    def put(v):
        nonlocal n
        n = v
    return f, {"get": get, "put": put}


def test_nonlocal_store_replayed():
    modes_checked(closure_store, [
        first(x2), again(),
        after(lambda s: s["put"](0), expect=MOCK), after(lambda s: s["put"](1), expect=MOCK),
    ], observe=lambda s: s["get"]())


class Counter(nn.Module):
    def __init__(self):
        super().__init__()
        self.count = 5
        self.sub = nn.Identity()

    def forward(self, x):
        self.count = 5
        self.sub = KEPT
        return x * 2


KEPT = nn.Identity()


def test_module_attribute_and_submodule_stores_replayed():
    def reset(m):
        m.count = 0

    def swap(m):
        m.sub = nn.ReLU()

    def build():
        m = Counter()
        m.sub = KEPT
        return m, m

    modes_checked(build, [
        first(x2), again(), after(reset, expect=MOCK), after(swap, expect=MOCK), again(),
    ], observe=lambda m: (m.count, m.sub is KEPT))


class Store:
    """A container whose ``__setitem__`` is Python: the monitor follows it into its dict."""

    def __init__(self):
        self.data = {"a": 5}

    def __setitem__(self, key, value):
        self.data[key] = value


def python_setitem(x):
    S["a"] = 5  # noqa: F821
    return x + 1


def test_python_setitem_store_replayed():
    def reset(ns):
        ns["S"].data.clear()

    modes_checked(lambda: isolated(python_setitem, S=Store()), [
        first(x2), again(), after(reset, expect=MOCK), after(reset, expect=MOCK),
    ], observe=lambda ns: ns["S"].data)


def module_and_class_stores(x):
    M.X = 7  # noqa: F821
    M.SAME = 5  # noqa: F821
    K.count = 8  # noqa: F821
    del M.GONE  # noqa: F821
    return x + 1


def test_module_and_class_attribute_stores_replayed():
    # Never replayed, changed or not: a module's and a class's attributes had no snapshot.
    def build():
        m = types.ModuleType("m")
        m.X, m.SAME, m.GONE = 0, 5, 1
        return isolated(module_and_class_stores, M=m, K=type("K", (), {"count": 0}))

    def reset(ns):
        ns["M"].X = ns["M"].SAME = ns["K"].count = 0
        ns["M"].GONE = 2

    def observe(ns):
        return {k: v for k, v in vars(ns["M"]).items() if not k.startswith("__")}, ns["K"].count

    modes_checked(build, [
        first(x2), after(reset, expect=MOCK), after(reset, expect=MOCK),
        again(expect=ANY),   # (``del M.GONE`` of a missing attribute: AttributeError, as eager)
    ], observe=observe)


class Slotted:
    __slots__ = ("a", "b")


def slot_stores_and_reads(x):
    o.a = 7.0  # noqa: F821
    return x * o.a * o.b  # noqa: F821


def test_slot_attributes_are_read_and_stored():
    # A __slots__ object has no __dict__: its stores were never replayed and its reads never
    # guarded (o.b's new value gave the old result).
    def build():
        o = Slotted()
        o.a, o.b = 1.0, 2.0
        return isolated(slot_stores_and_reads, o=o)

    def reset(ns):
        ns["o"].a = 0.0

    def change_b(ns):
        ns["o"].b = 3.0

    modes_checked(build, [
        first(x2), again(), after(reset, expect=MOCK), after(change_b, expect=MONITOR), again(),
    ], observe=lambda ns: (ns["o"].a, ns["o"].b))


def list_item_store(x):
    L[0] = 5  # noqa: F821
    return x + 1


def test_list_item_store_keeps_the_items_the_caller_added():
    # The mock wrote ``L[:] = [5]`` (the list as the recording left it) over items a caller added.
    def grow(ns):
        ns["L"][:] = [0, 1, 2]

    def empty(ns):
        ns["L"].clear()

    modes_checked(lambda: isolated(list_item_store, L=[0]), [
        first(x2), again(), after(grow, expect=MONITOR), again(),
        after(empty, expect=ANY),   # (IndexError, as eager: no record)
    ], observe=globals_view("L"))


def delete_then_append(x):
    del L[0]  # noqa: F821
    L.append(7)  # noqa: F821
    return x + 1


def test_list_rewritten_from_what_it_held():
    # [1] -> [7]; a caller's [1, 2] gives [2, 7], not the recorded [7].
    def grow(ns):
        ns["L"][:] = [1, 2]

    modes_checked(lambda: isolated(delete_then_append, L=[1]), [
        first(x2), after(grow, expect=MONITOR), again(expect=MONITOR),
    ], observe=globals_view("L"))


def store_then_delete(x):
    G["k"] = 1  # noqa: F821
    del G["k"]  # noqa: F821
    del o.a  # noqa: F821
    return x + 1


def test_stored_then_deleted_key_and_deleted_attribute():
    def put_back(ns):
        ns["G"]["k"] = 7
        ns["o"].a = 3

    def attribute_back(ns):
        ns["o"].a = 3

    modes_checked(lambda: isolated(store_then_delete, G={}, o=_obj(a=1)), [
        first(x2), after(put_back, expect=MOCK), after(attribute_back, expect=MOCK),
        # ``del o.a`` of a missing attribute raises AttributeError, as eager does
        again(expect=ANY),
    ], observe=globals_view("G", "o"))


def delete_then_store(x):
    del G["a"]  # noqa: F821
    G["a"] = 3  # noqa: F821
    return x + 1


def test_key_deleted_and_stored_again_goes_last():
    def reset(ns):
        ns["G"].clear()
        ns["G"].update({"a": 1, "z": 0})

    modes_checked(lambda: isolated(delete_then_store, G={"a": 1}), [
        first(x2), after(reset, expect=MOCK), after(reset, expect=MOCK),
    ], observe=lambda ns: list(ns["G"].items()))


# ----------------------------------------------------------------------------- F: torch's modes

def xg(state=None):
    return (torch.ones(2, requires_grad=True),)


def zg(state=None):
    return (torch.zeros(2, requires_grad=True),)


def read_under_no_grad(x):
    with torch.no_grad():
        n = int(x.sum())
    return x * (2 if n > 1 else 3)   # (steers: checked)


def test_grad_mode_back_on_after_a_step_under_no_grad():
    # Issue 33 F: the graph switched grad mode off for the step; the exit of ``no_grad`` is in
    # no graph.  Where the check fails (zeros), the call records again: under grad mode, so
    # its result requires grad as eager's does.
    modes_checked(lambda: (read_under_no_grad, None), [
        first(xg), again(), fresh(xg), fresh(zg, expect=MONITOR), again(), fresh(xg),
    ], fullgraph=False)


def printed_under_no_grad(x):
    with torch.no_grad():
        y = x * 2
        print(float(y.sum()) > 0, file=LOG)   # noqa: F821 - the isolated namespace's (a step)
        z = y + 1   # (the last graph starts under no_grad and ends with grad back on)
    return z * x


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_grad_mode_back_on_after_a_graph_a_backend_compiled(backend):
    # A graph that switches grad mode back on leaves it so only when run as recorded: one
    # AOTAutograd compiled keeps the switch inside (Inductor too), and the call left grad
    # mode off.  The mock switches to the program's modes after each graph.
    modes_checked(lambda: isolated(printed_under_no_grad, LOG=io.StringIO()),
                  [first(xg), again(), fresh(xg), again()], fullgraph=False, backend=backend,
                  observe=lambda ns: ns["LOG"].getvalue())


def read_under_enable_grad(x):
    with torch.enable_grad():
        n = int(x.sum())
    return x * (2 if n > 1 else 3)   # (steers: checked)


def test_grad_mode_back_off_after_a_step_under_enable_grad():
    modes_checked(lambda: (read_under_enable_grad, None), [
        first(xg, ctx=torch.no_grad), again(ctx=torch.no_grad), fresh(zg, expect=MONITOR, ctx=torch.no_grad),
        again(ctx=torch.no_grad),
    ], fullgraph=False)


def read_under_set_grad_enabled(x):
    with torch.set_grad_enabled(False):
        n = int(x.sum())
    return x * (2 if n > 1 else 3)


def grad_mode_left_off(x):
    y = x * 2
    n = int(y.sum())
    torch.set_grad_enabled(False)
    return y * (2 if n > 1 else 3)


def test_grad_mode_switched_by_set_grad_enabled():
    modes_checked(lambda: (read_under_set_grad_enabled, None), [
        first(xg), again(), fresh(zg, expect=MONITOR)], fullgraph=False)


@pytest.mark.magpy_rerecords   # (the call leaves grad mode off: the identical call finds it so)
def test_grad_mode_left_off_by_the_program():
    modes_checked(lambda: (grad_mode_left_off, None), [
        first(xg), again(), fresh(zg, expect=MONITOR), again()], fullgraph=False)


def step_before_graph_under_no_grad(x):
    with torch.no_grad():
        print(x.shape)
    return x * 2


def autocast_around_a_step(x):
    y = x * 2
    n = int(y.sum())
    with torch.autocast("cpu", dtype=torch.bfloat16):
        print(n)
    return y @ y


def test_modes_around_steps_outside_graphs():
    # A ``with`` around a step alone: the mock switches the mode for the step and back for the
    # graph after it, whose operations must run as eager's did.
    modes_checked(lambda: (step_before_graph_under_no_grad, None), [first(xg), again(), fresh(xg)],
                  fullgraph=False)
    modes_checked(lambda: (autocast_around_a_step, None), [first(xg), again(), fresh(zg, expect=MONITOR)],
                  fullgraph=False)


def step_raises_under_no_grad(x):
    print("effect")
    with torch.no_grad():
        v = 1.0 / int(x.sum())
    return x * v


def test_grad_mode_after_a_step_raised_under_no_grad():
    modes_checked(lambda: (step_raises_under_no_grad, None), [
        first(xg), again(), fresh(zg, expect=None), again(expect=None),
    ], fullgraph=False)


def resumes_under_grad_modes(x):
    B.add_(1.0)  # noqa: F821 - an effect: a failed check resumes the monitor
    with torch.no_grad():
        n = int(x.sum())
    y = x * (2 if n > 1 else 3)
    with torch.enable_grad():
        m = float(y.sum())
    return y * m


def test_grad_modes_after_a_resume():
    # The continuation records from inside the call, under the modes the mock had there, and
    # leaves them as eager does.
    modes_checked(lambda: isolated(resumes_under_grad_modes, B=torch.zeros(1)), [
        first(xg, ctx=torch.no_grad), again(ctx=torch.no_grad), fresh(zg, expect=MONITOR, ctx=torch.no_grad),
        again(ctx=torch.no_grad), fresh(xg, ctx=torch.no_grad),
        first(xg, expect=MONITOR, name="grad mode on"), fresh(zg, expect=MONITOR), again(),
    ], observe=globals_view("B"), fullgraph=False)


def steps_under_inference_and_autocast(x):
    with torch.inference_mode():
        n = int(x.sum())
    with torch.autocast("cpu"):
        m = int((x @ x).sum())
    with torch.device("cpu"):
        k = int(x.sum())
        y = torch.ones(2)
    return x * n + m * k + y


def test_modes_after_inference_mode_autocast_and_device_blocks():
    modes_checked(lambda: (steps_under_inference_and_autocast, None), [
        first(xg, expect=None), again(expect=None), fresh(zg, expect=None),
    ], fullgraph=False)


# ----------------------------------------------------------------------------- G: caught exceptions

def index_error_path(x):
    try:
        h = xs[1]  # noqa: F821
    except IndexError:
        h = x
    return h * 2


def key_error_path(x):
    try:
        h = D["k"]  # noqa: F821
    except KeyError:
        h = x
    return h * 2


def test_index_error_path_checks_the_length():
    # Issue 33 G: eager 4 once xs has a second item; the record of the IndexError path gave 2.
    def add(ns):
        ns["xs"].append(2 * torch.ones(2))

    modes_checked(lambda: isolated(index_error_path, xs=[torch.ones(2)]), [
        first(x2), again(), after(add, expect=MONITOR), again(),
    ], observe=globals_view("xs"))


def test_key_error_path_checks_the_key_is_missing():
    def add(ns):
        ns["D"]["k"] = 2 * torch.ones(2)

    modes_checked(lambda: isolated(key_error_path, D={}), [
        first(x2), again(), after(add, expect=MONITOR), again(),
    ], observe=globals_view("D"))


class Plain:
    pass


def attribute_error_path(x):
    try:
        v = o.a  # noqa: F821
    except AttributeError:
        v = 1.0
    if hasattr(o, "b"):  # noqa: F821
        v = v + 10.0
    return x * v + getattr(o, "c", 0.5)  # noqa: F821


def test_missing_attribute_paths_check_the_object_and_its_class():
    # AttributeError, hasattr False, getattr's default: the instance may gain the attribute,
    # and so may its class.
    def instance_a(ns):
        ns["o"].a = 3.0

    def class_b(ns):
        ns["K"].b = 1

    def class_c(ns):
        ns["K"].c = 2.0

    def build():
        klass = type("Plain", (Plain,), {})
        return isolated(attribute_error_path, o=klass(), K=klass)

    modes_checked(build, [
        first(x2), again(), after(instance_a, expect=MONITOR), again(),
        after(class_b, expect=MONITOR), again(), after(class_c, expect=MONITOR), again(),
    ], observe=lambda ns: (vars(ns["o"]), ns["K"].__dict__.get("b"), ns["K"].__dict__.get("c")))


class Defaults:
    def __getattr__(self, name):
        return 1.0


def read_through_getattr(x):
    return x * d.scale  # noqa: F821


def test_value_a_python_getattr_made_checks_the_attribute_is_missing():
    # Once the object (or its class) has the attribute, __getattr__ is not asked.
    def own(ns):
        ns["d"].scale = 3.0

    def on_class(ns):
        del ns["d"].scale
        type(ns["d"]).scale = 5.0

    def build():
        return isolated(read_through_getattr, d=type("Defaults", (Defaults,), {})())

    modes_checked(build, [
        first(x2), again(), after(own, expect=MONITOR), again(), after(on_class, expect=MONITOR), again(),
    ], observe=lambda ns: vars(ns["d"]))


def defaultdict_lookup(x):
    D["k"].append(1)  # noqa: F821
    return x * len(D["k"])  # noqa: F821


def test_defaultdict_lookup_that_made_the_key_checks_it_was_missing():
    def put(ns):
        ns["D"].clear()
        ns["D"]["k"] = [7, 7]

    modes_checked(lambda: isolated(defaultdict_lookup, D=collections.defaultdict(list)), [
        first(x2), after(put, expect=MONITOR), after(put, expect=MOCK),
    ], observe=lambda ns: dict(ns["D"]))


def name_error_path(x):
    try:
        v = MAYBE  # noqa: F821
    except NameError:
        v = 1.0
    return x * v


def test_name_error_path_checks_the_global_is_missing():
    def define(ns):
        ns["MAYBE"] = 3.0

    modes_checked(lambda: isolated(name_error_path), [
        first(x2), again(), after(define, expect=MONITOR), again(),
    ], observe=globals_view("MAYBE"))


def failed_natives(x):
    try:
        a, b = xs  # noqa: F821
    except ValueError:
        a = b = 1.5
    try:
        c = L.pop()  # noqa: F821
    except IndexError:
        c = 1.0
    try:
        d = D.pop("k")  # noqa: F821
    except KeyError:
        d = 2.0
    try:
        e = getattr(o, "e")  # noqa: F821
    except AttributeError:
        e = 3.0
    return x * (a * c + b * d + e)


def test_natives_and_unpacking_that_raised():
    def refill(ns):
        ns["xs"].pop()
        ns["L"].append(5.0)
        ns["D"]["k"] = 7.0
        ns["o"].e = 9.0

    modes_checked(lambda: isolated(failed_natives, xs=[1.0, 2.0, 3.0], L=[], D={}, o=Plain()), [
        first(x2), again(), after(refill, expect=MONITOR),
        again(expect=MONITOR), again(),   # (the pops emptied L and D again)
    ], observe=globals_view("xs", "L", "D", "o"))


# ----------------------------------------------------------------------------- silent fallbacks

class InPlaceMatmul(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.eye(2) * 0.5)

    def forward(self, x):
        x += x @ self.w   # (a leaf argument becomes a non-leaf: it keeps no .grad)
        return x


def test_in_place_update_of_an_argument_with_a_parameter_compiles():
    modes_checked(lambda: (lambda m: (m, m))(InPlaceMatmul()), [
        first(lambda m: (torch.randn(2, 2),)),
        again(expect=MONITOR),   # (the same x, which requires grad now: another record)
        again(), fresh(lambda m: (torch.randn(2, 2),)),
    ])


def nested_modes_then_a_tensor_test(x):
    with torch.no_grad():
        with torch.enable_grad():
            with torch.no_grad():
                B.mul_(0.5)  # noqa: F821
    ys = [t for t in x if t > 0]
    return x * len(ys)


def test_resume_inside_a_comprehension_over_a_tensor_compiles():
    # The resume points inside the comprehension take its iterator (a tuple iterator, rebuilt
    # with __setstate__); the mock failed writing it and the callable ran eagerly from then on.
    modes_checked(lambda: isolated(nested_modes_then_a_tensor_test, B=torch.ones(2)), [
        first(xg), again(), fresh(lambda s: (torch.tensor([1.0, -1.0], requires_grad=True),), expect=ANY),
        again(),
    ], observe=globals_view("B"), fullgraph=False)


def parameter_left_behind(x):
    if "scale" not in P:  # noqa: F821
        P["scale"] = nn.Parameter(x.mean(0) * 2)  # noqa: F821
    return x * 2


def test_parameter_made_by_the_call_compiles():
    # ``nn.Parameter(data)`` left behind (a module made lazily): "a tensor of unknown origin"
    # made the callable eager from then on.
    def reset(ns):
        ns["P"].clear()

    trace = modes_checked(lambda: isolated(parameter_left_behind, P={}), [
        first(lambda s: (torch.randn(3, 2),)), fresh(lambda s: (torch.randn(3, 2),), expect=MONITOR),
        again(), after(reset, args=lambda s: (torch.randn(3, 2),), expect=MOCK),
    ], observe=globals_view("P"))
    assert trace.stats["eager_runs"] == 0


# ----------------------------------------------------------------------------- iterators

def next_of_an_outside_iterator(x):
    n = next(IT)  # noqa: F821
    return x * n


def first_of_an_outside_iterator(x):
    for t in IT:  # noqa: F821
        return x * t
    return x


def test_advancing_an_iterator_from_outside_is_not_baked_in():
    # The mock replayed ``next(IT)``'s first value forever (1, 1, 1 for eager's 1, 2, 3):
    # advancing it is an eager step (``next``) or ends recording (a ``for`` over it).
    def build(fn):
        return lambda: isolated(fn, IT=iter([1.0, 2.0, 3.0, 4.0, 5.0]))

    left = lambda ns: operator.length_hint(ns["IT"])  # noqa: E731
    modes_checked(build(next_of_an_outside_iterator), [
        first(x2, expect=None), again(expect=None), again(expect=None), fresh(x2, expect=None)],
        fullgraph=False, observe=left)
    modes_checked(build(first_of_an_outside_iterator), [
        first(x2, expect=None), again(expect=None), again(expect=None)], fullgraph=False, observe=left)


def checks_in_a_loop_over_a_list(x):
    out = x
    for s in [1.0, 1.0, 1.0]:
        B.add_(1.0)  # noqa: F821 - an effect: a failed check resumes the monitor there
        if float((out * s).sum()) > 3.0:
            out = out * 0.5
        else:
            out = out * 2.0
    return out


def test_checks_in_a_loop_over_a_list_resume_in_the_loop():
    # The resume points hold the loop's list iterator (rebuilt with __setstate__, which the
    # mock failed to write: the callable ran eagerly); a continuation's own resume points
    # take it where the continuation left it, and its guard checks the items it has left.
    xs = [1.0, 1.0, 0.1, 2.0, 0.1, 1.0, 2.0, 0.3, 1.6]
    trace = modes_checked(lambda: isolated(checks_in_a_loop_over_a_list, B=torch.zeros(1)),
                           [first(lambda s: (torch.full((2,), xs[0]),))]
                           + [fresh((lambda v: lambda s: (torch.full((2,), v),))(v), expect=None)
                              for v in xs[1:]],
                           fullgraph=False, observe=globals_view("B"))
    assert trace.stats["eager_runs"] == 0
