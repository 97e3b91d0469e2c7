"""diffusers, torchvision and timm models compile to one graph, and a denoising loop does not record per step
(issue 42, item 4).

The sweeps ``benchmarks.diffusers_sweep`` and ``benchmarks.torchvision_sweep`` build every model
class of the two libraries they can from small configs with random weights and check it with
``benchmarks.library_sweep.run_case``.  These tests assert what the sweeps report, model by
model: ``fullgraph=True`` gives one graph, 3 identical calls record at most once (magpy's
invariant: an identical call never records again), and every call, including one with a new
batch size, is bit-exact with eager (backend "eager").

The default run covers a representative slice (two UNets, a ControlNet, an image and a video
VAE, three DiTs and a video transformer; a ResNet, GoogLeNet's named-tuple output, a ViT, whose
``torch._assert`` on shapes must be a guard, a MobileNetV3 segmentation model's ``OrderedDict``
feature maps, and a quantizable ResNet in float; from timm, a library magpy was not built on, a
ResNet-D and a ViT); the whole sweeps (timm's sample of 44) are the ``slow`` tests
(``python -m pytest -m slow tests/models/test_library_sweeps.py``).  Tests that need torchvision
or timm skip when it does not import (neither is a dependency of the test extras: CI installs
them apart, docs/libraries.md); they
carry no xfail marks: a failing model is a finding of the sweep, listed in docs/libraries.md.
"""

from __future__ import annotations

import pytest
import torch

from benchmarks import library_sweep as ls
from benchmarks.library_sweep import torchvision_importable

# The default run's representatives (one of each kind: a UNet with cross-attention, an
# autoencoder, a diffusion transformer); the rest under -m slow, to keep CI's time.
DIFFUSERS_DEFAULT = (
    "UNet2DConditionModel",
    "AutoencoderKL",
    "DiTTransformer2DModel",
)
TORCHVISION_DEFAULT = (  # (swin_t, mobilenet_v3_small and raft_small, 6-17 s each here, under -m slow)
    "resnet18",
    "googlenet",
    "vit_b_16",
    "lraspp_mobilenet_v3_large",
    "quantized_resnet18",
)

TIMM_DEFAULT = (  # a ResNet-D and a ViT (timm.layers' _assert on the image size); the sample under -m slow
    "resnet18d",
    "vit_tiny_patch16_224",
)

needs_torchvision = pytest.mark.skipif(
    not torchvision_importable(),
    reason="torchvision does not import (not installed: pip install --no-deps torchvision==0.28.0)",
)


@pytest.fixture(autouse=True)
def _one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def _check(case: ls.Case) -> None:
    r = ls.run_case(case, timeout=300, torch_compile=False)
    if r.verdict == "SKIP":
        pytest.skip(f"the sweep cannot run {case.name}: {r.skip_stage}: {r.reason}")
    assert r.error is None, f"magpy raised: {r.error}\n{r.traceback}"
    assert r.magpy_full_error is None and r.magpy_full_graphs == 1, (
        f"fullgraph=True: {r.magpy_full_error or f'{r.magpy_full_graphs} graphs'}"
    )
    assert r.monitor_runs_3 == 1, f"{r.monitor_runs_3} recordings for 3 identical calls: {r.recompiles}"
    assert r.deterministic, "eager is not repeatable on these inputs"
    assert r.equal == [True] * 4, f"calls (first, repeated, repeated, batch 2) equal to eager: {r.equal}"
    assert r.verdict == "ONE_GRAPH", f"{r.verdict}: {r.reason}"


# ---------------------------------------------------------------------------------------------
# diffusers


def _diffusers_cases():
    from benchmarks import diffusers_sweep

    return {c.name: c for c in diffusers_sweep.cases()}


def _diffusers_params():
    from benchmarks import diffusers_sweep

    for c in diffusers_sweep.cases():
        yield pytest.param(
            c.name, id=c.name, marks=() if c.name in DIFFUSERS_DEFAULT else (pytest.mark.slow,)
        )


@pytest.mark.parametrize("name", _diffusers_params())
def test_diffusers_model_is_one_graph_and_bit_exact(name):
    _check(_diffusers_cases()[name])


def test_diffusers_slice_covers_the_families():
    cases = _diffusers_cases()
    assert set(DIFFUSERS_DEFAULT) <= set(cases) and len(cases) >= 40
    assert {"unet", "autoencoder", "transformer", "video", "controlnet"} <= {c.family for c in cases.values()}


@pytest.mark.parametrize("compiled", ["unet", "body"])
def test_denoising_loop_records_at_most_twice(compiled):
    """DDIM over 20 steps: the scheduler's timestep, step index and alphas are data, not a record
    per step; the final latents are bit-exact with eager's."""
    from benchmarks.diffusers_sweep import denoise

    r = denoise("DDIMScheduler", compiled)
    assert r.error is None, r.error
    assert r.equal, f"final latents differ from eager's (max abs diff {r.max_abs_diff})"
    assert r.monitor_runs <= (1 if compiled == "unet" else 2), f"{r.monitor_runs} records: {r.recompiles}"
    assert not r.breaks and not r.eager_runs, r.breaks


# The steps whose call records. The UNet alone: the first. A loop body: the first step
# (``_step_index`` is None: the scheduler finds it with ``nonzero``), the second (the index is
# 1), the third (it changed: lifted; ``sigmas[self.step_index]`` then serves every step), and
# for DPM-Solver the last two, which take the solver's lower-order final branches.
RECORDED_AT = {"unet": [0], "EulerDiscreteScheduler": [0, 1, 2],
               "DPMSolverMultistepScheduler": [0, 1, 2, 18, 19]}


@pytest.mark.slow
@pytest.mark.parametrize("scheduler", ["EulerDiscreteScheduler", "DPMSolverMultistepScheduler"])
@pytest.mark.parametrize("compiled", ["unet", "body"])
def test_denoising_loop_other_schedulers(scheduler, compiled):
    from benchmarks.diffusers_sweep import denoise

    r = denoise(scheduler, compiled)
    assert r.error is None, r.error
    assert r.equal, f"final latents differ from eager's (max abs diff {r.max_abs_diff})"
    expected = RECORDED_AT["unet" if compiled == "unet" else scheduler]
    assert r.recorded_at == expected, f"{r.monitor_runs} records: {r.recompiles}"
    assert not r.breaks and not r.eager_runs, r.breaks


# ---------------------------------------------------------------------------------------------
# timm: a library magpy was not built on, sampled as benchmarks.timm_sweep samples it


def _timm_importable() -> bool:
    from benchmarks import timm_sweep

    try:
        timm_sweep.import_timm()
        return True
    except ImportError:
        return False


def _timm_params():
    if not _timm_importable():
        yield pytest.param("(timm)", id="timm-missing", marks=pytest.mark.skip(
            reason="timm does not import (pip install --no-deps timm==1.0.31)"))
        return
    from benchmarks import timm_sweep

    sample = timm_sweep.names()
    for name in TIMM_DEFAULT + tuple(n for n in sample if n not in TIMM_DEFAULT):
        yield pytest.param(name, id=name, marks=() if name in TIMM_DEFAULT else (pytest.mark.slow,))


@pytest.mark.parametrize("name", _timm_params())
def test_timm_model_is_one_graph_and_bit_exact(name):
    from benchmarks import timm_sweep

    _check(timm_sweep.make_case(name))


# ---------------------------------------------------------------------------------------------
# torchvision


def _torchvision_params():
    if not torchvision_importable():
        yield pytest.param("(torchvision)", id="torchvision-missing", marks=needs_torchvision)
        return
    from benchmarks import torchvision_sweep

    for c in torchvision_sweep.cases():
        yield pytest.param(
            c.name, id=c.name, marks=() if c.name in TORCHVISION_DEFAULT else (pytest.mark.slow,)
        )


@needs_torchvision
@pytest.mark.parametrize("name", _torchvision_params())
def test_torchvision_model_is_one_graph_and_bit_exact(name):
    from benchmarks import torchvision_sweep

    _check(torchvision_sweep.make_case(name))


@needs_torchvision
def test_torchvision_import_helper():
    """The helper imports torchvision whether or not its C++ operators load, and is idempotent."""
    tv = ls.import_torchvision()
    assert ls.import_torchvision() is tv
    assert hasattr(torch.ops.torchvision, "nms")
    from benchmarks import torchvision_sweep

    names = {c.name: c for c in torchvision_sweep.cases()}
    assert set(TORCHVISION_DEFAULT) <= set(names)
    assert names["fasterrcnn_resnet50_fpn"].skip and "nms" in names["fasterrcnn_resnet50_fpn"].skip


# ---------------------------------------------------------------------------------------------
# the shared code (cheap)


def test_outputs_are_flattened_and_compared_bit_exactly():
    a = torch.tensor([1.0, float("nan")])
    out = {"sample": a, "extra": (torch.ones(2), [torch.zeros(1)]), "note": "x"}
    assert [t.shape for t in ls.tensors(out)] == [(2,), (2,), (1,)]
    assert ls.same(
        ls.tensors(out), ls.tensors({"sample": a.clone(), "extra": (torch.ones(2), [torch.zeros(1)])})
    )
    assert not ls.same([a], [a + 1e-7]) and not ls.same([], [])


def test_verdicts_worst_first():
    r = ls.Result(
        "m", equal=[True] * 4, monitor_runs_3=1, graphs_per_call=1, eager_runs=0, magpy_full_graphs=1
    )
    assert ls.verdict(r) == ("ONE_GRAPH", "")
    assert (
        ls.verdict(ls.Result("m", equal=[True] * 4, monitor_runs_3=3, graphs_per_call=1))[0] == "GUARD_MISS"
    )
    assert (
        ls.verdict(ls.Result("m", equal=[True] * 4, monitor_runs_3=1, magpy_full_error="graph break: x"))[0]
        == "BREAK"
    )
    assert ls.verdict(ls.Result("m", equal=[True, False], monitor_runs_3=3))[0] == "WRONG"
    assert (
        ls.verdict(ls.Result("m", equal=[True, False], deterministic=False, monitor_runs_3=1))[0] == "NONDET"
    )
    assert ls.verdict(ls.Result("m", error="RuntimeError: x"))[0] == "CRASH"


def test_graph_counter_counts_dynamo_graphs():
    import torch._dynamo

    counter = ls.GraphCounter()
    torch._dynamo.reset()

    def f(x):
        x = x + 1
        torch._dynamo.graph_break()
        return x * 2

    try:
        assert torch.equal(torch.compile(f, backend=counter)(torch.ones(2)), torch.full((2,), 4.0))
    finally:
        torch._dynamo.reset()
    assert counter.graphs == 2
