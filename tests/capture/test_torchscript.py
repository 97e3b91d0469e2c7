"""Issue 16: ``ScriptModule``s as one graph (magpy.capture.callees.torchscript).

A scripted module's forward, called as a module, runs the Python it was scripted from under the
monitor, bound to the script module itself: its parameters, attributes, submodules and
``training`` are read from the C++ module through torch's ``__getattr__`` and guarded there.
torch.compile refuses every one of these programs ("torch.jit.script/freeze modules unsupported").
Each is checked against eager TorchScript: first call, the identical call (mock), fresh inputs,
parameters changed in place (mock: same tensors), a parameter replaced, an attribute changed and
``eval()`` (each records anew).
"""
import io
import warnings

import pytest
import torch
import torch.nn as nn

import magpy
from tests.harness.compile_harness import (
    ANY,
    EAGER,
    MOCK,
    after,
    again,
    check_compiled,
    first,
    fresh,
    fresh_magpy,  # noqa: F401 - autouse fixture: magpy.reset() before each test
    standard,
)

warnings.filterwarnings("ignore", category=DeprecationWarning, module="torch.jit")


def x34(_=None):
    return (torch.randn(3, 4),)


class Block(nn.Module):
    """A module to script: a submodule, a float attribute, a training branch, a helper."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 3)
        self.norm = nn.LayerNorm(3)
        self.scale = 2.0

    def forward(self, x):
        h = self.norm(self.lin(x))
        if self.training:
            h = h * 2
        return torch.relu(h) * self.scale


class WithHelper(nn.Module):
    """A scripted forward calling another scripted method of its module."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 3)

    def forward(self, x):
        return self.helper(self.lin(x)) + 1

    def helper(self, h):
        return h.sigmoid() * self.lin.bias


class Legacy(torch.jit.ScriptModule):
    """The pre-``torch.jit.script`` API: methods under ``@torch.jit.script_method``."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 3)

    @torch.jit.script_method
    def forward(self, x):
        return self.shift(self.lin(x).relu())

    @torch.jit.script_method
    def shift(self, h):
        return h - 1


class Host(nn.Module):
    """Python code around a scripted submodule."""

    def __init__(self, inner):
        super().__init__()
        self.inner = inner
        self.head = nn.Linear(3, 2)

    def forward(self, x):
        return self.head(self.inner(x)) * 2


def _scripted_block():
    return torch.jit.script(Block())


BUILDS = {
    "script_of_module": _scripted_block,
    "legacy_script_module": Legacy,
    "script_with_helper_method": lambda: torch.jit.script(WithHelper()),
    "scripted_submodule": lambda: Host(_scripted_block()),
    "legacy_submodule": lambda: Host(Legacy()),
}


def _own(make):
    return lambda: (lambda m: (m, m))(make())


def _lin(m):
    return m.inner.lin if isinstance(m, Host) else m.lin


def _scale_weights(m):
    with torch.no_grad():
        _lin(m).weight.mul_(-2)


def _new_weight(m):
    _lin(m).weight = nn.Parameter(torch.randn(3, 4))


def _observe(m):
    return [p.detach().clone() for p in m.parameters()]


@pytest.mark.parametrize("name", BUILDS)
def test_script_module_is_one_graph(name):
    check_compiled(_own(BUILDS[name]), standard(x34) + [
        after(_scale_weights, expect=MOCK),        # the same tensors, changed in place
        after(_new_weight, expect=ANY),            # the C++ module holds a new one, loaded anew
        again(),
    ], observe=_observe, expect_graphs=1, expect_records=1)


def _rescale(m):
    (m.inner if isinstance(m, Host) else m).scale = 3.0


def _eval(m):
    m.eval()


@pytest.mark.parametrize("name", ["script_of_module", "scripted_submodule"])
def test_script_module_attributes_and_training_are_guarded(name):
    # scale and training live in the C++ module: read through torch's __getattr__, guarded there.
    check_compiled(_own(BUILDS[name]), [first(x34), again(), after(_rescale), again(), after(_eval), again(),
                                        fresh(x34)],
                   observe=lambda m: (_observe(m), m.training), expect_graphs=3)


def test_script_module_graph_holds_its_operations():
    ex = magpy.explain(Host(_scripted_block()), torch.randn(3, 4))
    assert ex.graph_count == 1 and not ex.break_reasons
    assert "layer_norm" in str(ex) and "linear 2" in str(ex)


def test_script_module_with_inductor():
    check_compiled(_own(BUILDS["scripted_submodule"]), standard(x34), backend="inductor", observe=_observe,
                   expect_graphs=1)


def test_script_module_backward_reaches_its_parameters():
    torch.manual_seed(0)
    eager = Host(_scripted_block())
    torch.manual_seed(0)
    model = Host(_scripted_block())
    fast = magpy.compile(model, backend="eager", fullgraph=True)
    for _ in range(2):
        x = torch.randn(3, 4)
        eager(x).sum().backward()
        fast(x).sum().backward()
    assert all(torch.equal(a.grad, b.grad) for a, b in zip(eager.parameters(), model.parameters()))
    assert magpy.stats(fast).mock_runs == 1


def test_script_module_attribute_read_from_python_is_guarded():
    # sm.scale read outside any forward goes through the same __getattr__: guarded, one graph.
    def build():
        sm = _scripted_block()
        return (lambda x: x * sm.scale + 1), sm

    check_compiled(build, [first(x34), again(), after(_rescale), again()], observe=lambda sm: sm.scale,
                   expect_graphs=2)


# ---------------------------------------------------------------------------- what stays an eager step

class WithSequential(nn.Module):
    def __init__(self):
        super().__init__()
        self.seq = nn.Sequential(nn.Linear(4, 3), nn.ReLU())

    def forward(self, x):
        return self.seq(x) + 1


def _loaded():
    buffer = io.BytesIO()
    torch.jit.save(_scripted_block(), buffer)
    buffer.seek(0)
    return torch.jit.load(buffer)


@pytest.mark.parametrize("make, native", [
    # A scripted Sequential iterates its original Python container, not the C++ module's
    # submodules: its forward stays TorchScript.
    (lambda: Host(torch.jit.script(WithSequential()).seq), "Sequential.forward"),
    # torch.jit.load: no Python to run.
    (lambda: Host(_loaded()), "ScriptMethod"),
], ids=["scripted_sequential", "loaded"])
def test_script_module_without_its_python_is_an_eager_step(make, native):
    # The eager step runs the real module in every replay (its new weights included).
    steps = [first(x34), again(), fresh(x34), after(_scale_weights_anywhere, expect=MOCK)]
    trace = check_compiled(_own(make), steps, fullgraph=False, observe=_observe, expect_records=1)
    (reason,) = magpy.stats(trace.compiled).breaks
    assert "call to native" in reason and native in reason


def _scale_weights_anywhere(m):
    with torch.no_grad():
        for p in m.parameters():
            p.mul_(-2)


def test_script_module_without_its_python_with_fullgraph_names_the_break():
    fast = magpy.compile(Host(_loaded()), backend="eager", fullgraph=True)
    with pytest.raises(magpy.GraphBreakError, match="native"):
        fast(torch.randn(3, 4))


def test_a_script_method_called_directly_stays_native():
    # Only nn.Module's call machinery says which module a ScriptMethod belongs to.
    def build():
        sm = _scripted_block()
        return (lambda x: sm.forward(x) + 1), sm

    trace = check_compiled(build, [first(x34), again(expect=MOCK)], fullgraph=False, observe=_observe)
    assert magpy.stats(trace.compiled).breaks


# ---------------------------------------------------------------------------- torch.jit.is_scripting()

def _path(x):
    # TorchScript compiles this helper with the forward that calls it: True there in eager.
    return x * 2 if torch.jit.is_scripting() else x * 3


class Branchy(nn.Module):
    def forward(self, x):
        return _path(x) + self.python_side(x) + (x if torch.jit.is_scripting() else -x)

    @torch.jit.ignore
    def python_side(self, x):
        # TorchScript calls an ignored method as Python: False there in eager.
        return x * 10 if torch.jit.is_scripting() else x * 100


def _scripted_path(x: torch.Tensor) -> torch.Tensor:
    return x * 2 if torch.jit.is_scripting() else x * 3


_scripted_fn = torch.jit.script(_scripted_path)


class BothWays(nn.Module):
    """The same class scripted and as Python, and a scripted function, in one call."""

    def __init__(self):
        super().__init__()
        self.scripted = torch.jit.script(Branchy())
        self.python = Branchy()

    def forward(self, x):
        return self.scripted(x), self.python(x), _scripted_fn(x), _path(x)


def test_is_scripting_is_true_where_eager_runs_torchscript():
    check_compiled(_own(BothWays), standard(x34), observe=_observe, expect_graphs=1)


# ---------------------------------------------------------------------------- writes

class Writes(nn.Module):
    def __init__(self):
        super().__init__()
        self.seen = 0
        self.lin = nn.Linear(4, 3)

    def forward(self, x):
        self.seen = 7            # into the C++ module: the mock could not make this write
        return self.lin(x)


def _unsee(m):
    m.seen = 0


def test_a_write_to_a_script_module_runs_eagerly():
    check_compiled(_own(lambda: torch.jit.script(Writes())),
                   [first(x34), after(_unsee, expect=EAGER), after(_unsee, expect=EAGER)],
                   fullgraph=False, observe=lambda m: (_observe(m), m.seen))
