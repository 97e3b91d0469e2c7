"""magpy: a JIT compiler for eager-mode PyTorch programs that finds full operator graphs by
monitoring execution states (see README.md and shared DESIGN)."""
from magpy import monitor

__all__ = ["monitor"]
__version__ = "0.1.0"
