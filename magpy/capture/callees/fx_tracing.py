"""torch.fx's symbolic tracing, seen from a recording.

``Tracer.trace`` patches ``nn.Module.__call__`` and ``__getattr__`` process-wide while it traces
(torch 2.13).  A recording that runs while a trace is open, in a thread of the program's
(``torch.compile`` or a foreground compile in another thread, fx's own tracing in the program;
magpy's compile worker makes no such patches: magpy.backends.fx_patches), looked the
tracer's wrappers up on the module's type, entered them, and stopped at their
``_autowrap_check`` (a native reading the tracer's patcher), so the call and every later one
ran eagerly.  The monitor looks through the wrappers to the methods they stand in for, as the
program finds them when no trace runs.
"""
import types

from torch.fx import _symbolic_trace

from magpy.capture.monitor.protocols import add_patch

# The wrappers Tracer.trace makes (nested functions: one code object each): the attribute
# each is patched in as and the method it stands in for.
_WRAPPERS = {"module_call_wrapper": ("__call__", _symbolic_trace._orig_module_call),
             "module_getattr_wrapper": ("__getattr__", _symbolic_trace._orig_module_getattr)}


def look_through_tracing() -> None:
    """Make the monitor's type lookups see ``nn.Module``'s own methods during a trace."""
    for code in _symbolic_trace.Tracer.trace.__code__.co_consts:
        if isinstance(code, types.CodeType) and code.co_name in _WRAPPERS:
            name, original = _WRAPPERS[code.co_name]
            add_patch(name, code, original)
