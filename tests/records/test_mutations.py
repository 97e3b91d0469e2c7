"""Adversarial mutations: state changed between calls must never be served by a stale record.

Between two calls of a compiled program we change, from outside, something the program reads:
globals (scalars, tensors, functions), default arguments, object and class attributes, closure
cells, list elements and lengths, dict entries and keys, submodules, hooks, parameters (replaced,
frozen, or updated in place by an optimizer), ``training``, grad mode, argument aliasing, dtypes
and batch sizes.  Then programs that mutate external state themselves, and programs that draw
random numbers.  Every call must return
what eager returns and leave the same state behind (see ``tests/harness/compile_harness.py``).

Where a change alters the graph's structure (a reduction dim, a branch, a list length, a dict's
keys, a module's type, ``training``, aliasing, a dtype) the call after it must be a recording
run (``MONITOR``); where a mock that reloads its inputs from their paths is also correct (a new
tensor at the same place, a float that may be lifted into the graph) we accept either (``ANY``).

The module-level globals below are defaults only: every program runs over a private namespace
(``isolated``), so the two copies of a case never share a global.
"""
import functools
import types

import pytest
import torch
import torch.nn as nn

from tests.harness.compile_harness import (
    ANY,
    MOCK,
    MONITOR,
    Step,
    after,
    again,
    check_compiled,
    first,
    fresh,
    fresh_magpy,  # noqa: F401 - autouse fixture: magpy.reset() before each test
    globals_view,
    isolated,
    standard,
)

SCALE = 2.0
DIM = 1
W = torch.ones(3, 4)
LOG = []
CACHE = {}


def x34(state=None):
    return (torch.randn(3, 4),)


# ----------------------------------------------------------------------------- globals

def scale_by_global(x):
    return x * SCALE


def sum_over_global_dim(x):
    return x.sum(DIM)


def mul_global_tensor(x):
    return x * W


def test_global_scalar_changed():
    def set_scale(ns):
        ns["SCALE"] = 3.0

    def restore_scale(ns):
        ns["SCALE"] = 2.0

    check_compiled(lambda: isolated(scale_by_global, SCALE=2.0), standard(x34) + [
        after(set_scale, expect=ANY),
        again(),
        after(restore_scale, expect=MOCK),
    ], observe=globals_view("SCALE"))


def test_global_int_used_as_dim_changed():
    def set_dim(ns):
        ns["DIM"] = 0

    def restore_dim(ns):
        ns["DIM"] = 1

    check_compiled(lambda: isolated(sum_over_global_dim, DIM=1), standard(x34) + [
        after(set_dim, expect=MONITOR),
        again(),
        after(restore_dim, expect=MOCK),
    ], observe=globals_view("DIM"), expect_records=2)


def test_global_tensor_replaced():
    def replace_w(ns):
        ns["W"] = torch.randn(3, 4)

    def replace_w_float64(ns):
        ns["W"] = torch.randn(3, 4, dtype=torch.float64)

    check_compiled(lambda: isolated(mul_global_tensor, W=torch.randn(3, 4)), standard(x34) + [
        after(replace_w, expect=ANY),
        again(),
        after(replace_w_float64, expect=MONITOR),
        again(),
    ], observe=globals_view("W"))


def test_global_tensor_updated_in_place():
    def bump_w(ns):
        ns["W"].mul_(-2.0)

    check_compiled(lambda: isolated(mul_global_tensor, W=torch.randn(3, 4)), standard(x34) + [
        after(bump_w, expect=MOCK),
        again(),
    ], observe=globals_view("W"))


def plus_one(x):
    return x + 1


def times_ten(x):
    return x * 10


HELPER = plus_one


def call_global_helper(x):
    return HELPER(x) * 2


def test_global_function_replaced():
    def swap_helper(ns):
        ns["HELPER"] = times_ten

    check_compiled(lambda: isolated(call_global_helper, HELPER=plus_one), standard(x34) + [
        after(swap_helper, expect=MONITOR),
        again(),
    ], observe=globals_view("HELPER"))


def sum_default_dim(x, dims=[1]):   # noqa: B006 - the mutable default is the point
    return x.sum(dims[0])


def test_mutable_default_argument_changed():
    def build():
        fn, _ = isolated(sum_default_dim)
        fn.__defaults__ = ([1],)
        return fn, {"fn": fn}

    def set_default(s):
        s["fn"].__defaults__[0][0] = 0

    def replace_defaults(s):
        s["fn"].__defaults__ = ([1],)

    check_compiled(build, standard(x34) + [
        after(set_default, expect=MONITOR),
        again(),
        after(replace_defaults, expect=MOCK),
    ], observe=lambda s: s["fn"].__defaults__)


def sum_dim_default(x, dim=1):
    return x.sum(dim)


def test_default_argument_value_replaced():
    def build():
        fn, _ = isolated(sum_dim_default)
        return fn, {"fn": fn}

    def set_defaults(s):
        s["fn"].__defaults__ = (0,)

    check_compiled(build, standard(x34) + [
        after(set_defaults, expect=MONITOR),
        again(),
    ], observe=lambda s: s["fn"].__defaults__)


# ----------------------------------------------------------------------------- attributes

class Cfg:
    def __init__(self):
        self.dim = 1
        self.offset = torch.randn(1)


def reduce_with_cfg(x, cfg):
    return x.sum(cfg.dim) + cfg.offset


def _cfg_build():
    return reduce_with_cfg, {"cfg": Cfg()}


def _cfg_args(s):
    return torch.randn(3, 4), s["cfg"]


def test_object_attribute_changed():
    def set_dim(s):
        s["cfg"].dim = 0

    def new_offset(s):
        s["cfg"].offset = torch.randn(1)

    check_compiled(_cfg_build, standard(_cfg_args) + [
        after(set_dim, expect=MONITOR),
        again(),
        after(new_offset, expect=ANY),
        again(),
    ])



class PyScale:
    """Multiplies through Python operator methods, which CPython calls from native code."""

    def __init__(self):
        self.k = 2.0

    def __mul__(self, x):
        return x * self.k

    __rmul__ = __mul__


def scale_by_operator(x, s):
    return s * x


def test_operator_method_reading_a_changed_attribute():
    # s * x: the monitor enters PyScale.__mul__, so its read of s.k is guarded: one graph,
    # and a changed k records again (never a mock that bakes in the old k).
    def set_k(s):
        s["s"].k = 5.0

    args = lambda s: (torch.randn(3, 4), s["s"])   # noqa: E731
    check_compiled(lambda: (scale_by_operator, {"s": PyScale()}), standard(args) + [
        after(set_k, expect=MONITOR),
        again(expect=MOCK),
    ])

def test_object_attribute_deleted_and_added_back():
    def drop_dim(s):
        del s["cfg"].dim          # now the program raises AttributeError, eagerly and compiled

    def add_dim(s):
        s["cfg"].dim = 1

    check_compiled(_cfg_build, standard(_cfg_args) + [
        after(drop_dim, expect=None),
        after(add_dim, expect=MOCK),
    ])


class Scaled:
    factor = 2.0     # class attribute, read through the instance

    def __init__(self):
        self.w = torch.randn(4)

    def apply(self, x):
        return x * self.w * self.factor


def _scaled_build(define_factor=True):
    def build():
        # a fresh class per copy, so class state is not shared between the two copies
        cls = type("Scaled", (Scaled,), {"factor": 2.0} if define_factor else {})
        obj = cls()
        return obj.apply, {"obj": obj, "cls": cls}
    return build


def set_class_factor(s):
    s["cls"].factor = -1.0


def test_class_attribute_changed():
    check_compiled(_scaled_build(), standard(x34) + [
        after(set_class_factor, expect=ANY),
        again(),
    ], observe=lambda s: (s["obj"], s["cls"].factor))


def test_subclass_attribute_shadows_base_class_attribute():
    # factor is first found on the base class; setting it on the instance's own class shadows it
    check_compiled(_scaled_build(define_factor=False), standard(x34) + [
        after(set_class_factor, expect=ANY),
        again(),
    ], observe=lambda s: (s["obj"], s["cls"].factor))


def test_instance_attribute_shadows_class_attribute():
    def shadow(s):
        s["obj"].factor = 5.0

    def unshadow(s):
        del s["obj"].factor

    check_compiled(_scaled_build(), standard(x34) + [
        after(shadow, expect=ANY),
        again(),
        after(unshadow, expect=MOCK),
    ], observe=lambda s: (s["obj"], s["cls"].factor))


# ----------------------------------------------------------------------------- closures

def _closure_rebinding_build():
    dim = 1

    def reduce(x):
        return x.sum(dim)

    def set_dim(v):
        nonlocal dim
        dim = v

    return reduce, {"fn": reduce, "set_dim": set_dim}


def _cells(s):
    return [c.cell_contents for c in s["fn"].__closure__]


def test_closure_nonlocal_rebinding():
    check_compiled(_closure_rebinding_build, standard(x34) + [
        after(lambda s: s["set_dim"](0), name="nonlocal dim = 0", expect=MONITOR),
        again(),
        after(lambda s: s["set_dim"](1), name="nonlocal dim = 1", expect=MOCK),
    ], observe=_cells)


def _closure_cell_content_build():
    conf = {"dim": 1, "scale": torch.ones(1)}

    def reduce(x):
        return x.sum(conf["dim"]) * conf["scale"]

    return reduce, {"fn": reduce, "conf": conf}


def test_closure_mutable_cell_content():
    def set_dim(s):
        s["conf"]["dim"] = 0

    def new_scale(s):
        s["conf"]["scale"] = torch.full((1,), 3.0)

    check_compiled(_closure_cell_content_build, standard(x34) + [
        after(set_dim, expect=MONITOR),
        again(),
        after(new_scale, expect=ANY),
        again(),
    ], observe=_cells)


# ----------------------------------------------------------------------------- callables held in state
# A partial or a bound method kept in an attribute and called: what it wraps (the function,
# its arguments and keywords; the method's function and self) steers the call as much as its
# type, and a record must not serve another one.  (Its guard checked the type only: a new
# ``partial(f, dim=0)`` replayed the record of ``dim=1``.)

def _reduce_by(x, *, dim, scale=1.0):
    return x.sum(dim) * scale


def _reduce_twice(x, *, dim, scale=1.0):
    return x.sum(dim) * 2 * scale


class _Reducer:
    scale = 1.0

    def __init__(self, dim):
        self.dim = dim

    def reduce(self, x):
        return x.sum(self.dim) * self.scale

    def reduce_twice(self, x):
        return x.sum(self.dim) * 2


class _ScaledReducer(_Reducer):
    scale = 3.0   # (its ``reduce`` is the base class's function: only the object's type differs)


def _held_callable_build(make):
    def build():
        holder = types.SimpleNamespace(fn=make())

        def f(x):
            return holder.fn(x) + 1
        return f, {"holder": holder}
    return build


def _set(value):
    def mutate(s):
        s["holder"].fn = value()
    mutate.__name__ = "replace the held callable"
    return mutate


def test_partial_keywords_changed_in_place():
    def set_dim(s):
        s["holder"].fn.keywords["dim"] = 0
    check_compiled(_held_callable_build(lambda: functools.partial(_reduce_by, dim=1)), standard(x34) + [
        after(set_dim, expect=MONITOR), again()])


def test_partial_replaced_by_another_of_the_same_type():
    build = _held_callable_build(lambda: functools.partial(_reduce_by, dim=1))
    check_compiled(build, standard(x34) + [
        after(_set(lambda: functools.partial(_reduce_by, dim=0)), expect=MONITOR),
        after(_set(lambda: functools.partial(_reduce_twice, dim=0)), expect=MONITOR),
        after(_set(lambda: functools.partial(_reduce_twice, dim=0, scale=3.0)), expect=ANY),
        again()])


def test_partial_arguments_changed():
    build = _held_callable_build(lambda: functools.partial(torch.sum, dim=1))
    check_compiled(build, standard(x34) + [
        after(_set(lambda: functools.partial(torch.sum, dim=0)), expect=MONITOR), again()])


# A bound method held in state steers the call by its function and its object: the guard
# checks the function's identity and the object as any object it reaches (its type, what the
# call reads of it).  (It checked the method's type only: another object's method of the same
# function, another method of the object, a subclass instance's, an object changed since, all
# replayed the record of the first.)  A method the call makes itself (``obj.method``, a
# ``with`` block's ``__exit__``) is new on every call and needs no check of its own.

def _held_in_attribute(fn):
    holder = types.SimpleNamespace(fn=fn)

    def f(x):
        return holder.fn(x) + 1
    return f, lambda: holder.fn, lambda v: setattr(holder, "fn", v)


def _held_in_dict(fn):
    table = {"reduce": fn}

    def f(x):
        return table["reduce"](x) + 1
    return f, lambda: table["reduce"], lambda v: table.__setitem__("reduce", v)


def _held_in_list(fn):
    fns = [fn]

    def f(x):
        outs = []
        for g in fns:
            outs.append(g(x) + 1)
        return outs
    return f, lambda: fns[0], lambda v: fns.__setitem__(0, v)


def _held_in_cell(fn):
    def f(x):
        return fn(x) + 1
    cell = f.__closure__[0]
    return f, lambda: cell.cell_contents, lambda v: setattr(cell, "cell_contents", v)


HELD = None   # (a default: each copy of the program reads its own, isolated)


def _call_held_global(x):
    return HELD(x) + 1


def _held_in_global(fn):
    f, ns = isolated(_call_held_global, HELD=fn)
    return f, lambda: ns["HELD"], lambda v: ns.__setitem__("HELD", v)


_HOLDERS = {"attribute": _held_in_attribute, "dict item": _held_in_dict, "list item": _held_in_list,
            "closure cell": _held_in_cell, "global": _held_in_global}


def _method_build(hold, make=lambda: _Reducer(1).reduce):
    def build():
        f, get, put = hold(make())
        return f, {"get": get, "put": put}
    return build


def _put(make, what):
    def mutate(s):
        s["put"](make(s["get"]()))
    mutate.__name__ = what
    return mutate


def _receiver(s):
    """What the program's state holds: the held method's object, as it is now."""
    m = s["get"]()
    return type(m.__self__).__qualname__, m.__func__.__name__, dict(vars(m.__self__))


@pytest.mark.parametrize("where", list(_HOLDERS))
def test_bound_method_of_another_object(where):
    check_compiled(_method_build(_HOLDERS[where]), standard(x34) + [
        after(_put(lambda m: _Reducer(0).reduce, "another object's method"), expect=MONITOR),
        again(),
        after(_put(lambda m: _Reducer(0).reduce, "an equal object's method"), expect=ANY),
        again()], observe=_receiver)


@pytest.mark.parametrize("where", list(_HOLDERS))
def test_bound_method_object_changed(where):
    def set_dim(s):
        s["get"]().__self__.dim = 0
    check_compiled(_method_build(_HOLDERS[where]), standard(x34) + [
        after(set_dim, expect=MONITOR), again()], observe=_receiver)


def test_bound_method_another_method_of_the_object():
    check_compiled(_method_build(_held_in_attribute), standard(x34) + [
        after(_put(lambda m: m.__self__.reduce_twice, "the object's other method"), expect=MONITOR),
        again(),
        after(_put(lambda m: m.__self__.reduce, "the first method again"), expect=MOCK)],
        observe=_receiver)


def test_bound_method_of_a_subclass_instance():
    # The same function, an object with the same attributes: the class's ``scale`` differs.
    check_compiled(_method_build(_held_in_attribute), standard(x34) + [
        after(_put(lambda m: _ScaledReducer(1).reduce, "a subclass instance's method"), expect=MONITOR),
        again()], observe=_receiver)


def test_bound_method_receiver_also_held_in_state():
    # The object is reached twice (``holder.obj`` and the method's ``__self__``): a write
    # through one is seen through the other while they are one object, not after.
    def build():
        obj = _Reducer(1)
        holder = types.SimpleNamespace(fn=obj.reduce, obj=obj)

        def f(x):
            y = holder.fn(x)
            holder.obj.dim = 1 - holder.obj.dim
            z = holder.fn(x)
            holder.obj.dim = 1 - holder.obj.dim
            return y, z
        return f, {"holder": holder}

    def split(s):
        s["holder"].obj = _Reducer(1)   # (equal to the method's object, not it)
    check_compiled(build, standard(x34) + [after(split, expect=MONITOR), again()],
                   observe=lambda s: (s["holder"].obj.dim, s["holder"].fn.__self__.dim))


def test_bound_method_attribute_looked_up_on_its_function():
    # ``hasattr(method, name)`` asks its function: one that gains the attribute since is
    # another call (the function of a class made per copy: the copies do not share it).
    def build():
        class Local(_Reducer):
            def reduce(self, x):
                return x.sum(self.dim)
        holder = types.SimpleNamespace(fn=Local(1).reduce)

        def f(x):
            return holder.fn(x) * (2 if hasattr(holder.fn, "double") else 1)
        return f, {"holder": holder}

    def mark(s):
        s["holder"].fn.__func__.double = True
    check_compiled(build, standard(x34) + [after(mark, expect=MONITOR), again()],
                   observe=lambda s: vars(s["holder"].fn.__func__))


def _builtin_method_build():
    logs = ([], [])
    holder = types.SimpleNamespace(log=logs[0].append)

    def f(x):
        holder.log(x.sum(0))
        return x + 1
    return f, {"holder": holder, "logs": logs}


def test_builtin_bound_method_held_in_state():
    # ``items.append`` of a list reached only through the method: the call appends to it (the
    # mock left the list as it was), and another list's ``append`` is another call.
    def other_list(s):
        s["holder"].log = s["logs"][1].append
    check_compiled(_builtin_method_build, standard(x34) + [
        after(other_list, expect=MONITOR), again()], observe=lambda s: s["logs"])


def test_tensor_bound_method_held_in_state():
    # ``w.add`` held in state: ``w`` is a graph input read through the method (it ran eagerly
    # as a tensor of unknown origin), changed in place and replaced with another tensor's.
    def build():
        ws = (torch.ones(4), torch.full((4,), 2.0))
        holder = types.SimpleNamespace(fn=ws[0].add)

        def f(x):
            return holder.fn(x) * 2
        return f, {"holder": holder, "ws": ws}

    def scale_in_place(s):
        s["ws"][0].mul_(3)

    def other_tensor(s):
        s["holder"].fn = s["ws"][1].add
    check_compiled(build, standard(x34) + [
        after(scale_in_place, expect=MOCK), after(other_tensor, expect=MONITOR), again()],
        observe=lambda s: s["ws"])


def test_method_made_by_the_call_is_not_state():
    # ``obj.reduce`` evaluated in the call, and ``holder.obj.reduce`` kept in a local: new
    # method objects on every call, the same function and object: the record is hit.
    def build():
        holder = types.SimpleNamespace(obj=_Reducer(1))

        def f(x):
            fn = holder.obj.reduce
            return fn(x) + holder.obj.reduce(x).sum()
        return f, {"holder": holder}

    def set_dim(s):
        s["holder"].obj.dim = 0
    check_compiled(build, standard(x34) + [after(set_dim, expect=MONITOR), again()],
                   observe=lambda s: vars(s["holder"].obj))


# ----------------------------------------------------------------------------- lists

def permute_by(x, dims):
    return x.permute(*dims) * 2


def mul_pair(xs):
    return xs[0] * xs[1]


def sum_all(xs):
    out = xs[0]
    for t in xs[1:]:
        out = out + t
    return out


def test_list_element_changed():
    def swap(s):
        s["dims"][0], s["dims"][1] = s["dims"][1], s["dims"][0]

    args = lambda s: (torch.randn(3, 4), s["dims"])   # noqa: E731
    check_compiled(lambda: (permute_by, {"dims": [0, 1]}), standard(args) + [
        after(swap, expect=MONITOR),
        again(),
        after(swap, expect=MOCK),
    ])


def test_list_tensor_element_replaced():
    def replace(s):
        s["xs"][1] = torch.randn(3, 4)

    check_compiled(lambda: (mul_pair, {"xs": [torch.randn(3, 4), torch.randn(3, 4)]}), [
        first(lambda s: (s["xs"],)),
        again(),
        after(replace, expect=ANY),
        again(),
    ])


def test_list_length_changed():
    def append(s):
        s["xs"].append(torch.randn(2))

    def pop(s):
        s["xs"].pop()

    check_compiled(lambda: (sum_all, {"xs": [torch.randn(2), torch.randn(2)]}), [
        first(lambda s: (s["xs"],)),
        again(),
        after(append, expect=MONITOR),
        again(),
        after(pop, expect=MOCK),
    ], expect_records=2)


# ----------------------------------------------------------------------------- dicts

def reduce_with_dict(x, d):
    return x.sum(d["dim"]) * d["w"]


def maybe_bias(x, d):
    if "bias" in d:
        x = x + d["bias"]
    return x * 2


def test_dict_entry_changed():
    def set_dim(s):
        s["d"]["dim"] = 0

    def new_w(s):
        s["d"]["w"] = torch.randn(1)

    check_compiled(lambda: (reduce_with_dict, {"d": {"dim": 1, "w": torch.randn(1)}}),
                   standard(lambda s: (torch.randn(3, 4), s["d"])) + [
                       after(set_dim, expect=MONITOR),
                       again(),
                       after(new_w, expect=ANY),
                       again(),
                   ])


def test_dict_key_added_and_removed():
    def add_bias(s):
        s["d"]["bias"] = torch.randn(4)

    def remove_bias(s):
        del s["d"]["bias"]

    check_compiled(lambda: (maybe_bias, {"d": {}}), standard(lambda s: (torch.randn(3, 4), s["d"])) + [
        after(add_bias, expect=MONITOR),
        again(),
        after(remove_bias, expect=MOCK),
    ], expect_records=2)


# ----------------------------------------------------------------------------- modules

class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 3)
        self.act = nn.ReLU()

    def forward(self, x):
        return self.act(self.lin(x))


def _net_build():
    net = Net()
    return net, net


def _net_opt_build():
    net = Net()
    return net, {"net": net, "opt": torch.optim.SGD(net.parameters(), lr=0.5)}


def test_submodule_replaced_by_other_type():
    def to_tanh(net):
        net.act = nn.Tanh()

    check_compiled(_net_build, standard(x34) + [
        after(to_tanh, expect=MONITOR),
        again(),
    ])


def test_submodule_replaced_by_same_type_new_weights():
    def new_lin(net):
        net.lin = nn.Linear(4, 3)

    check_compiled(_net_build, standard(x34) + [
        after(new_lin, expect=ANY),
        again(),
    ])


def test_parameter_replaced():
    def new_weight(net):
        net.lin.weight = nn.Parameter(torch.randn(3, 4))

    check_compiled(_net_build, standard(x34) + [
        after(new_weight, expect=ANY),
        again(),
    ])


def test_parameter_updated_in_place_by_sgd_step():
    def sgd_step(s):
        s["opt"].zero_grad()
        s["net"](torch.randn(5, 4)).pow(2).sum().backward()
        s["opt"].step()

    check_compiled(_net_opt_build, [
        first(lambda s: (torch.randn(3, 4),)),
        again(),
        after(sgd_step, expect=ANY),
        again(),
        after(sgd_step, expect=ANY),
    ], observe=lambda s: s["net"])


def test_parameter_requires_grad_toggled():
    def freeze(net):
        net.lin.weight.requires_grad_(False)

    def unfreeze(net):
        net.lin.weight.requires_grad_(True)

    check_compiled(_net_build, standard(x34) + [
        after(freeze, expect=ANY),
        again(),
        after(unfreeze, expect=ANY),
    ])


def test_forward_hook_registered_and_removed():
    def double_output(module, inputs, output):
        return output * 2

    def register(s):
        s["handle"] = s["net"].act.register_forward_hook(double_output)

    def remove(s):
        s["handle"].remove()

    check_compiled(lambda: (lambda net: (net, {"net": net}))(Net()), standard(x34) + [
        after(register, expect=MONITOR),
        again(),
        after(remove, expect=MOCK),
    ], observe=lambda s: (s["net"].state_dict(), len(s["net"].act._forward_hooks)))   # hook ids differ


class BNNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.bn = nn.BatchNorm1d(4)

    def forward(self, x):
        return self.bn(self.lin(x)).relu()


def test_train_eval_toggle_batchnorm():
    def build():
        net = BNNet().eval()
        return net, net

    def train(net):
        net.train()

    def eval_(net):
        net.eval()

    # train mode: batch statistics and in-place running_mean/running_var/num_batches_tracked
    # updates (the observed state is the whole module, buffers included)
    check_compiled(build, standard(lambda n: (torch.randn(5, 4),)) + [
        after(train, expect=MONITOR),
        again(),
        fresh(lambda n: (torch.randn(5, 4),), seed=2),
        after(eval_, expect=MOCK),
    ], expect_records=2)


class TrainBranch(nn.Module):
    def __init__(self):
        super().__init__()
        self.drop = nn.Dropout(p=0.0)
        self.lin = nn.Linear(4, 4)

    def forward(self, x):
        out = self.drop(self.lin(x))
        if self.training:
            out = out + 1.0
        return out


def test_train_eval_toggle_training_branch():
    def build():
        net = TrainBranch()
        return net, net

    check_compiled(build, standard(x34) + [
        after(lambda n: n.eval(), name="eval()", expect=MONITOR),
        again(),
        after(lambda n: n.train(), name="train()", expect=MOCK),
    ])


def test_grad_mode_toggled():
    # the output's requires_grad must follow the grad mode of the call
    check_compiled(_net_build, standard(x34) + [
        again(ctx=torch.no_grad, name="under no_grad", expect=ANY),
        again(ctx=torch.no_grad, name="under no_grad again", expect=MOCK),
        again(name="grad mode back on", expect=MOCK),
    ])


def branch_on_grad_mode(x, w):
    y = x * w
    if torch.is_grad_enabled():
        y = y + 1
    return y


def test_grad_mode_read_by_the_program():
    # global state the program reads through a function call must be guarded too
    check_compiled(lambda: (branch_on_grad_mode, {"w": torch.randn(4, requires_grad=True)}), [
        first(lambda s: (torch.randn(3, 4), s["w"])),
        again(),
        again(ctx=torch.no_grad, name="under no_grad", expect=MONITOR),
        again(ctx=torch.no_grad, name="under no_grad again", expect=MOCK),
        again(name="grad mode back on", expect=MOCK),
    ], expect_records=2)


# ----------------------------------------------------------------------------- aliasing

def move_first(x, a, b):
    a[0] = a[0] + x
    return b[0] * 2


def add_then_read(a, b):
    a.add_(1)
    return b * 2


def _lists_build():
    return move_first, {"l1": [torch.randn(3)], "l2": [torch.randn(3)]}


def test_alias_same_list_vs_different_lists():
    distinct = lambda s: (torch.randn(3), s["l1"], s["l2"])   # noqa: E731
    aliased = lambda s: (torch.randn(3), s["l1"], s["l1"])    # noqa: E731
    check_compiled(_lists_build, [
        first(distinct),
        again(),
        Step("the same list twice", aliased, expect=MONITOR),
        again(),
        Step("two different lists again", distinct, seed=4, expect=MOCK),
    ], expect_records=2)


def test_alias_same_tensor_vs_different_tensors():
    distinct = lambda s: (s["t1"], s["t2"])   # noqa: E731
    aliased = lambda s: (s["t1"], s["t1"])    # noqa: E731
    check_compiled(lambda: (add_then_read, {"t1": torch.randn(3), "t2": torch.randn(3)}), [
        first(distinct),
        again(),
        Step("the same tensor twice", aliased, expect=MONITOR),
        again(),
        Step("two different tensors again", distinct, expect=MOCK),
    ], expect_records=2)


GBUF = [torch.zeros(3)]


def accumulate_and_read_global(x, buf):
    buf[0] = buf[0] + x
    return GBUF[0] * 2


def test_alias_argument_and_global():
    def build():
        gbuf = [torch.randn(3)]
        fn, ns = isolated(accumulate_and_read_global, GBUF=gbuf)
        return fn, {"ns": ns, "other": [torch.randn(3)]}

    other = lambda s: (torch.randn(3), s["other"])          # noqa: E731
    the_global = lambda s: (torch.randn(3), s["ns"]["GBUF"])  # noqa: E731
    check_compiled(build, [
        first(other),
        again(),
        Step("the global list passed as the argument", the_global, expect=MONITOR),
        again(),
        Step("another list again", other, seed=6, expect=MOCK),
    ], observe=lambda s: {"GBUF": s["ns"]["GBUF"], "other": s["other"]})


# ----------------------------------------------------------------------------- programs that mutate

def append_to_global_log(x):
    LOG.append(x.sum())
    return x * 2


def write_global_cache(x):
    CACHE["last"] = x * 3
    return x + 1


class Counter(nn.Module):
    def __init__(self):
        super().__init__()
        self.calls = 0

    def forward(self, x):
        self.calls += 1
        return x * self.calls


class Recorder:
    def __init__(self):
        self.hist = None

    def record(self, x):
        self.hist = [x * 2]
        return x + 1


def add_in_place(x):
    x.add_(1)
    return x


def _hold(key, get):
    """A mutation that keeps a reference to what the program wrote last time."""
    def hold(s):
        s[key] = get(s)
    hold.__name__ = f"hold {key}"
    return hold


def test_program_appends_to_global_list():
    def build():
        fn, ns = isolated(append_to_global_log, LOG=[])
        return fn, ns

    check_compiled(build, [first(x34), again(expect=ANY), again(expect=ANY), fresh(x34, expect=ANY)],
                   observe=globals_view("LOG"))


def test_program_writes_dict_entry():
    def build():
        fn, ns = isolated(write_global_cache, CACHE={})
        return fn, ns

    def observe(ns):
        return {"CACHE": ns["CACHE"], "held": ns.get("held"),
                "held is current": ns.get("held") is ns["CACHE"].get("last")}

    check_compiled(build, [
        first(x34),
        after(_hold("held", lambda ns: ns["CACHE"]["last"]), expect=ANY),
        fresh(x34, expect=ANY),
    ], observe=observe)


def test_program_increments_counter_attribute():
    def build():
        c = Counter()
        return c, c

    check_compiled(build, [first(x34), again(expect=ANY), again(expect=ANY), fresh(x34, expect=ANY)])


def test_program_updates_argument_in_place():
    check_compiled(lambda: (add_in_place, {"x": torch.zeros(3)}), [
        first(lambda s: (s["x"],)),
        again(),
        again(),
        fresh(lambda s: (torch.randn(3),)),
    ])


def test_program_replaces_attribute_with_new_list():
    def build():
        r = Recorder()
        return r.record, {"r": r}

    def observe(s):
        held = s.get("held")
        return {"r": s["r"], "held": held, "held is current": held is s["r"].hist,
                "held[0] is current[0]": held is not None and held[0] is s["r"].hist[0]}

    check_compiled(build, [
        first(x34),
        after(_hold("held", lambda s: s["r"].hist), expect=ANY),
        again(expect=MOCK),
        fresh(x34, expect=MOCK),
    ], observe=observe)


def affine(x):
    return x * 2 + 1


def take_next(x, queue):
    item = queue.pop(0)
    return x * item


def test_program_pops_from_argument_list():
    check_compiled(lambda: (take_next, {"queue": [torch.randn(3) for _ in range(4)]}), [
        first(lambda s: (torch.randn(3), s["queue"])),
        again(expect=ANY),
        again(expect=ANY),
    ])


def test_argument_dtype_changed():
    check_compiled(lambda: (affine, None), standard(x34) + [
        Step("float64 argument", lambda s: (torch.randn(3, 4, dtype=torch.float64),), expect=MONITOR),
        Step("int64 argument", lambda s: (torch.arange(12).reshape(3, 4),), expect=MONITOR),
        Step("float32 argument again", x34, seed=5, expect=MOCK),
    ], expect_records=3)


def test_argument_that_makes_the_program_raise():
    # float64 input into a float32 Linear: the same exception (type and message) as eager
    check_compiled(_net_build, standard(x34) + [
        Step("float64 argument", lambda s: (torch.randn(3, 4, dtype=torch.float64),), expect=None),
        Step("float32 argument again", x34, seed=5, expect=MOCK),
    ])


def grow_and_return_buffer(x):
    BUF.append(x * 2)
    return BUF


BUF = []


def test_program_returns_a_global_list_itself():
    # the result *is* the global list: the mock must return that object, not a copy
    check_compiled(lambda: isolated(grow_and_return_buffer, BUF=[]),
                   [first(x34), again(expect=ANY), fresh(x34, expect=ANY)], observe=globals_view("BUF"))


def zero_first_column(x):
    x[:, 0] = 0.0
    x[1].mul_(3)
    return x.sum(0)


def test_program_writes_into_argument_slices():
    check_compiled(lambda: (zero_first_column, {"x": torch.randn(3, 4)}), [
        first(lambda s: (s["x"],)),
        again(),
        fresh(lambda s: (torch.randn(3, 4),)),
    ], observe=lambda s: s["x"])


def flatten_rows(x):
    n = x.size(0)
    return x.reshape(n, -1).sum(1) * n


def test_batch_size_changes():
    check_compiled(lambda: (flatten_rows, None), [
        first(lambda s: (torch.randn(2, 3, 4),)),
        again(),
        Step("batch 5", lambda s: (torch.randn(5, 3, 4),), expect=ANY),
        Step("batch 7", lambda s: (torch.randn(7, 3, 4),), expect=ANY),
        Step("batch 2 again", lambda s: (torch.randn(2, 3, 4),), seed=3, expect=MOCK),
    ])


def add_noise(x):
    return x + torch.randn_like(x) * 0.1


class NoisyDrop(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.drop = nn.Dropout(p=0.5)

    def forward(self, x):
        return self.drop(self.lin(x))


def test_random_ops_draw_fresh_numbers_each_call():
    # each call is seeded identically for both copies: the mock must sample again (and in the
    # same order as eager), never replay the monitor run's random tensor
    trace = check_compiled(lambda: (add_noise, None), [
        first(lambda s: (torch.zeros(3, 4),)),
        again(),
        fresh(lambda s: (torch.zeros(3, 4),)),
    ])
    first_result, second_result = trace.results[0][1], trace.results[1][1]
    assert not torch.equal(first_result, second_result), "calls were seeded differently: noise must differ"


def test_dropout_in_train_mode_matches_eager_with_the_same_seed():
    def build():
        net = NoisyDrop()
        return net, net

    check_compiled(build, standard(x34) + [after(lambda n: n.eval(), name="eval()", expect=MONITOR)])
