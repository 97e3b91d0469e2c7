"""magpy: a JIT compiler for eager-mode PyTorch programs that finds full operator graphs by
monitoring execution states (see docs/index.md and docs/concepts.md)."""
from magpy.api.compiled import CompiledModule, compile, reset, stats, synchronize
from magpy.api.explanation import Explanation, explain
from magpy.api.persist import Saved, export, load, save
from magpy.capture import monitor
from magpy.capture.annotations import annotate, disable
from magpy.config import config
from magpy.errors import (
    BackendError,
    BackendFailedWarning,
    CacheLimitWarning,
    CaptureError,
    CaptureFailedWarning,
    GraphBreak,
    GraphBreakError,
    GraphBreakWarning,
    LoadError,
    MagpyError,
    MagpyWarning,
    NotSavedWarning,
    SaveError,
    UnstableRecordWarning,
)

__all__ = ["compile", "explain", "stats", "reset", "synchronize", "annotate", "disable", "config",
           "CompiledModule", "Explanation", "GraphBreak", "GraphBreakError", "GraphBreakWarning",
           "CaptureError",
           "BackendError", "MagpyError", "MagpyWarning", "CaptureFailedWarning", "BackendFailedWarning",
           "CacheLimitWarning", "UnstableRecordWarning", "monitor", "save", "load", "export", "Saved",
           "SaveError", "LoadError", "NotSavedWarning"]
__version__ = "0.1.0"
