"""CUDA graphs: a compiled graph replayed as one captured ``torch.cuda.CUDAGraph``.

At batch 1 on a GPU the host is the bottleneck: every kernel launch costs microseconds of
Python and driver time, more than the kernel itself.  Captured once, the graph's hundreds of
launches replay as one.  ``magpy.config.cuda_graphs = True`` (off by default; applies to
graphs compiled after it is set) wraps each compiled graph that qualifies in :class:`Replay`,
as ``torch.compile(mode="reduce-overhead")`` does with its cudagraph trees.  Without it, the
autopilot (on by default) tries each compiled graph that qualifies replayed as well, beside
the compiled graph and its eager twin, and keeps the fastest (``magpy.backends.autopilot``).

What qualifies, decided once (:func:`wrap` from the graph's example inputs, the rest on the
first call, whose plain run is also CUDA's warm-up; anything else runs the compiled graph as
before, for good):

* every graph input a CUDA tensor of static shape (no lifted sizes, no Python numbers: a
  capture would bake them in) and every output a CUDA tensor;
* the graph updates no input in place (its tensors' version counters are unchanged by the
  first call: the capture writes to its own input buffers, not the program's tensors), draws
  no random numbers (the CUDA generator's state is unchanged: a replay would repeat one
  draw), and needs no autograd graph (grad mode off or no input requiring grad);
* no output is or views an input, and no two outputs share storage (outputs are copies);
* the capture succeeds (a graph that reads a value back to the host cannot be captured).

The replay (second call on): inputs whose storage did not move between the first two calls
(parameters, buffers) are read in place and only checked (``data_ptr``) on each call; the others
(the program's inputs) are copied into static buffers.  If one read in place moves, the graph is
captured again (at most :attr:`Replay.MAX_CAPTURES` times, then it runs plainly).  A call whose
inputs other than parameters (their shapes are the record guard's to hold) differ from the
capture's in shape, stride, dtype or device runs the compiled graph plainly.
Each graph captures into its own private memory pool.  Outputs are cloned out of the pool, so a
result stays valid after the next replay (cudagraph trees promise that too, by other means).
One call replays at a time (a lock; a concurrent call runs the compiled graph plainly).
"""
from __future__ import annotations

import threading
from typing import Callable

import torch
from torch._subclasses.fake_tensor import FakeTensor

__all__ = ["Replay", "captured", "wrap"]


def wrap(compiled: Callable, example_inputs: list) -> Callable:
    """``compiled`` as a :class:`Replay` where its example inputs allow one, else itself."""
    if example_inputs and all(_static_cuda_tensor(v) for v in example_inputs):
        return Replay(compiled)
    return compiled


def _static_cuda_tensor(v) -> bool:
    return (isinstance(v, torch.Tensor) and not isinstance(v, FakeTensor) and v.device.type == "cuda"
            and not any(isinstance(s, torch.SymInt) for s in v.shape))


def _meta(t: torch.Tensor) -> tuple:
    return (t.shape, t.stride(), t.dtype, t.device)


class Replay:
    """A compiled graph, captured as a CUDA graph on its second call and replayed after."""

    __slots__ = ("fn", "state", "graph", "buffers", "fixed", "checked", "outputs", "metas", "lock",
                 "container", "captures")

    _WARMUP, _CAPTURE, _REPLAY, _PLAIN = range(4)
    MAX_CAPTURES = 3   # an input captured in place that moves costs a capture; then plain calls

    def __init__(self, fn: Callable):
        self.fn = fn
        self.state = self._WARMUP
        self.graph = None
        self.buffers: list = []        # (position, static buffer) of the inputs copied in
        self.fixed: list = []          # (position, data_ptr) of the inputs captured in place
        self.outputs: list = []        # the captured outputs (in the graph's pool)
        self.metas: list = []          # every input's (shape, stride, dtype, device) at capture
        self.checked: list = []        # positions whose metadata each replay checks: all but parameters
        self.container = list          # the sequence type the compiled graph returns
        self.captures = 0
        self.lock = threading.Lock()

    def __call__(self, *args):
        state = self.state
        if state == self._REPLAY:
            return self._locked(self._replay, args)
        if state == self._PLAIN:
            return self.fn(*args)
        if state == self._WARMUP:
            return self._warm_up(args)
        return self._locked(self._capture, args)

    def _locked(self, step, args):
        if not self.lock.acquire(blocking=False):   # another thread replays: run plainly
            return self.fn(*args)
        try:
            return step(args)
        finally:
            self.lock.release()

    # -- the first call: run plainly, and see whether the graph qualifies

    def _warm_up(self, args):
        try:
            versions = [a._version for a in args]
        except Exception:  # noqa: BLE001 - inference tensors keep no version: nothing to check by
            self.state = self._PLAIN
            return self.fn(*args)
        rng = torch.cuda.get_rng_state()
        grad = torch.is_grad_enabled() and any(a.requires_grad for a in args)
        out = self.fn(*args)
        self.metas = [_meta(a) for a in args]
        self.fixed = [(i, a.data_ptr()) for i, a in enumerate(args)]   # narrowed at the capture
        mutated = any(a._version != v for a, v in zip(args, versions))
        drew = not torch.equal(torch.cuda.get_rng_state(), rng)
        qualifies = not (grad or mutated or drew) and _plain_outputs(out, args)
        self.state = self._CAPTURE if qualifies else self._PLAIN
        return out

    # -- the second call (and after an input captured in place moved): capture

    def _capture(self, args):
        if [_meta(a) for a in args] != self.metas or self.captures >= self.MAX_CAPTURES:
            self.state = self._PLAIN   # inputs that vary from call to call: nothing to capture for
            return self.fn(*args)
        self.captures += 1
        # Inputs at the same address since the first call (parameters, buffers) are read in
        # place; the others are copied into buffers of the capture's own.
        self.fixed = [(i, p) for i, p in self.fixed if args[i].data_ptr() == p]
        fixed = {i for i, _ in self.fixed}
        self.checked = [i for i, a in enumerate(args) if not isinstance(a, torch.nn.Parameter)]
        self.graph = None   # (frees the pool of an earlier capture)
        self.buffers = [(i, torch.empty_strided(a.shape, a.stride(), dtype=a.dtype, device=a.device))
                        for i, a in enumerate(args) if i not in fixed]
        inputs = list(args)
        for i, buf in self.buffers:
            inputs[i] = buf
        try:
            self._copy_in(args)
            self.graph, out = captured(self.fn, inputs)
        except Exception:  # noqa: BLE001 - not capturable (a host sync, ...): run it plainly
            self.graph, self.buffers, self.state = None, [], self._PLAIN
            return self.fn(*args)
        self.outputs, self.container = list(out), type(out)
        self.state = self._REPLAY
        self.graph.replay()   # (the capture only recorded the kernels)
        return self._outputs()

    # -- later calls: replay

    def _replay(self, args):
        for i, p in self.fixed:
            if args[i].data_ptr() != p:   # a parameter moved (or an input captured in place changed)
                return self._capture(args)
        for i in self.checked:
            if _meta(args[i]) != self.metas[i]:
                return self.fn(*args)
        self._copy_in(args)
        self.graph.replay()
        return self._outputs()

    def _copy_in(self, args) -> None:
        for i, buf in self.buffers:
            buf.copy_(args[i])

    def _outputs(self):
        return self.container(o.clone() for o in self.outputs)


def _plain_outputs(out, args) -> bool:
    """Every output a tensor on the inputs' device (CUDA: :func:`wrap` checked them), none sharing
    storage with an input or another output."""
    device = args[0].device
    if not isinstance(out, (list, tuple)) or not all(isinstance(o, torch.Tensor) and o.device == device
                                                     for o in out):
        return False
    storages = [o.untyped_storage().data_ptr() for o in out]
    inputs = {a.untyped_storage().data_ptr() for a in args}
    return len(set(storages)) == len(storages) and not inputs.intersection(storages)


def captured(fn: Callable, inputs: list):
    """``(graph, outputs)``: ``fn(*inputs)`` warmed up on a side stream (as CUDA graphs need),
    then captured into a private memory pool."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        fn(*inputs)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    # thread_local: CUDA calls of other threads (a background compile) go on during the capture
    with torch.cuda.graph(graph, capture_error_mode="thread_local"):
        out = fn(*inputs)
    return graph, out
