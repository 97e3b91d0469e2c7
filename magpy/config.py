"""User-settable configuration (``magpy.config``)."""
from __future__ import annotations

import dataclasses


@dataclasses.dataclass
class Config:
    """Knobs that apply to every compiled callable.

    ``cache_size_limit``: records kept per compiled callable; one more guard miss makes the
    callable run eagerly from then on (with one warning), as recompiling forever costs more
    than it saves.
    ``on_capture_error``: ``"fallback"`` runs a call eagerly when magpy's own capture
    machinery fails on it (and remembers why); ``"raise"`` raises :class:`CaptureError`.
    ``on_backend_error``: the same choice when a backend fails to compile a graph.
    ``dynamic``: which tensor sizes and Python numbers become symbolic (``magpy.graphs.dynamic``),
    as ``torch.compile(dynamic=...)``: None (automatic: a dimension, int or float that a guard
    miss shows to have changed is lifted in the next record), True (every dimension of the
    tensor arguments, and the int and float arguments, from the first call; parameters and
    buffers stay static), False (never: one record per size and value).
    ``dynamic_after``: in automatic mode, the number of distinct values (sizes of one
    dimension of one input, or values of one int or float) after which it is lifted.
    ``control_flow``: record an ``if`` on tensor data as one ``torch.cond`` where both arms
    can be, a ``while`` on tensor data as one ``torch.while_loop`` where its body can be
    (``magpy.graphs.controlflow``); False makes every such jump a graph break.
    ``max_unroll``: a ``for`` loop over the first dimension of a tensor, or over ``range(n)``,
    whose length is static in the record is unrolled up to this many steps (letting the graph
    compiler fuse across steps, as torch.compile does for every loop); a longer one, or one
    whose length is symbolic (``dynamic``), becomes one ``torch.while_loop`` where its body
    can be.  (Kept small: with lengths that vary, the first record's unrolled graph serves
    one length, and compiling it unrolled cost the LSTM benchmark 4x its total time.)
    ``autopilot``: time each compiled graph against the same graph run eagerly over its first
    calls and keep the faster (``magpy.backends.autopilot``); applies to graphs compiled after it is set.
    ``background_compile``: a record's graphs run eagerly until the record is reused, then
    compile in a background thread while calls go on eagerly, and take over when compiled
    (``magpy.backends.background``; ``magpy.synchronize()`` waits for them); False compiles them
    while recording, in the calling thread.  Applies to records made after it is set.
    ``compile_timeout``: seconds a graph compile may take (None: no limit).  A background
    compile that runs longer (a backend that hangs) is given up: its record's graphs run
    eagerly from then on, with one warning, and so do those of the compiles queued behind
    it while it runs on; ``magpy.synchronize()`` and the process's exit stop waiting for it.
    A compile in the calling thread waits at most this long for a background compile to
    finish (then the call's record is not made: it runs eagerly).
    ``joint_backward``: record ``loss.backward()`` into the graph, so a whole train step is one
    graph (``magpy.training.backward``), where nothing but gradient arithmetic runs in the backward; False
    keeps it an eager step between graphs (the real autograd engine) everywhere.  Applies to
    records made after it is set.
    ``cuda_graphs``: replay each compiled graph whose inputs and outputs are all CUDA tensors of
    static shape (and that updates no input in place, draws no random numbers, needs no autograd
    graph) as one captured CUDA graph (``magpy.backends.gpu.cuda_graphs``), as
    ``torch.compile(mode="reduce-overhead")`` does: for small batches on a GPU, where launching
    kernels costs more than running them.  Off by default (the autopilot then tries each
    qualifying graph replayed and keeps it where it measures fastest); applies to graphs compiled
    after it is set; nothing changes on a CPU.
    ``verify_fast_guard``: debugging aid (magpy's tests turn it on): whenever the full guard
    passes and stamps a fast guard, check that the fast guard passes too with the same values.
    """

    cache_size_limit: int = 8
    compile_timeout: float | None = 1200.0
    on_capture_error: str = "fallback"
    on_backend_error: str = "fallback"
    verify_fast_guard: bool = False
    dynamic: bool | None = None
    dynamic_after: int = 2
    control_flow: bool = True
    max_unroll: int = 16
    autopilot: bool = True
    background_compile: bool = True
    joint_backward: bool = True
    cuda_graphs: bool = False

    def __setattr__(self, name, value):
        if name not in {f.name for f in dataclasses.fields(self)}:
            raise AttributeError(f"magpy.config has no option {name!r}")
        if name.startswith("on_") and value not in ("fallback", "raise"):
            raise ValueError(f"magpy.config.{name} must be 'fallback' or 'raise', not {value!r}")
        if name == "compile_timeout" and value is not None and (
                type(value) not in (int, float) or not value > 0):
            raise ValueError(f"magpy.config.compile_timeout must be a positive number of seconds or None, "
                             f"not {value!r}")
        if name == "dynamic" and value not in (None, True, False):
            raise ValueError(f"magpy.config.dynamic must be None (automatic), True or False, not {value!r}")
        if name == "dynamic_after" and (type(value) is not int or value < 2):
            raise ValueError(f"magpy.config.dynamic_after must be an int >= 2, not {value!r}")
        if name in _FLAGS and type(value) is not bool:
            raise ValueError(f"magpy.config.{name} must be True or False, not {value!r}")
        if name == "max_unroll" and (type(value) is not int or value < 0):
            raise ValueError(f"magpy.config.max_unroll must be an int >= 0, not {value!r}")
        if name == "cache_size_limit" and (not isinstance(value, int) or value < 1):
            raise ValueError(f"magpy.config.cache_size_limit must be a positive int, not {value!r}")
        object.__setattr__(self, name, value)


_FLAGS = ("autopilot", "background_compile", "joint_backward", "cuda_graphs")   # True or False only

config = Config()
