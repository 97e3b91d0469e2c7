"""Does magpy compile timm's models, a library it was not built on? (issue 42: other libraries)

    python -m benchmarks.timm_sweep [--n 44] [--seed 0] [--all] [--models resnet18d,...]
                                    [--timeout 240] [--json PATH] [--no-torch-compile] [--list]

timm (PyTorch Image Models) is the vision library people reach for after torchvision; its
models have what neither torchvision nor diffusers have in this form: ``timm.layers``'
``_assert`` on input sizes in every patch embedding, ``torch.jit.is_scripting()`` branches,
``@torch.jit.ignore`` helpers, fused and re-parameterisable blocks (MobileOne, RepGhost),
relative-position tables indexed by buffers, ``F.scaled_dot_product_attention`` behind
``timm.layers.use_fused_attn()``, windows and grids (MaxViT, Swin V2), cross-covariance
attention (XCiT), rotary embeddings (EVA, ViT-RoPE).

The models are a seeded sample (``--seed``, ``--n``) of the names ``timm.list_models()`` gives
that mark a small variant (:data:`SMALL`: tiny, small, nano, mobile, b0 ...), or all of those
(``--all``, 312 in timm 1.0.31); each is built with ``pretrained=False, num_classes=10``
under ``torch.manual_seed(0)``, in eval mode, and checked by
``benchmarks.library_sweep.run_case`` as the other sweeps' models are (``fullgraph=True``
against ``torch.compile(fullgraph=True)``; 3 identical calls and one at batch 2, bit-exact
with eager; backend "eager", ``torch.no_grad()``).  Inputs: one 64x64 image, or the model's
own input size where its config fixes it or it fails at 64x64.

timm is not a dependency of magpy or of its test extras: its own requirements would pull a
torchvision and a torch of their own; install it after torchvision, without dependencies
(``pip install --no-deps timm==1.0.31``; docs/libraries.md).
"""

from __future__ import annotations

import random
import re
import sys
from pathlib import Path

if __package__ in (None, ""):  # run as `python benchmarks/timm_sweep.py`
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402

from benchmarks import library_sweep as ls  # noqa: E402

IMAGE = 64
SAMPLE, SEED = 44, 0
# Names of small variants (the sample is drawn from these: the 2-core CPU builds and calls each
# in seconds).
SMALL = re.compile(r"(atto|femto|pico|nano|tiny|small|mobile|lcnet|_b0|resnet18|resnet26|ghostnet|levit_128)")
# Timed with Inductor (the timing column).
TIMED = ("resnet18d", "efficientnet_b0", "mobilenetv4_conv_small_035", "vit_tiny_patch16_224",
         "convnext_tiny")


def import_timm():
    """``timm`` (it imports torchvision: its operators' schemas first, ``ls.import_torchvision``);
    ImportError where either is missing."""
    ls.import_torchvision()
    import timm

    return timm


def names(sample: int | None = SAMPLE, seed: int = SEED) -> list[str]:
    """The small models' names, or a seeded ``sample`` of them (all where None)."""
    small = sorted(n for n in import_timm().list_models() if SMALL.search(n))
    return small if sample is None else random.Random(seed).sample(small, min(sample, len(small)))


def make_case(name: str) -> ls.Case:
    timm = import_timm()
    size = {"hw": (IMAGE, IMAGE)}

    def build():
        model = timm.create_model(name, pretrained=False, num_classes=10).eval()
        cfg = model.pretrained_cfg or {}
        own = tuple(cfg.get("input_size", (3, 224, 224))[1:])
        size["hw"] = own if cfg.get("fixed_input_size", False) else (IMAGE, IMAGE)
        if size["hw"] != own:
            try:
                with torch.no_grad():
                    model(torch.randn(1, 3, *size["hw"]))
            except Exception:  # noqa: BLE001 - it needs its own size (a stride, a window grid)
                size["hw"] = own
        return model

    def inputs(batch: int):
        return (torch.randn(batch, 3, *size["hw"], generator=torch.Generator().manual_seed(batch)),), {}

    return ls.Case(name, build, lambda: inputs(1), lambda: inputs(2), "timm")


def main(argv=None) -> int:
    parser = ls.arguments(__doc__.splitlines()[0], "model names")
    parser.add_argument("--n", type=int, default=SAMPLE, help="how many small models to sample (%(default)s)")
    parser.add_argument("--seed", type=int, default=SEED, help="the sample's seed (%(default)s)")
    parser.add_argument("--all", action="store_true", help="every small model, not a sample")
    opts = parser.parse_args(argv)
    try:
        timm = import_timm()
    except ImportError as exc:
        print(f"timm sweep not run: {exc}")
        return 1
    named = opts.models or (",".join(TIMED) if opts.timing else None)
    chosen = named.split(",") if named else names(None if opts.all else opts.n, opts.seed)
    if opts.list:
        print("\n".join(chosen))
        return 0
    start = ls.begin(opts, timm)
    ls.run(opts, [make_case(n) for n in chosen], TIMED)
    ls.end(start)
    return 0


if __name__ == "__main__":
    sys.exit(main())
