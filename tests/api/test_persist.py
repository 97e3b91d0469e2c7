"""magpy.save / magpy.load: a compiled program saved in one process runs in another.

Each test saves a compiled callable, loads the file for *another* copy of the program (the
same code, other objects: a copy of the model, a train step made again around a copy of the
model and optimizer, or a new process) and checks, against eager and against the saving
program, that calls the saved records cover run their mocks with no monitor run, give the
same results (bit-exact under backend "eager"), follow the loading process's own state, and
that calls they do not cover record as usual.  The refusals (another program, another
torch, a damaged file, nothing to save) are checked for their errors.
"""
import copy
import functools
import os
import re
import subprocess
import sys
import textwrap

import pytest
import torch
from torch import nn

import magpy
from magpy.api.persist import archive
from magpy.api.persist.refs import Referrer
from magpy.api.persist.values import Unsaveable
from tests.graphs.test_controlflow import _if_else as _branches
from tests.harness.compile_harness import fresh_magpy  # noqa: F401 - autouse fixture: magpy.reset(), magpy.config restored

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture(autouse=True)
def _foreground():
    magpy.config.background_compile = False


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU())
        self.head = nn.Linear(8, 5)

    def forward(self, x):
        h = self.body(x).mean((2, 3))
        return self.head(h).softmax(-1)


class OtherNet(Net):
    """The same structure, another class (another program)."""

    def forward(self, x):
        return self.head(self.body(x).amax((2, 3)))


def _inputs(seed, n=2):
    return torch.randn(n, 3, 8, 8, generator=torch.Generator().manual_seed(seed))


def _saved_net(tmp_path, backend="eager"):
    torch.manual_seed(0)
    net = Net().eval()
    compiled = magpy.compile(net, backend=backend)
    with torch.no_grad():
        compiled(_inputs(0))
        compiled(_inputs(0))
    path = tmp_path / "net.magpy"
    saved = magpy.save(compiled, path)
    assert saved.records == 1 and saved.left_out == (), saved
    return net, path


def _counts(compiled):
    st = magpy.stats(compiled)
    return st.monitor_runs, st.mock_runs, st.eager_runs


# ---------------------------------------------------------------------------- the records travel

def test_a_loaded_module_runs_the_saved_records_on_its_own_weights(tmp_path):
    net, path = _saved_net(tmp_path)
    twin = copy.deepcopy(net)   # other objects, the same program
    loaded = magpy.load(path, twin)
    with torch.no_grad():
        for seed in (0, 0, 1):   # first call, the same call again, fresh inputs
            assert torch.equal(loaded(_inputs(seed)), net(_inputs(seed)))
        assert _counts(loaded) == (0, 3, 0)
        # The loading process's state, not the saving one's: the weights are read, not baked in.
        twin.head.weight.add_(1.0)
        net.head.weight.add_(1.0)
        assert torch.equal(loaded(_inputs(2)), net(_inputs(2)))
        assert _counts(loaded) == (0, 4, 0)
        # A call the records do not cover records as usual: another batch size, train mode.
        assert torch.equal(loaded(_inputs(3, n=5)), net(_inputs(3, n=5)))
        twin.train()
        net.train()
        assert torch.allclose(loaded(_inputs(4)), net(_inputs(4)))
    assert _counts(loaded) == (2, 4, 0)
    assert torch.equal(twin.body[1].running_mean, net.body[1].running_mean)


def _prints_between(x):
    y = torch.relu(x) * 2
    print("between the graphs")
    return y.sum(0) + 1


def test_a_graph_break_travels(tmp_path, capsys):
    compiled = magpy.compile(_prints_between, backend="eager")
    compiled(torch.randn(3, 4))
    compiled(torch.randn(3, 4))
    magpy.save(compiled, tmp_path / "f.magpy")
    magpy.reset()
    capsys.readouterr()
    loaded = magpy.load(tmp_path / "f.magpy", _prints_between)
    x = torch.randn(3, 4)
    assert torch.equal(loaded(x), _prints_between(x))
    assert capsys.readouterr().out == "between the graphs\n" * 2
    assert _counts(loaded) == (0, 1, 0)
    assert magpy.stats(loaded).graph_count == 2


def _thrice(fn):
    @functools.wraps(fn)
    def wrapper(x):
        return fn(x) * 3
    return wrapper


@_thrice
def _decorated(x):
    return torch.tanh(x)


def _calls_decorated(x):
    return _decorated(x) + 1


_HELD = {}   # (a script's globals hold its compiled callables)


def test_a_decorated_function_is_found_by_its_import_path_not_through_magpy(tmp_path):
    compiled = _HELD["f"] = magpy.compile(_calls_decorated, backend="eager")
    compiled(torch.randn(3))
    magpy.save(compiled, tmp_path / "f.magpy")
    header, body = archive.read(tmp_path / "f.magpy")
    # (the function inside the decorator's closure, by the import path of the decorated name;
    # never a path through the compiled callable's own records, which no other process has)
    saved = str(archive.payload(body)["records"])
    assert "tests.api.test_persist" in saved and "namespace" not in saved and "records" not in saved
    magpy.reset()
    loaded = magpy.load(tmp_path / "f.magpy", _calls_decorated)
    x = torch.randn(3)
    assert torch.equal(loaded(x), _calls_decorated(x))
    assert _counts(loaded) == (0, 1, 0)


def test_references_never_go_through_magpy_s_own_objects():
    compiled = _HELD["f"] = magpy.compile(_calls_decorated, backend="eager")
    compiled(torch.randn(3))
    only_there = compiled._magpy_cache.records[0].guard.__globals__["ONLY_THERE"] = [1.5]
    with pytest.raises(Unsaveable, match="reachable neither"):
        Referrer((_calls_decorated,)).refer(only_there)   # (its globals hold _HELD, the cache, ...)


def test_objects_found_by_their_module_or_import_path():
    # (found in BERT's and ALIGN's guards: the globals of _collections_abc, which names itself
    # collections.abc, and the type of bound methods)
    import _collections_abc
    import types

    from magpy.api.persist.refs import resolve
    for obj in (vars(_collections_abc), types.MethodType, torch.nn.functional, torch.conv2d):
        ref = Referrer(()).refer(obj)
        assert ref[0] in ("globals", "import", "module") and resolve(ref, ()) is obj, ref


def test_a_cond_travels_with_both_arms(tmp_path):
    compiled = magpy.compile(_branches, backend="eager")
    compiled(torch.rand(4, 4))
    compiled(torch.rand(4, 4))
    magpy.save(compiled, tmp_path / "f.magpy")
    magpy.reset()
    loaded = magpy.load(tmp_path / "f.magpy", _branches)
    for sign in (1, -1, 1):
        x = torch.rand(4, 4) * sign
        assert torch.equal(loaded(x), _branches(x))
    assert _counts(loaded) == (0, 3, 0)


def _train_step(net, opt, sched):
    def step(x, y):
        opt.zero_grad()
        loss = nn.functional.mse_loss(net(x), y)
        loss.backward()
        opt.step()
        sched.step()
        return loss.detach()
    return step


def _trainer(state=None):
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
    opt = torch.optim.AdamW(net.parameters(), lr=0.01)
    sched = torch.optim.lr_scheduler.StepLR(opt, 2, 0.5)
    if state is not None:
        net.load_state_dict(state[0])
        opt.load_state_dict(state[1])
        sched.load_state_dict(state[2])
    return net, opt, sched


def _batch(i):
    g = torch.Generator().manual_seed(i)
    return torch.randn(4, 8, generator=g), torch.randn(4, 4, generator=g)


def test_a_train_step_resumes_bit_exact(tmp_path):
    net, opt, sched = _trainer()
    step = magpy.compile(_train_step(net, opt, sched), backend="eager")
    for i in range(4):
        step(*_batch(i))
    magpy.save(step, tmp_path / "step.magpy")
    state = copy.deepcopy((net.state_dict(), opt.state_dict(), sched.state_dict()))
    losses = [step(*_batch(i)) for i in range(4, 9)]

    twin = _trainer(state)
    for p in twin[0].parameters():   # (as the saving run left them: a step's backward made them)
        p.grad = torch.zeros_like(p)
    loaded = magpy.load(tmp_path / "step.magpy", _train_step(*twin))
    again = [loaded(*_batch(i)) for i in range(4, 9)]
    assert all(torch.equal(a, b) for a, b in zip(losses, again))
    assert all(torch.equal(a, b) for a, b in zip(net.state_dict().values(), twin[0].state_dict().values()))
    assert twin[2].get_last_lr() == sched.get_last_lr()
    assert _counts(loaded) == (0, 5, 0)


_SCRIPT = """
import sys, torch, magpy
sys.path[:0] = [{root!r}]
from tests.api.test_persist import Net, _inputs
magpy.config.background_compile = {background}
magpy.config.autopilot = False   # (every mock call runs the backend's code)
torch.manual_seed(0)
net = Net().eval()
x = _inputs(7)
with torch.no_grad():
    if sys.argv[1] == "save":
        compiled = magpy.compile(net, backend={backend!r})
        compiled(x)
        compiled(x)
        magpy.synchronize()   # (the compiled graph in place: what the saving program runs)
        torch.save(compiled(x), sys.argv[2] + ".out")
        magpy.save(compiled, sys.argv[2])
    else:
        from torch._dynamo.utils import counters
        from torch._inductor import cpp_builder
        builds = []   # (C++ compiler runs that make a library: kernels, the instruction-set probe)
        build = cpp_builder.CppBuilder.build
        def counted(self, *a, **k):
            builds.extend([1] if self.get_target_file_path().endswith(".so") else [])
            return build(self, *a, **k)
        cpp_builder.CppBuilder.build = counted
        loaded = magpy.load(sys.argv[2], net)
        first = loaded(x)
        magpy.synchronize()
        out = loaded(x)
        saved = torch.load(sys.argv[2] + ".out")
        print("monitor_runs", magpy.stats(loaded).monitor_runs, "equal", torch.equal(out, saved),
              "first close", torch.allclose(first, saved, atol=1e-6),
              "fxgraph misses", counters["inductor"]["fxgraph_cache_miss"], "C++ builds", len(builds))
"""


def _run(tmp_path, mode, backend, background, cache):
    script = tmp_path / "program.py"
    script.write_text(textwrap.dedent(_SCRIPT.format(root=ROOT, backend=backend, background=background)))
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / cache)}
    done = subprocess.run([sys.executable, str(script), mode, str(tmp_path / "net.magpy")], env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


@pytest.mark.parametrize("backend,background", [("eager", False), ("inductor", True)])
def test_another_process_with_an_empty_cache_loads_instead_of_compiling(tmp_path, backend, background):
    # A new process on a machine whose Inductor cache directory is empty: the file brings
    # Inductor's cache entries, kernels and instruction-set answers, so its compile of the
    # loaded graph is a cache hit that runs no C++ compiler, and no call runs the monitor.
    _run(tmp_path, "save", backend, background, "cache-of-the-saving-machine")
    out = _run(tmp_path, "load", backend, background, "an-empty-cache")
    assert "monitor_runs 0 equal True first close True fxgraph misses 0 C++ builds 0" in out, out


@pytest.mark.slow   # (AOTInductor compiles the package's C++ wrapper and kernels: ~30 s here)
def test_a_one_graph_call_exports_as_an_aot_inductor_package(tmp_path):
    torch.manual_seed(0)
    net = Net().eval()
    compiled = magpy.compile(net, backend="eager")
    with torch.no_grad():
        compiled(_inputs(0))
        path = magpy.export(compiled, (_inputs(0),), tmp_path / "net.pt2")
        runner = torch._inductor.aoti_load_package(path)   # (no magpy in what runs)
        for seed in (0, 1):
            assert torch.allclose(runner(_inputs(seed)), net(_inputs(seed)), atol=1e-6)


def test_export_needs_a_one_graph_record_of_the_call(tmp_path):
    compiled = magpy.compile(_prints_between, backend="eager")
    compiled(torch.randn(3, 4))
    with pytest.raises(magpy.SaveError, match="one graph .* 2 graph"):
        magpy.export(compiled, (torch.randn(3, 4),), tmp_path / "f.pt2")
    with pytest.raises(magpy.SaveError, match="covers the example call"):
        magpy.export(compiled, (torch.randn(5, 2),), tmp_path / "f.pt2")


# ---------------------------------------------------------------------------- refusals

def test_another_program_is_refused(tmp_path):
    net, path = _saved_net(tmp_path)
    with pytest.raises(magpy.LoadError, match="program: saved from .*Net.* given .*OtherNet"):
        magpy.load(path, OtherNet())


def test_another_submodule_in_the_same_place_is_refused(tmp_path):
    # The same class at the root, another layer inside: the reference to the submodule the
    # guard compares by identity finds an object of another type.
    net, path = _saved_net(tmp_path)
    twin = copy.deepcopy(net)
    twin.body[2] = nn.GELU()
    words = (r"the compiled object\._modules\['body'\]\._modules\['2'\] is not what the program was saved "
             r"with \(a torch.nn.modules.activation.ReLU; here: a torch.nn.modules.activation.GELU\)")
    with pytest.raises(magpy.LoadError, match=words):
        magpy.load(path, twin)


def test_a_function_whose_code_changed_is_refused(tmp_path):
    compiled = magpy.compile(_branches, backend="eager")
    compiled(torch.rand(4, 4))
    magpy.save(compiled, tmp_path / "f.magpy")
    with pytest.raises(magpy.LoadError, match="program"):
        magpy.load(tmp_path / "f.magpy", _prints_between)


def test_made_with_another_torch_is_refused_or_records_afresh(tmp_path, monkeypatch):
    made_with = archive.made_with
    monkeypatch.setattr(archive, "made_with", lambda *a: {**made_with(*a), "torch": "1.0.0"})
    net, path = _saved_net(tmp_path)
    monkeypatch.setattr(archive, "made_with", made_with)
    here = re.escape(torch.__version__)
    with pytest.raises(magpy.LoadError, match=f"torch: saved with '1.0.0', here '{here}"):
        magpy.load(path, net)
    with pytest.warns(magpy.NotSavedWarning, match="compiling afresh"):
        loaded = magpy.load(path, net, on_mismatch="record")
    with torch.no_grad():
        assert torch.equal(loaded(_inputs(0)), net(_inputs(0)))
    assert _counts(loaded) == (1, 0, 0)


@pytest.mark.parametrize("damage,words", [
    (lambda b: b[:-100], "changed after magpy.save wrote it, or is cut short"),
    (lambda b: b[:len(b) // 2] + bytes([b[len(b) // 2] ^ 1]) + b[len(b) // 2 + 1:], "changed after magpy"),
    (lambda b: b"PK\x03\x04" + b[4:], "not a program magpy.save wrote"),
], ids=["truncated", "one byte changed", "another kind of file"])
def test_a_damaged_file_is_refused(tmp_path, damage, words):
    net, path = _saved_net(tmp_path)
    path.write_bytes(damage(path.read_bytes()))
    for on_mismatch in ("raise", "record"):   # (damage is never a mismatch to record around)
        with pytest.raises(magpy.LoadError, match=words):
            magpy.load(path, net, on_mismatch=on_mismatch)


def test_nothing_to_save_is_an_error(tmp_path):
    with pytest.raises(magpy.SaveError, match="recorded no call yet"):
        magpy.save(magpy.compile(Net()), tmp_path / "n.magpy")
    compiled = magpy.compile(Net(), backend=lambda gm, example: gm.forward)
    with torch.no_grad():
        compiled(_inputs(0))
    with pytest.raises(magpy.SaveError, match="backend"):
        magpy.save(compiled, tmp_path / "n.magpy")
    with pytest.raises(TypeError, match="magpy.compile"):
        magpy.save(Net(), tmp_path / "n.magpy")


def test_a_record_of_symbolic_sizes_is_left_out_with_a_warning(tmp_path):
    # (under a compiling backend: its graphs compile for symbolic sizes, not yet saved)
    def f(x):
        return torch.tanh(x) * x.shape[0]
    compiled = magpy.compile(f, backend="inductor")
    for n in (2, 3, 4):   # a record of 2 rows, then one of any number of rows
        compiled(torch.randn(n, 3))
    with pytest.warns(magpy.NotSavedWarning, match="left 1 of 2 records of .*f out .* symbolic sizes"):
        saved = magpy.save(compiled, tmp_path / "f.magpy")
    assert saved.records == 1 and len(saved.left_out) == 1
    magpy.reset()
    loaded = magpy.load(tmp_path / "f.magpy", f)
    for n in (2, 5):
        x = torch.randn(n, 3)
        assert torch.allclose(loaded(x), f(x))
    assert _counts(loaded) == (1, 1, 0)   # (2 rows: the saved record; 5: recorded)
