"""Real code paths that used to make the whole call eager (issue 9), compiled differentially.

Python special methods that operators call (a registry's ``__contains__``, a config's
``__eq__``/``__getattribute__``), grad-mode and inference-mode switches, ``copy.deepcopy`` of a
config, numpy computing Python-side plans, ``torch.ops`` custom operators and ``lru_cache``
helpers: each is one graph, matches eager on the first, a repeated and a fresh call, and a
mutation of what it read from outside records again (never a stale mock).
"""
import copy
import functools

import numpy as np
import pytest
import torch

import magpy
from tests.harness.compile_harness import EAGER, MOCK, after, again, check_compiled, first, standard


def _x(s):
    return (torch.randn(3, 4),)


# ----------------------------------------------------------------------------- special methods
class Registry:
    """Like transformers' AttentionInterface: a mapping whose protocol methods are Python."""

    def __init__(self):
        self._fns = {"relu": torch.relu, "tanh": torch.tanh}
        self._disabled = set()
        self.spare = 0

    def __contains__(self, key):
        return key in self._fns and key not in self._disabled

    def __getitem__(self, key):
        return self._fns[key]

    def __len__(self):
        return len(self._fns) + self.spare


class Config:
    def __init__(self):
        self.impl = "relu"
        self.scale = 2.0

    def __eq__(self, other):
        return isinstance(other, Config) and self.impl == other.impl

    __hash__ = object.__hash__


def _registry_build():
    reg, cfg = Registry(), Config()

    def forward(x):
        f = reg[cfg.impl] if cfg.impl in reg else torch.sigmoid
        return f(x) * len(reg) * cfg.scale

    return forward, {"reg": reg, "cfg": cfg}


def test_registry_contains_and_getitem_are_monitored():
    # Each mutation changes only state that a special method's body reads.
    def disable(s):
        s["reg"]._disabled.add("relu")     # `in` is now False: the other branch

    def grow(s):
        s["reg"].spare = 3                 # len() changes

    def change_impl(s):
        s["cfg"].impl = "tanh"

    check_compiled(_registry_build, standard(_x) + [
        after(disable), again(), after(grow), again(), after(change_impl), again(expect=MOCK),
    ])


class Aliased:
    """Like PretrainedConfig: attribute names mapped by a Python __getattribute__."""

    attribute_map = {"hidden": "d_model"}

    def __init__(self):
        self.d_model = 3

    def __getattribute__(self, key):
        if key != "attribute_map" and key in super().__getattribute__("attribute_map"):
            key = super().__getattribute__("attribute_map")[key]
        return super().__getattribute__(key)


class Lazy:
    """Attributes made by a Python __getattr__."""

    def __init__(self):
        self.table = {"width": 2}

    def __getattr__(self, name):
        return self.table[name]


def test_getattribute_and_getattr_reads_are_guarded():
    def build():
        cfg, lazy = Aliased(), Lazy()
        return (lambda x: x * cfg.hidden + lazy.width), {"cfg": cfg, "lazy": lazy}

    def set_d_model(s):
        s["cfg"].d_model = 5

    def set_width(s):
        s["lazy"].table["width"] = 7

    check_compiled(build, standard(_x) + [after(set_d_model), again(), after(set_width), again()])


class AliasedWrites(Aliased):
    def __init__(self):
        super().__init__()
        self.redirect = True

    def __setattr__(self, key, value):
        if key in super().__getattribute__("attribute_map") and self.redirect:
            key = super().__getattribute__("attribute_map")[key]
        super().__setattr__(key, value)


def test_setattr_through_a_python_method_is_replayed():
    def build():
        cfg = AliasedWrites()

        def forward(x):
            cfg.hidden = 4           # writes d_model through the Python __setattr__
            return x * 2

        return forward, {"cfg": cfg}

    def reset(s):
        s["cfg"].d_model = 1

    def stop_redirecting(s):
        s["cfg"].redirect = False   # read only inside __setattr__: the write now goes elsewhere

    check_compiled(build, standard(_x) + [after(reset, expect=MOCK), after(stop_redirecting), again()])


class Vec:
    def __init__(self, k):
        self.k = k

    def __rmul__(self, t):
        return t * self.k

    def __bool__(self):
        return self.k > 0

    def __eq__(self, other):
        return isinstance(other, Vec) and other.k == self.k

    __hash__ = None


def test_reflected_truth_and_equality_methods_of_outside_objects():
    def build():
        v, w = Vec(2.0), Vec(2.0)

        def forward(x):
            y = x * v if v else x
            return y + 1 if v == w else y - 1

        return forward, {"v": v, "w": w}

    def change_w(s):
        s["w"].k = 3.0

    def negate_v(s):
        s["v"].k = -1.0

    check_compiled(build, standard(_x) + [after(change_w), again(), after(negate_v), again()])


# ----------------------------------------------------------------------------- grad / inference mode
class RotaryLike(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)

    @torch.no_grad()
    def freqs(self, x):
        return x.sin()

    def forward(self, x):
        with torch.no_grad():
            a = x * 2
        with torch.set_grad_enabled(False):
            b = x + 1
        with torch.enable_grad():
            c = self.lin(x)
        return c + self.freqs(x) + a + b


@pytest.mark.parametrize("ctx", [None, torch.no_grad], ids=["grad", "no_grad"])
def test_grad_mode_switches_are_graph_state(ctx):
    args = lambda s: (torch.randn(3, 4, requires_grad=True),)   # noqa: E731
    trace = check_compiled(lambda: (RotaryLike(), None), standard(args, ctx=ctx))
    assert magpy.stats(trace.compiled).graph_count == 1


def _inference_tail(x):
    with torch.inference_mode():
        y = x * 2
    return y


def test_inference_mode_inside_the_call_makes_inference_tensors():
    compiled = magpy.compile(_inference_tail, backend="eager", fullgraph=True)
    x = torch.randn(3)
    for _ in range(3):
        got, expected = compiled(x), _inference_tail(x)
        assert torch.equal(got, expected) and got.is_inference() and expected.is_inference()
        assert not torch.is_inference_mode_enabled()
    stats = magpy.stats(compiled)
    assert (stats.monitor_runs, stats.mock_runs, stats.graph_count) == (1, 2, 1)


class _Autocast(torch.nn.Module):
    """Mixed precision entered inside the call: the linear layers run in bfloat16 there."""

    def __init__(self):
        super().__init__()
        self.a, self.b = torch.nn.Linear(8, 8), torch.nn.Linear(8, 4)

    def forward(self, x):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            h = torch.relu(self.a(x))
            with torch.autocast("cpu", enabled=False):
                h = h.float() * 2
            y = self.b(h)
        return y.float() + 1, y.dtype


@pytest.mark.parametrize("backend", ["eager", "inductor"])
def test_autocast_inside_the_call_is_graph_state(backend):
    # The graph enters and leaves autocast where the program did: a mock run computes in
    # bfloat16 as eager does (it computed in float32 before: a wrong result on later calls).
    args = lambda s: (torch.randn(3, 8),)   # noqa: E731
    trace = check_compiled(lambda: (lambda m: (m, m))(_Autocast()), standard(args), backend=backend,
                           rtol=1e-2, atol=1e-2)
    assert magpy.stats(trace.compiled).graph_count == 1 and not torch.is_autocast_enabled("cpu")


def test_eager_step_inside_autocast_runs_the_call_eagerly():
    # The mock would run the step outside the graph's autocast: the call runs eagerly instead.
    def program(x):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            y = torch.mm(x, x)
            s = y.sum().tolist()   # (a float(...) would be computed by the graph: no step)
        return y * s
    trace = check_compiled(lambda: (program, None), [first(lambda s: (torch.randn(4, 4),)),
                                                     again(expect=EAGER)], fullgraph=False)
    assert "an eager step inside torch.autocast() entered in the graph" in trace.stats["break_reasons"][0]


# ----------------------------------------------------------------------------- copying
class CacheConfig:
    def __init__(self):
        self.layers = 2
        self.names = ["k", "v"]


def _deepcopy_build():
    cfg = CacheConfig()

    def forward(x):
        c = copy.deepcopy(cfg)          # as Whisper's decoder does with its config
        c.layers = c.layers + 1
        return x * c.layers * len(copy.copy(c.names))

    return forward, {"cfg": cfg}


def test_deepcopy_of_a_config_guards_everything_it_copied():
    def grow_list(s):
        s["cfg"].names.append("q")

    def add_attribute(s):
        s["cfg"].extra = 1

    def set_layers(s):
        s["cfg"].layers = 7

    check_compiled(_deepcopy_build, standard(_x) + [
        after(grow_list), again(), after(add_attribute), again(), after(set_layers), again()])


# ----------------------------------------------------------------------------- numpy, torch.ops, lru_cache
def _numpy_plan(x, blocks):
    plan = np.array([blocks, 2 * blocks]) // 2          # Python-side planning, as BigBird does
    idx = torch.tensor(np.zeros((2, int(np.sum(plan))), dtype=np.int64))
    return x[:, : plan[1]] + idx.sum(), idx


def test_numpy_on_python_values_is_folded_into_the_graph():
    trace = check_compiled(lambda: (_numpy_plan, None), standard(lambda s: (torch.randn(3, 4), 2)) + [
        first(lambda s: (torch.randn(3, 4), 1), name="another block count"),
    ])
    compiled = trace.compiled
    _, idx = compiled(torch.randn(3, 4), 2)
    idx.add_(5)                                        # the program owns the tensor it got back
    assert compiled(torch.randn(3, 4), 2)[1].sum() == 0
    assert magpy.stats(compiled).graph_count == 2


def test_numpy_array_from_outside_is_not_baked_in():
    def build():
        table = np.arange(4.0)
        return (lambda x: x + torch.tensor(table)), {"table": table}

    def write(s):
        s["table"][0] = 100.0

    check_compiled(build, [first(lambda s: (torch.randn(4),)), again(expect=EAGER),
                           after(write, expect=EAGER)], fullgraph=False)


@torch.library.custom_op("magpy_tests::double", mutates_args=())
def _double(x: torch.Tensor) -> torch.Tensor:
    return x * 2


@_double.register_fake
def _(x):
    return torch.empty_like(x)


@functools.lru_cache(maxsize=None)
def _heads(width):
    return width // 2


def test_custom_op_and_lru_cache_helper_are_one_graph():
    def forward(x):
        return torch.ops.magpy_tests.double(x).reshape(_heads(4) * 3, -1)

    check_compiled(lambda: (forward, None), standard(_x), expect_graphs=1)


def test_custom_op_with_inductor():
    def forward(x):
        return torch.ops.magpy_tests.double(x) + 1

    check_compiled(lambda: (forward, None), standard(_x), backend="inductor", expect_graphs=1)
