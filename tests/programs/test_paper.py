"""The MagPy paper's example programs under ``magpy.compile(fullgraph=True)``.

Figures 2, 3 (a: builtin functions, b: OOP, c: side effect), 4 and 9 of the paper, written as
the paper shows them with small tensors.  Each must be captured as exactly one graph
(``magpy.explain(...).graph_count == 1``) and match eager -- return value and program state --
on the first call (monitor run), a repeated call (guard hit -> mock), fresh inputs of the same
shapes, and after the external values the guard depends on change.

Figures 2 and 4 are images in the paper; their code here follows the paper's text: Figure 2
reads ``x``, ``dims``, ``self.scale`` and ``self.dim`` and writes ``x`` to the outside; Figure
4(a) is ``model(x, run_act)`` with a branch on ``run_act`` that updates the global ``z``.
"""
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
    explain_copy,
    first,
    fresh,
    fresh_magpy,  # noqa: F401 - autouse fixture: magpy.reset() before each test
    globals_view,
    isolated,
    standard,
)


def assert_one_graph(build, args, kwargs=None):
    exp = explain_copy(build, args, kwargs)
    assert exp.graph_count == 1, f"expected one graph, explain says:\n{exp}"
    assert len(exp.graphs) == 1 and exp.break_reasons == []
    assert exp.op_count > 0


# ----------------------------------------------------------------------------- Figure 2

class Figure2(nn.Module):
    """Plenty of Python features; the graph depends only on x, dims, self.scale, self.dim."""

    def __init__(self, scale=0.5, dim=-1):
        super().__init__()
        self.scale = scale
        self.dim = dim

    def forward(self, x, dims):
        perm = list(dims)
        perm.extend(i for i in range(x.dim()) if i not in perm)
        x = x.permute(*perm) * self.scale
        x = torch.softmax(x, dim=self.dim)
        self.x = x            # writes x to the outside
        return x


def _fig2_build():
    model = Figure2()
    return model, model


def _fig2_args(model):
    return torch.randn(2, 3, 4), [2, 0]


def test_figure2_one_graph():
    assert_one_graph(_fig2_build, _fig2_args)


def test_figure2_matches_eager():
    def set_scale(m):
        m.scale = 2.0

    def set_dim(m):
        m.dim = 0

    check_compiled(_fig2_build, standard(_fig2_args) + [
        after(set_scale, expect=ANY),
        again(),
        after(set_dim, expect=MONITOR),
        again(),
        Step("other dims argument", lambda m: (torch.randn(2, 3, 4), [1, 2]), expect=MONITOR),
    ])


# ----------------------------------------------------------------------------- Figure 3a: builtins

def permute_rest(x):
    # 1: LoSealL/VideoSuperResolution
    perm = [2, 1]
    perm.extend(i for i in range(x.dim()) if i not in perm)
    x = x.permute(*perm)
    return x


class DownBlocks(nn.Module):
    # 2: rawmarshmellows/pytorch-unet-resnet-50-encoder
    DEPTH = 4

    def __init__(self):
        super().__init__()
        self.input_block = nn.Linear(4, 4)
        self.down_blocks = nn.ModuleList([nn.Linear(4, 4) for _ in range(3)])

    def forward(self, x):
        pre_pools = dict()
        pre_pools["layer_0"] = x
        x = self.input_block(x)
        pre_pools["layer_1"] = x
        for i, block in enumerate(self.down_blocks, 2):
            x = block(x)
            if i == (DownBlocks.DEPTH - 1):
                continue
            pre_pools[f"layer_{i}"] = x
        return x, pre_pools


def numel_scale(x):
    # 3: bayesiains/nflows
    return x * torch.Size(x.shape).numel()


def _fn_build(fn):
    return lambda: (fn, None)


FIG3A = {
    "perm_extend_generator": (_fn_build(permute_rest), lambda s: (torch.randn(2, 3, 4, 5),)),
    "enumerate_modulelist": (lambda: (lambda m: (m, m))(DownBlocks()), lambda s: (torch.randn(2, 4),)),
    "torch_size_numel": (_fn_build(numel_scale), lambda s: (torch.randn(3, 4),)),
}


@pytest.mark.parametrize("name", list(FIG3A))
def test_figure3a_builtins_one_graph(name):
    build, args = FIG3A[name]
    assert_one_graph(build, args)


@pytest.mark.parametrize("name", list(FIG3A))
def test_figure3a_builtins_match_eager(name):
    build, args = FIG3A[name]
    check_compiled(build, standard(args))


def test_figure3a_numel_new_shape_recompiles():
    # the numel is baked into the graph: another shape must not reuse it
    check_compiled(_fn_build(numel_scale), standard(lambda s: (torch.randn(3, 4),)) + [
        Step("other shape", lambda s: (torch.randn(5, 4),), expect=ANY),
    ])


# ----------------------------------------------------------------------------- Figure 3b: OOP

class EqualLeakyReLU(nn.LeakyReLU):
    # pablopp/pytorch-tools
    def __init__(self, scale):
        super().__init__()
        self.scale = scale

    def forward(self, x):
        return super().forward(x) * self.scale


def _fig3b_build():
    m = EqualLeakyReLU(3.0)
    return m, m


def test_figure3b_oop_one_graph():
    assert_one_graph(_fig3b_build, lambda m: (torch.randn(4, 5),))


def test_figure3b_oop_matches_eager():
    def set_slope(m):
        m.negative_slope = 0.5

    check_compiled(_fig3b_build, standard(lambda m: (torch.randn(4, 5),)) + [
        after(set_slope, expect=ANY),
        again(),
    ])


# ----------------------------------------------------------------------------- Figure 3c: side effect

class DebertaSoftmax(nn.Module):
    # Deberta model in huggingface/transformers
    def forward(self, inp, mask, dim):
        self.dim = dim
        output = inp.masked_fill(mask, torch.finfo(inp.dtype).min)
        output = torch.softmax(output, self.dim)
        return output


def _fig3c_build():
    m = DebertaSoftmax()
    return m, m


def _fig3c_args(dim):
    def args(m):
        inp = torch.randn(3, 4)
        mask = torch.zeros(3, 4, dtype=torch.bool)
        mask[:, 1] = True
        return inp, mask, dim
    return args


def test_figure3c_side_effect_one_graph():
    assert_one_graph(_fig3c_build, _fig3c_args(-1))


def test_figure3c_side_effect_matches_eager():
    def clobber_dim(m):
        m.dim = 123   # written before it is read: the call must restore self.dim = dim

    check_compiled(_fig3c_build, standard(_fig3c_args(-1)) + [
        after(clobber_dim, expect=ANY),
        Step("dim argument 0", _fig3c_args(0), expect=MONITOR),
        again(),
        Step("dim argument -1 again", _fig3c_args(-1), expect=MOCK),
    ])


# ----------------------------------------------------------------------------- Figure 4

def model(x, run_act):
    global z
    y = torch.matmul(x, x)
    if run_act:
        y = torch.relu(y)
    z = y + 1
    return y


def _fig4_build():
    fn, ns = isolated(model)
    return fn, ns


def _fig4_args(run_act):
    return lambda ns: (torch.randn(2, 2), run_act)


def test_figure4_one_graph():
    assert_one_graph(_fig4_build, _fig4_args(True))


@pytest.mark.parametrize("backend", ["eager", "inductor"])
def test_figure4_matches_eager(backend):
    check_compiled(_fig4_build, standard(_fig4_args(True)) + [
        Step("run_act=False", _fig4_args(False), expect=MONITOR),
        again(),
        Step("run_act=True again: first record", _fig4_args(True), seed=3, expect=MOCK),
    ], backend=backend, observe=globals_view("z"), expect_records=2)


# ----------------------------------------------------------------------------- Figure 9

def f(x, y, z):
    global a
    x[0] += y           # inplace update x[0] to x[0]+y
    x.append(x[0] * y)  # add x[0]*y to end of list x
    a = tuple(x)        # build tuple a with elements in x


def _fig9_build():
    fn, ns = isolated(f)
    return fn, {"ns": ns, "tensor": torch.rand((3, 3))}


def _fig9_args(y=2.0, z=3.0, new_tensor=False):
    def args(s):
        s["x"] = [torch.rand((3, 3)) if new_tensor else s["tensor"]]
        return s["x"], y, z
    return args


def _fig9_observe(s):
    a = s["ns"].get("a")
    return {"tensor": s["tensor"], "x": s["x"], "a": a,
            "a aliases x": a is not None and [a[i] is s["x"][i] for i in range(len(a))]}


def test_figure9_one_graph():
    assert_one_graph(_fig9_build, _fig9_args())


def test_figure9_matches_eager():
    check_compiled(_fig9_build, [
        first(_fig9_args()),
        again(_fig9_args()),                    # a new list around the same (updated) tensor
        again(_fig9_args(z=4.0), name="unused argument z changed"),   # z is never read: no guard
        fresh(_fig9_args(new_tensor=True)),
        Step("y changed", _fig9_args(y=3.0), expect=ANY),
    ], observe=_fig9_observe)
