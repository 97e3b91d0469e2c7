"""Checks are guards, not breaks (issue 42): the idioms model libraries use to check their
inputs and configuration are constants of the record, so an identical call never records again.

A Python value computed from what a guard already fixes (``x.ndim``, a shape, a module's
attributes, a config object's items) is a constant of the record, and a check of it
(``torch._assert``, ``torch._check``) runs natively at recording and is covered by the guard;
``torch._assert_async`` on a tensor is an assertion of the graph; ``hasattr`` / ``getattr`` / ``in``
on mapping-like config objects (a ``dict`` subclass whose ``__getattr__`` reads its items, a
diffusers-style ``FrozenDict`` holding its items as attributes too) are guarded reads.

Every case runs differentially (``check_compiled``): the first call records, the identical
call and fresh inputs are mock runs, and a change the check or the config read depends on (an
input of another rank, a config item added, an attribute set) records again, with eager's
result or eager's exception.  ``fullgraph=True`` is one graph for each.
"""
import collections
import inspect
import types
import warnings
from typing import List, Optional

import pytest
import torch
from torch import nn

import magpy
from tests.harness.compile_harness import (
    EAGER,
    MOCK,
    MONITOR,
    after,
    check_compiled,
    fresh,
    fresh_magpy,  # noqa: F401 - autouse fixture: magpy.reset() before each test
    standard,
)


def _image(state):
    return (torch.randn(2, 3, 8, 8),)


def _flat(state):
    return (torch.randn(2, 3, 8),)


class _Checked(nn.Module):
    """A Conv2d + BatchNorm2d block that checks its input as torchvision's ViT and Swin do."""

    def __init__(self, check):
        super().__init__()
        self.conv, self.bn, self.check = nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), check

    def forward(self, x):
        self.check(x)
        return self.bn(self.conv(x))


def _assert(x):
    torch._assert(x.ndim == 4, f"expected 4D input (got {x.ndim}D input)")


def _check(x):
    torch._check(x.ndim == 4, lambda: f"expected 4D input (got {x.ndim}D input)")
    torch._check_is_size(x.shape[0])
    torch._check_value(x.shape[1] == 3, lambda: "3 channels")
    torch._check_type(x.is_floating_point(), lambda: "a float input")


# (compiled here: pytest rewrites the assert statements of test modules, adding object ids to
# their messages)
_ASSERTS: dict = {}
exec(compile("""
def assert_statement(x):
    assert x.dim() == 4, f"expected 4D input (got {x.dim()}D input)"
""", __file__, "exec"), _ASSERTS)


def _raise(x):
    if x.shape[1] != 3:
        raise ValueError(f"expected 3 channels, got {x.shape[1]}")
    if x.ndim != 4:
        raise ValueError(f"expected 4D input (got {x.ndim}D input)")


CHECKS = {"torch._assert": _assert, "torch._check": _check, "assert": _ASSERTS["assert_statement"],
          "raise": _raise}


@pytest.mark.parametrize("check", list(CHECKS))
def test_a_check_of_the_input_is_part_of_the_guard(check):
    # One graph, reused; a 3-D input misses the guard and raises eager's exception (a
    # recording that raises adds no record).
    def build():
        return _Checked(CHECKS[check]).eval(), None

    steps = [*standard(_image, ctx=torch.no_grad), after(lambda s: None, _flat, expect=MONITOR),
             fresh(_image, seed=5, ctx=torch.no_grad)]
    trace = check_compiled(build, steps, fullgraph=False, expect_records=1)
    assert magpy.stats(trace.compiled).breaks == {}


@pytest.mark.parametrize("check", list(CHECKS))
def test_a_check_of_the_input_is_one_graph(check):
    check_compiled(lambda: (_Checked(CHECKS[check]).eval(), None), standard(_image, ctx=torch.no_grad),
                   fullgraph=True, expect_graphs=1, expect_records=1)


def test_assert_async_is_an_assertion_of_the_graph():
    # Its tensor's value is data: an assertion in the graph, which fails on a later call's
    # data with eager's own exception (the call then runs eagerly; the record stays).
    def program(x):
        torch._assert_async((x > -10).all())
        return x * 2

    def far(state):
        return (torch.full((3,), -20.0),)

    steps = [*standard(lambda s: (torch.randn(3),)), fresh(far, expect=EAGER),
             fresh(lambda s: (torch.ones(3),))]
    trace = check_compiled(lambda: (program, None), steps, fullgraph=True, expect_records=1)
    assert "_assert_async" in str(magpy.explain(program, torch.randn(3)).graphs[0].code)
    assert trace.deltas[-1]["mock_runs"] == 1


def _scripted_paths(x):
    if torch.jit.is_scripting() or torch.jit.is_tracing():
        return x
    y = torch.jit.annotate(list[torch.Tensor], [])
    y.append(_ignored(x))
    return _unused(y[0]) if torch.jit.is_scripting() else y[0] * 2


@torch.jit.ignore
def _ignored(x):
    return x + 1


@torch.jit.unused
def _unused(x):
    return x * 3


def _typing_annotated(x):
    # timm's CrossViT: typing's aliases subscripted in forward (typing.List.__getitem__ is an
    # lru_cache'd Python function, called natively: it read a Python object, a graph break)
    outs = torch.jit.annotate(List[torch.Tensor], [])   # (typing's, imported into the module)
    outs.append(torch.jit.annotate(Optional[torch.Tensor], x * 2))
    return outs[0] + 1


@pytest.mark.parametrize("program", [_scripted_paths, _typing_annotated], ids=lambda p: p.__name__)
def test_torchscript_queries_and_markers_are_constants(program):
    check_compiled(lambda: (program, None), standard(lambda s: (torch.randn(3),)), fullgraph=True,
                   expect_graphs=1, expect_records=1)


def test_a_warning_in_forward_is_issued_on_every_call_as_eager():
    class Warns(nn.Module):
        def forward(self, x):
            if x.shape[0] > 1:
                warnings.warn("a batch of more than one", UserWarning)
            return x * 2

    def warned(fn, x):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            fn(x)
        return [str(w.message) for w in caught]

    model = Warns()
    compiled = magpy.compile(model, backend="eager", fullgraph=True)
    x = torch.randn(2, 3)
    for _ in range(3):
        assert warned(compiled, x) == warned(model, x) == ["a batch of more than one"]
    st = magpy.stats(compiled)
    assert (st.records, st.mock_runs, st.graph_count) == (1, 2, 1), st


# ----------------------------------------------------------------------------- config objects
class AttrDict(dict):
    """A config whose attributes are its items (read by a Python ``__getattr__``)."""

    def __getattr__(self, name):
        try:
            return self[name]
        except KeyError:
            raise AttributeError(name) from None


class FrozenDict(collections.OrderedDict):
    """diffusers' FrozenDict: an OrderedDict that also holds its items as instance attributes."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        for key, value in self.items():
            setattr(self, key, value)


class _Configured(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.config, self.linear = config, nn.Linear(3, 3)

    def forward(self, x):
        cfg = self.config
        scale = cfg.scale if hasattr(cfg, "scale") else 1.0
        shift = cfg["shift"] if "shift" in cfg else 0.0
        return self.linear(x) * scale * getattr(cfg, "gain", 1.0) + shift


def _add_item(key, value):
    def add(state):
        state.config[key] = value
    add.__name__ = f"set config[{key!r}]"
    return add


def _set_attribute(key, value):
    def set_(state):
        object.__setattr__(state.config, key, value)
    set_.__name__ = f"set config.{key}"
    return set_


CONFIGS = {
    "AttrDict": (lambda: AttrDict(gain=2.0), [_add_item("scale", 3.0), _add_item("shift", 0.5)]),
    "FrozenDict": (lambda: FrozenDict(gain=2.0), [_set_attribute("scale", 3.0), _add_item("shift", 0.5)]),
    "OrderedDict subclass": (lambda: type("Config", (collections.OrderedDict,), {})(gain=2.0),
                             [_set_attribute("scale", 3.0), _add_item("shift", 0.5),
                              _set_attribute("gain", 5.0)]),
}


@pytest.mark.parametrize("kind", list(CONFIGS))
def test_config_reads_are_guarded(kind):
    # hasattr False, `in` False and getattr with a default on the first config; each change
    # the reads depend on records again with eager's result; the identical call after it
    # hits that record.
    make, changes = CONFIGS[kind]

    def build():
        model = _Configured(make())
        return model, model

    def x(state):
        return (torch.randn(2, 3),)

    steps = standard(x, ctx=torch.no_grad)
    for change in changes:
        steps += [after(change, ctx=torch.no_grad), fresh(x, seed=len(steps), ctx=torch.no_grad)]
    trace = check_compiled(build, steps, fullgraph=True, observe=lambda m: dict(m.config),
                           expect_records=1 + len(changes))
    assert magpy.stats(trace.compiled).breaks == {}


def test_an_identical_call_never_records_again_on_a_checked_block():
    # The first row of issue 42: 24 identical calls, one recording.
    model = _Checked(_assert).eval()
    compiled = magpy.compile(model, backend="eager")
    x = torch.randn(1, 3, 8, 8)
    with torch.no_grad():
        outs = [compiled(x) for _ in range(24)]
        assert all(torch.equal(o, model(x)) for o in outs)
    st = magpy.stats(compiled)
    assert (st.monitor_runs, st.mock_runs, st.records) == (1, 23, 1), st
    assert MOCK and st.eager_runs == 0


# ----------------------------------------------------------------------------- mappingproxy
class _Processor:
    def __call__(self, x, scale=1.0):
        return x * scale


def _signature_keys(state):
    def program(x):
        # diffusers' attention processors: which keywords does the processor take?
        names = set(inspect.signature(state["processor"].__call__).parameters.keys())
        return x * (2.0 if "scale" in names else 3.0) + len(names)
    return program


def _proxy_from_outside(state):
    def program(x):
        return x * state["view"]["a"]
    return program


def _proxy_made_in_the_call(state):
    def program(x):
        return x * types.MappingProxyType(state["config"]).get("a")
    return program


def _set_a(state):
    state["config"]["a"] = 5.0


# kind -> (program, mutation, what the calls are: first, again, fresh, after the mutation, fresh)
PROXIES = {"signature": (_signature_keys, None, [MONITOR, MOCK, MOCK]),
           "outside view": (_proxy_from_outside, _set_a, [MONITOR] + [EAGER] * 4),
           "made in the call": (_proxy_made_in_the_call, _set_a, [MONITOR, MOCK, MOCK, MONITOR, MOCK])}


@pytest.mark.parametrize("kind", list(PROXIES))
def test_mappingproxy_reads(kind):
    # A view made in the call reads its mapping (guarded when it comes from outside); one
    # from outside is live (a class's __dict__): the record stops at its reads, which run
    # eagerly.  Its item read was unguarded: a silent wrong result after the mapping changed.
    program, mutate, kinds = PROXIES[kind]

    def build():
        config = {"a": 2.0}
        state = {"processor": _Processor(), "config": config, "view": types.MappingProxyType(config)}
        return program(state), state

    x = lambda s: (torch.randn(3),)  # noqa: E731
    steps = standard(x) + ([after(mutate), fresh(x, seed=4)] if mutate else [])
    for step, expect in zip(steps, kinds):
        step.expect = expect
    check_compiled(build, steps, fullgraph=False, observe=lambda s: s["config"])


def test_a_signature_read_is_one_graph():
    fn = _signature_keys({"processor": _Processor()})
    check_compiled(lambda: (fn, None), standard(lambda s: (torch.randn(3),)), fullgraph=True,
                   expect_graphs=1, expect_records=1)


# ----------------------------------------------------------------------------- torch's mode stack
class _Doubling(torch.overrides.TorchFunctionMode):
    def __torch_function__(self, func, types_, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        return out * 2 if func is torch.Tensor.add else out


def _asks_for_modes(x):
    # Libraries ask whether a function mode is active (and which) to pick a path: the answer
    # is eager's, not one that counts magpy's own recorder (was a silent wrong result: True).
    modes = torch.overrides._get_current_function_mode_stack()
    if torch._C._is_torch_function_mode_enabled():
        return x.add(1), len(modes), torch._C._len_torch_function_stack()
    return x * 3, len(modes), torch.overrides._get_current_function_mode()


def test_the_program_sees_torch_modes_as_eager_does():
    check_compiled(lambda: (_asks_for_modes, None), standard(lambda s: (torch.randn(3),)), fullgraph=True,
                   expect_records=1)


def test_the_program_sees_its_own_mode():
    check_compiled(lambda: (_asks_for_modes, None), standard(lambda s: (torch.randn(3),), ctx=_Doubling),
                   fullgraph=False)


# ----------------------------------------------------------------------------- found by the sweeps
def _cache_or_add(x, cache):
    # diffusers' Wan and Qwen-Image VAEs: ``if feat_cache[idx] == "Rep":`` on a tensor (its
    # __eq__ declines a str: False whatever the data, no read)
    if cache is not None and cache == "Rep":
        return x
    return x + cache


def test_a_tensor_compared_with_a_string_reads_no_data():
    steps = standard(lambda s: (torch.randn(3), torch.randn(3)))
    check_compiled(lambda: (_cache_or_add, None), steps, fullgraph=True, expect_graphs=1, expect_records=1)


class _Decoder(nn.Module):
    """``for block in reversed(self.blocks)`` (diffusers' AutoencoderDC decoder)."""

    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList([nn.Linear(4, 4), nn.Linear(4, 4)])

    def forward(self, x):
        for block in reversed(self.blocks):
            x = block(x)
        return x


def test_reversed_module_list_is_followed():
    # reversed() walks the list by its __getitem__ natively: its modules were of unknown origin
    # to the recording (a break).  A block appended from outside records again.
    def grow(model):
        model.blocks.append(nn.Linear(4, 4))

    x = lambda s: (torch.randn(2, 4),)  # noqa: E731
    steps = standard(x) + [after(grow, x, expect=MONITOR), fresh(x, seed=3)]
    check_compiled(_decoder_state, steps, fullgraph=True, expect_records=2)


def _decoder_state():
    model = _Decoder()
    return model, model
