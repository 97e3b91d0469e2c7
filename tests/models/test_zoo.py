"""Fast checks of the model zoo (``benchmarks.models``) at ``size="test"``.

Every registry entry must build deterministically, run in eval mode without touching
its state, give bit-identical finite outputs on repeated forwards, and return the
documented output structure.  Bench-size builds are marked ``slow``.
"""
from __future__ import annotations

import pytest
import torch

from benchmarks.models import MODELS, SIZES, densenet, monodepth, quantized, resnet, tridentnet

NAMES = list(MODELS)
IMAGE_CLASSIFIERS = {"resnet50", "resnet101", "densenet121", "quantized", "tridentnet"}


def tensors(obj) -> list[torch.Tensor]:
    """All tensors in a (nested) output, in a fixed order."""
    if isinstance(obj, torch.Tensor):
        return [obj]
    if isinstance(obj, dict):  # includes transformers' ModelOutput
        return [t for k in obj.keys() for t in tensors(obj[k])]
    if isinstance(obj, (list, tuple)):
        return [t for v in obj for t in tensors(v)]
    return []


def state(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def check_structure(name: str, out, args, kwargs) -> None:
    if name in IMAGE_CLASSIFIERS:
        assert isinstance(out, torch.Tensor)
        assert out.shape == (1, 1000)
    elif name == "monodepth":
        assert isinstance(out, tuple) and len(out) == 4
        (n, _, h, w), = {tuple(a.shape) for a in args}
        for s, disp in enumerate(out):
            assert disp.shape == (n, 1, h >> s, w >> s)
            assert 0 <= disp.min() and disp.max() <= 1
    elif name in ("bert", "bert_log", "deberta_v2"):
        batch, seq = kwargs["input_ids"].shape
        hidden = out.last_hidden_state.shape[-1]
        assert out.last_hidden_state.shape == (batch, seq, hidden)
        if name in ("bert", "bert_log"):
            assert out.pooler_output.shape == (batch, hidden)
    elif name == "align":
        assert out.logits_per_image.shape == (1, 1)
        assert out.logits_per_text.shape == (1, 1)
        assert out.text_embeds.shape == out.image_embeds.shape
        assert out.text_embeds.shape[0] == 1
        # embeddings are L2-normalised
        torch.testing.assert_close(out.text_embeds.norm(dim=-1), torch.ones(1))
        torch.testing.assert_close(out.image_embeds.norm(dim=-1), torch.ones(1))
    else:  # pragma: no cover - a new registry entry needs a structure check here
        raise AssertionError("no structure check for %r" % name)


@pytest.mark.parametrize("name", NAMES)
def test_registry_entry(name):
    model, args, kwargs = MODELS[name]("test")
    assert isinstance(args, tuple) and isinstance(kwargs, dict)
    assert not any(m.training for m in model.modules()), "model must be in eval mode"

    before = state(model)
    out1 = model(*args, **kwargs)
    out2 = model(*args, **kwargs)
    after = state(model)

    # eval-mode forwards must not update buffers (BatchNorm stats, quantization ranges)
    assert before.keys() == after.keys()
    for k in before:
        assert torch.equal(before[k], after[k]), k

    t1, t2 = tensors(out1), tensors(out2)
    assert t1 and len(t1) == len(t2)
    for a, b in zip(t1, t2):
        assert torch.equal(a, b)
        if a.is_floating_point():
            assert torch.isfinite(a).all()
    check_structure(name, out1, args, kwargs)


@pytest.mark.parametrize("name", NAMES)
def test_builds_are_deterministic(name):
    m1, a1, k1 = MODELS[name]("test")
    m2, a2, k2 = MODELS[name]("test")
    for x, y in zip(tensors(list(a1) + [k1]), tensors(list(a2) + [k2])):
        assert torch.equal(x, y)
    s1, s2 = m1.state_dict(), m2.state_dict()
    assert s1.keys() == s2.keys()
    for k in s1:
        assert torch.equal(s1[k], s2[k]), k


def test_sizes_are_validated():
    with pytest.raises(ValueError):
        MODELS["resnet50"]("huge")
    assert SIZES["bert"] == ("test", "bench", "bench12")
    with pytest.raises(ValueError):
        MODELS["deberta_v2"]("bench12")


def test_reference_parameter_counts():
    # Same parameter counts as the reference (torchvision) implementations.
    count = lambda m: sum(p.numel() for p in m.parameters())
    assert count(resnet.resnet18()) == 11_689_512
    assert count(resnet.resnet50()) == 25_557_032
    assert count(densenet.densenet121()) == 7_978_856


def test_activations_stay_bounded():
    # BatchNorm calibration keeps a deep random ResNet's logits O(1).
    model, args, kwargs = MODELS["resnet101"]("test")
    with torch.no_grad():
        out = model(*args, **kwargs)
    assert out.abs().max() < 100


def test_quantized_model_quantizes():
    model, (x,), _ = MODELS["quantized"]("test")
    measures = [m for m in model.modules() if isinstance(m, quantized.QuantMeasure)]
    assert measures and all(float(m.running_max) > float(m.running_min) for m in measures)
    # weights: at most 2**num_bits levels per output channel
    conv = model.layer1[0].conv1
    qw = quantized.quantize_weight_per_channel(conv.weight.detach(), conv.num_bits_weight)
    for row in qw.flatten(1):
        assert levels(row, float(row.min()), float(row.max()), conv.num_bits_weight)
    # activations: the input quantizer maps onto at most 2**num_bits levels
    qm = model.conv1.quantize_input
    assert levels(qm(x), float(qm.running_min), float(qm.running_max), qm.num_bits)
    # 4 bits: 16 levels
    q4 = quantized.quantize(x, 4, float(x.min()), float(x.max()))
    assert levels(q4, float(x.min()), float(x.max()), 4)
    assert len(torch.unique(torch.round((q4 - x.min()) / (x.max() - x.min()) * 15))) == 16


def levels(q: torch.Tensor, lo: float, hi: float, num_bits: int) -> bool:
    """``q`` lies on the ``2**num_bits``-level grid spanning ``[lo, hi]`` (up to rounding)."""
    k = (q - lo) / ((hi - lo) / (2 ** num_bits - 1))
    return bool(((k - k.round()).abs() < 1e-2).all() and k.min() > -0.5
                and k.max() < 2 ** num_bits - 0.5)


def test_quantmeasure_updates_only_in_training():
    qm = quantized.QuantMeasure(num_bits=8)
    x = torch.linspace(-1, 3, 64).view(1, 64)
    qm.train()
    qm(x)
    assert float(qm.running_min) == pytest.approx(-0.9)
    assert float(qm.running_max) == pytest.approx(2.7)
    qm.eval()
    qm(x * 10)
    assert float(qm.running_max) == pytest.approx(2.7)


def test_trident_branches_share_weights():
    torch.manual_seed(0)
    model = tridentnet.tridentnet(width=8).eval()
    convs = [m for m in model.modules() if isinstance(m, tridentnet.TridentConv)]
    assert convs and all(c.dilations == (1, 2, 3) for c in convs)
    x = torch.randn(1, 3, 64, 64)
    with torch.no_grad():
        branches = model.forward_branches(x)
        fused = model(x)
    assert isinstance(branches, list) and len(branches) == 3
    assert not torch.equal(branches[0], branches[1])
    torch.testing.assert_close(fused, torch.stack(branches).mean(0))


def test_monodepth_needs_no_fixed_resolution():
    torch.manual_seed(0)
    model = monodepth.monodepth(width=8).eval()
    with torch.no_grad():
        out = model(torch.rand(1, 3, 64, 96))
    assert [tuple(d.shape) for d in out] == [(1, 1, 64, 96), (1, 1, 32, 48),
                                            (1, 1, 16, 24), (1, 1, 8, 12)]


@pytest.mark.slow
@pytest.mark.parametrize("name,size", [(n, s) for n in NAMES for s in SIZES[n] if s != "test"])
def test_bench_size_builds_and_runs(name, size):
    model, args, kwargs = MODELS[name](size)
    with torch.no_grad():
        out = model(*args, **kwargs)
    assert all(torch.isfinite(t).all() for t in tensors(out) if t.is_floating_point())
    check_structure(name, out, args, kwargs)
