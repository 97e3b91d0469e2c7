"""The schemas of torchvision's operators, for a torchvision whose C extension does not load.

The torchvision wheel that matches torch 2.13.0 (0.28.0) is a CUDA build; its C extension does
not load against the CPU torch, and ``import torchvision`` then fails on its first fake-kernel
registration with ``operator torchvision::nms does not exist``.  So does everything that
imports torchvision when it is installed: ``transformers``' and ``diffusers``' model classes.
:func:`define_torchvision_schemas` defines the schemas of the two operators torchvision
registers kernels for at import time (``nms``, ``qnms``), so that the import succeeds (their
kernels stay missing: the detection models cannot run).  It must run before anything imports
torchvision, transformers or diffusers: ``tests/conftest.py`` calls it; ``benchmarks/__init__.py``,
which every benchmark script imports before those libraries, has :func:`define_before_import`
call it right before the first import of any of them (not at once: that would import torch
before ``benchmarks.cold_start`` starts its clock).

It does nothing where torchvision is not installed, and nothing where its extension loads (a
torchvision built for this torch defines the operators itself: a second definition of the
``torchvision`` namespace would make its import fail).  magpy itself does not use torchvision.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys

_LIB = None  # the "torchvision" operator library: kept alive, or the schemas go with it
_DONE = False


def _extension_path() -> str | None:
    """The path of torchvision's C extension (``_C``), found without importing torchvision."""
    spec = importlib.util.find_spec("torchvision")
    if spec is None or not spec.submodule_search_locations:
        return None
    for folder in spec.submodule_search_locations:
        loader = (importlib.machinery.ExtensionFileLoader, importlib.machinery.EXTENSION_SUFFIXES)
        found = importlib.machinery.FileFinder(folder, loader).find_spec("_C")
        if found is not None and found.origin and os.path.exists(found.origin):
            return found.origin
    return None


def define_torchvision_schemas() -> bool:
    """Define ``torchvision::nms`` and ``torchvision::qnms`` when torchvision is installed and its
    C extension does not load (as torchvision's own ``extension._load_library`` loads it).

    Idempotent; returns whether the schemas are (now) defined by this helper."""
    global _LIB, _DONE
    if _DONE:
        return _LIB is not None
    _DONE = True
    if "torchvision" in sys.modules:  # too late to matter, or already imported fine
        return False
    try:
        if importlib.util.find_spec("torchvision") is None:
            return False
    except (ImportError, ValueError):
        return False
    import torch

    path = _extension_path()
    if path is not None:
        try:
            torch.ops.load_library(path)  # what ``import torchvision`` would load: no harm done
            return False
        except (ImportError, OSError):
            pass  # the wheel does not match this torch: torchvision's import will not load it either
    try:
        lib = torch.library.Library("torchvision", "DEF")
        lib.define("nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
        lib.define("qnms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
    except RuntimeError:  # the namespace or the operators exist already (someone else defined them)
        return False
    _LIB = lib
    return True


LIBRARIES = ("torchvision", "transformers", "diffusers", "timm")  # those that import torchvision


class _BeforeImport(importlib.abc.MetaPathFinder):
    """Calls :func:`define_torchvision_schemas` when one of :data:`LIBRARIES` is first looked
    for; finds nothing itself (the import goes on as usual).  It stays in ``sys.meta_path``,
    inert after that: removing it while the import system iterates the list would skip the
    finder after it."""

    def find_spec(self, name, path=None, target=None):
        if not _DONE and name in LIBRARIES:
            define_torchvision_schemas()
        return None


def define_before_import() -> None:
    """Run :func:`define_torchvision_schemas` right before the process first imports torchvision,
    transformers or diffusers (at once if one of them is imported already)."""
    if _DONE or any(isinstance(f, _BeforeImport) for f in sys.meta_path):
        return
    if any(name in sys.modules for name in LIBRARIES):
        define_torchvision_schemas()
        return
    sys.meta_path.insert(0, _BeforeImport())
