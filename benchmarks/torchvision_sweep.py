"""Does magpy compile every torchvision model that runs on pure PyTorch? (issue 42, item 4)

    python -m benchmarks.torchvision_sweep [--models resnet18,vit_b_16] [--family video] [--timeout 180]
                                           [--max-params 100e6] [--json PATH] [--no-torch-compile] [--list]

torchvision's models are the classic CNNs, ViTs and video and optical-flow networks people
compile first; their code has what transformers and diffusers do not: ``torch._assert`` on
shapes (ViT, Swin), ``torch.jit.is_scripting()`` and ``torch.jit.annotate`` branches, named
tuples of outputs (GoogLeNet, Inception), ``OrderedDict`` feature maps through
``IntermediateLayerGetter`` (segmentation), ``FloatFunctional`` adds (quantizable models in float),
and RAFT's 12 recurrent refinement steps with a correlation pyramid and ``grid_sample``.

Every builder of ``torchvision.models.list_models()`` is built with ``weights=None`` (and
``weights_backbone=None`` for segmentation, ``quantize=False`` for the quantizable ones, which
then run in float), under ``torch.manual_seed(0)``, in eval mode, and checked by
``benchmarks.library_sweep.run_case`` (``fullgraph=True`` against ``torch.compile(fullgraph=
True)`` with a graph-counting backend; 3 identical calls and one with batch 2, bit-exact with
eager, backend "eager", ``torch.no_grad()``).  Inputs: images 64x64 (96x96 for Inception,
whose stem needs 75; 224x224 for MaxViT, whose window partitions need it; ViTs are built with
``image_size=64``), video clips of 4 frames at 64x64 (16 frames at 224x224 for S3D and MViT,
which fix them), RAFT two 128x128 frames; batch 1, and batch 2 for the new-shape call.

Left out: the detection models (Faster/Mask/Keypoint R-CNN, RetinaNet, FCOS, SSD, SSDlite) run
``torchvision::nms`` and ``roi_align``, C++ operators the CPU-incompatible wheel does not load
(:func:`benchmarks.library_sweep.import_torchvision`); models over ``--max-params`` (150M by
default: ViT-L/16, ViT-L/32, ViT-H/14, RegNetY-128GF, ConvNeXt-Large) are skipped as "big":
on this 2-core machine (23 GB, shared) their build and a dozen calls take minutes each.
"""

from __future__ import annotations

import sys
from pathlib import Path

if __package__ in (None, ""):  # run as `python benchmarks/torchvision_sweep.py`
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402

from benchmarks import library_sweep as ls  # noqa: E402
from benchmarks.library_sweep import Case, import_torchvision  # noqa: E402,F401

MAX_PARAMS = 150e6
IMAGE = 64
SIZES = {"inception_v3": 96, "quantized_inception_v3": 96, "maxvit_t": 224}
VIDEO_FRAMES, VIDEO_SIZE = 4, 64
VIDEO_FIXED = {"s3d": (16, 224), "mvit_v1_b": (16, 224), "mvit_v2_s": (16, 224)}
FLOW_SIZE = 128  # RAFT: the correlation pyramid halves the 1/8-scale feature maps 3 times
FAMILIES = ("classification", "quantization", "segmentation", "video", "optical_flow", "detection")

# Timed with Inductor (the timing column).
TIMED = (
    "resnet18",
    "mobilenet_v3_small",
    "efficientnet_b0",
    "convnext_tiny",
    "vit_b_16",
    "swin_t",
    "shufflenet_v2_x1_0",
)


def family(name: str) -> str:
    tv = import_torchvision()
    for fam in FAMILIES[1:]:
        if name in tv.models.list_models(module=getattr(tv.models, fam)):
            return fam
    return "classification"


def num_params(name: str) -> int | None:
    """The parameter count torchvision's weights metadata gives (no build needed)."""
    tv = import_torchvision()
    try:
        weights = list(tv.models.get_model_weights(name))
        return weights[0].meta.get("num_params") if weights else None
    except Exception:
        return None


def builder_kwargs(name: str, fam: str) -> dict:
    kw: dict = {"weights": None}
    if fam == "segmentation":
        kw["weights_backbone"] = None
    if fam == "quantization":
        kw["quantize"] = False
    if name.startswith("vit_"):
        kw["image_size"] = 56 if name == "vit_h_14" else IMAGE
    return kw


def make_inputs(name: str, fam: str):
    """``inputs(batch) -> (args, kwargs)`` for a model of ``fam``."""

    def image(b, size):
        return torch.randn(b, 3, size, size, generator=torch.Generator().manual_seed(0))

    if fam == "video":
        frames, size = VIDEO_FIXED.get(name, (VIDEO_FRAMES, VIDEO_SIZE))
        return lambda b: (
            (torch.randn(b, 3, frames, size, size, generator=torch.Generator().manual_seed(0)),),
            {},
        )
    if fam == "optical_flow":
        return lambda b: ((image(b, FLOW_SIZE), image(b, FLOW_SIZE).flip(-1)), {})
    size = SIZES.get(name, IMAGE)
    return lambda b: ((image(b, size),), {})


def make_case(name: str, max_params: float = MAX_PARAMS) -> Case:
    tv = import_torchvision()
    fam = family(name)
    kw = builder_kwargs(name, fam)
    inputs = make_inputs(name, fam)
    skip = None
    n = num_params(name)
    if fam == "detection":
        skip = (
            "needs torchvision's C++ operators (nms, roi_align), which this torchvision build does not load"
        )
    elif n and n > max_params:
        skip = f"big: {n / 1e6:.0f}M parameters > {max_params / 1e6:.0f}M (--max-params)"
    return Case(
        name, lambda: tv.models.get_model(name, **kw), lambda: inputs(1), lambda: inputs(2), fam, skip=skip
    )


def cases(max_params: float = MAX_PARAMS, families=None) -> list[Case]:
    tv = import_torchvision()
    out = [make_case(n, max_params) for n in tv.models.list_models()]
    order = {f: i for i, f in enumerate(FAMILIES)}
    out.sort(key=lambda c: order[c.family])
    return [c for c in out if not families or c.family in families]


# ---------------------------------------------------------------------------------------------
# main


def main(argv=None) -> int:
    parser = ls.arguments(__doc__.splitlines()[0], "builder names")
    parser.add_argument("--family", help=f"comma-separated families of {FAMILIES}")
    parser.add_argument("--max-params", type=float, default=MAX_PARAMS,
                        help="skip bigger models (default %(default)g)")
    opts = parser.parse_args(argv)
    try:
        tv = import_torchvision()
    except ImportError as exc:
        print(f"torchvision sweep not run: {exc}")
        return 1
    all_cases = cases(opts.max_params, opts.family.split(",") if opts.family else None)
    if opts.list:
        print("\n".join(f"{c.name:34s} {c.family:14s} {c.skip or ''}" for c in all_cases))
        return 0
    start = ls.begin(opts, tv)
    ls.run(opts, all_cases, TIMED)
    ls.end(start)
    return 0


if __name__ == "__main__":
    sys.exit(main())
