"""Random numbers as eager draws them.

A program that draws random numbers (dropout in training, ``torch.rand``, ``x.normal_()``)
gets eager's numbers on every call under the same seed, and leaves the process's
generators where eager leaves them, whatever magpy does on the call.What could draw
other numbers, and what prevents it:

=========================================================  =============================================
what magpy does                                            how the numbers stay eager's
=========================================================  =============================================
runs both arms of a tensor ``if`` (or loop iterations)     the generators are put back after the forks;
while recording (``magpy.graphs.controlflow``)                    an arm or body that draws numbers is a break
runs a record's mock, which misses or fails after a graph  the generators' state before a drawing
drew numbers, then runs the call again (``magpy.records.cache``)   record's mock is put back before the call
                                                           runs again
compiles a graph with a backend that runs it               the generators are put back after the
(``torch.jit.trace``, a user's backend)                    compile, which runs in the calling thread
removes operations whose results are unused                an operation that drew numbers is never dead
(``magpy.graphs.opgraph``)
Inductor's own random kernels (Philox: other numbers       ``fallback_random``: Inductor calls eager's
than eager's)                                              kernels for random operations
runs a checkpointed function again in the backward         from the generators' state of the forward
(``magpy.backends.eager_twins``)                                          (``torch.utils.checkpoint``)
an operation given a ``torch.Generator`` object            an eager step (a graph cannot hold it)
the autopilot's trial (compiled graph vs eager twin)       both versions draw alike (the rows above)
=========================================================  =============================================

The generators are torch's CPU generator and, where CUDA is initialised, each CUDA
device's default generator.  A compile in the background worker runs beside the program's
own draws, where they cannot be put back: a record whose run drew numbers compiles there
only with a backend that compiles on fake tensors (``backends.DRAWS_NOTHING``: Inductor),
else in the calling thread while recording.  (Inductor's ``max_autotune`` benchmarks
kernels on random inputs: keep it off, or ``magpy.config.background_compile = False``.)
"""
from __future__ import annotations

import contextlib

import torch

State = tuple   # one state tensor per generator, CPU first


def state() -> State:
    """The generators' states now (CUDA's only where CUDA is initialised: reading them would
    initialise it)."""
    cpu = torch.default_generator.get_state()
    if not torch.cuda.is_initialized():
        return (cpu,)
    return (cpu, *(g.get_state() for g in torch.cuda.default_generators))


def restore(saved: State) -> None:
    """Put the generators back to ``saved``."""
    torch.default_generator.set_state(saved[0])
    for g, s in zip(torch.cuda.default_generators, saved[1:]):
        g.set_state(s)


def changed(saved: State) -> bool:
    """Have numbers been drawn since ``saved``?"""
    now = state()
    # (Called inside the recorder's own torch-function handler too: torch.equal must not be recorded.)
    with torch._C.DisableTorchFunction():
        return len(now) != len(saved) or not all(map(torch.equal, now, saved))


def own_generator(kwargs: dict | None) -> bool:
    """Does an operation given ``kwargs`` draw from a generator object of the program's?"""
    return bool(kwargs) and isinstance(kwargs.get("generator"), torch.Generator)


@contextlib.contextmanager
def kept():
    """The generators as they were after the block: for work the program does not do."""
    saved = state()
    try:
        yield
    finally:
        restore(saved)
