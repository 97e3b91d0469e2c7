"""Where the benchmarks run: ``--device`` and a clock that waits for the device.

CUDA runs asynchronously: a call returns once its kernels are queued, so a host clock read
right after it measures the launches, not the work.  :func:`now` is ``time.perf_counter`` read
after ``torch.cuda.synchronize()`` whenever CUDA is in use in this process (nothing else to wait
for otherwise), so ``t0 = now(); fn(); now() - t0`` times the work on any device, the host's
dispatch included (what matters at batch 1).  Every benchmark times its calls with it.
"""
from __future__ import annotations

import argparse
import time

import torch

__all__ = ["add_argument", "now", "to_device", "describe"]


def now() -> float:
    """``time.perf_counter()`` once the queued CUDA work (if any) is done."""
    if torch.cuda.is_initialized():
        torch.cuda.synchronize()
    return time.perf_counter()


def add_argument(parser: argparse.ArgumentParser, default: str = "cpu") -> None:
    """``--device cpu|cuda|cuda:N``: where the models, their inputs and the timing run."""
    parser.add_argument("--device", default=default, type=_device,
                        help=f"where models and inputs live (default {default}); cuda times with "
                             "torch.cuda.synchronize() around every timed call")


def _device(text: str) -> str:
    dev = torch.device(text)   # raises on a malformed name
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise argparse.ArgumentTypeError("CUDA is not available in this torch build / machine")
    return str(dev)


def to_device(obj, device):
    """``obj`` with every tensor (in tuples, lists, dicts, to any depth) moved to ``device``."""
    if isinstance(obj, torch.Tensor):
        return obj.to(device)
    if isinstance(obj, (list, tuple)) and not hasattr(obj, "_fields"):
        return type(obj)(to_device(x, device) for x in obj)
    if isinstance(obj, dict):
        return {k: to_device(v, device) for k, v in obj.items()}
    return obj


def describe(device) -> str:
    """The device in words: ``cpu`` or the GPU's name."""
    dev = torch.device(device)
    if dev.type == "cuda":
        return f"{dev} ({torch.cuda.get_device_name(dev)}, CUDA {torch.version.cuda})"
    return str(dev)
