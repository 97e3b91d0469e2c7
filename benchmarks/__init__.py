"""magpy's benchmarks (``python -m benchmarks.<name>``; docs/benchmarks.md).

Every benchmark script imports this package before transformers, diffusers or torchvision:
torchvision's operator schemas get defined before the first of them is imported, where its
wheel does not match this torch (:mod:`benchmarks.torchvision_ops`); else importing them fails.
"""
from benchmarks.torchvision_ops import define_before_import

define_before_import()
