"""Counted loops driven from the host: a ``for`` loop's ``while_loop`` that reads no condition back.

magpy records ``for t in range(n)`` and ``for xt in x`` as a ``torch.while_loop`` counting its
steps (``magpy.graphs.controlflow``; the operands' layout is an ``higher_order.CountedLoop``).  Run as the
operator runs (Inductor's code, or the eager twin), every step tests ``count < n`` on the
tensors' device and reads the answer back to the host.  On a GPU that read waits for every
kernel queued before it: the launch queue drains once per step, and an LSTM language model ran
3x slower than eager on an H100.  Yet the trip count is known on the host before the loop
starts (``n``, or ``x.size(0)``).

:func:`lower` replaces each such operator, in a graph whose outputs need no autograd, by one
call of the custom operator ``magpy::counted_loop`` (its steps as a host integer, its operands
as lists), so backends compile the rest of the graph around it.  The operator runs a
:class:`HostLoop`: the body, ``steps`` times, from Python, nothing read back.  On CUDA it goes
further (the second call on): one step is captured as a CUDA graph reading and writing static
buffers (the step count on the device, the walked tensors and the per-step rows with room for
``capacity`` steps), so each step is one graph launch instead of the body's kernels one by one.
What a capture needs, checked each call (else the loop runs plainly, as it also does inside
another capture): the same lifted numbers, the other tensors at the addresses the capture read
(parameters; a moved one captures again, at most ``MAX_CAPTURES`` times), carried tensors of
the capture's shapes, and no random draw in the body (checked on the first call).

Lowered only for devices in :data:`DEVICES` (``cuda``): on a CPU, Inductor compiles the body
into the loop it generates, which a host loop of the eager body would lose.  Tests add ``cpu``.
"""
from __future__ import annotations

import threading
import weakref
from typing import Callable

import torch
from torch import fx

from magpy.backends.eager_twins import eager_twin, rows_in_place
from magpy.backends.gpu import cuda_graphs
from magpy.graphs.higher_order import COUNTED, CountedLoop
from magpy.graphs.opgraph import GRAD_OUTPUTS
from magpy.training import backward

__all__ = ["DEVICES", "HostLoop", "lower"]

DEVICES = frozenset({"cuda"})

# key -> the HostLoop a lowered graph's ``counted_loop`` calls run; the lowered graph (and what
# a backend compiled from it, :class:`Holding`) keeps its loops alive.
_LOOPS: weakref.WeakValueDictionary = weakref.WeakValueDictionary()
_KEYS = iter(range(1 << 62))


@torch.library.custom_op("magpy::counted_loop", mutates_args=())
def counted_loop(key: int, steps: int, carried: list[torch.Tensor], additional: list[torch.Tensor],
                 numbers: list[int]) -> list[torch.Tensor]:
    """The ``while_loop`` counting ``steps`` steps that :func:`lower` replaced: the loop's
    outputs (``carried`` as the last step left them)."""
    return _LOOPS[key](steps, carried, additional, numbers)


@counted_loop.register_fake
def _(key, steps, carried, additional, numbers):
    return [torch.empty_like(t) for t in carried]


class Holding:
    """A callable compiled from a lowered graph, holding the graph's loops."""

    __slots__ = ("fn", "loops")

    def __init__(self, fn: Callable, loops: list):
        self.fn, self.loops = fn, loops

    def __call__(self, *args):
        return self.fn(*args)


def lower(gm: fx.GraphModule) -> tuple[fx.GraphModule, list]:
    """``gm``, or a copy whose counted loops on :data:`DEVICES` run as :class:`HostLoop` s,
    with those loops (whoever runs the copy must hold them: :class:`Holding`)."""
    found = [(node, layout) for node in gm.graph.nodes if (layout := _layout(gm, node)) is not None]
    if not found or gm.meta.get(GRAD_OUTPUTS) or backward.has_backward(gm):
        return gm, []
    graph, copies = fx.Graph(), {}
    graph.output(graph.graph_copy(gm.graph, copies))
    loops = [_lowered(gm, graph, copies[node], layout) for node, layout in found]
    lowered = fx.GraphModule(gm, graph, class_name=type(gm).__name__)
    lowered.meta.update(gm.meta)
    return lowered, loops


def _layout(gm: fx.GraphModule, node: fx.Node) -> CountedLoop | None:
    """The layout of ``node``'s counted loop if it is one to lower."""
    if node.op != "call_function" or node.target is not torch.ops.higher_order.while_loop:
        return None
    layout = getattr(gm, node.args[0].target).meta.get(COUNTED)
    if layout is None or layout.device not in DEVICES:
        return None
    additional = node.args[3]
    numbers = additional[layout.extra:layout.extra + layout.numbers]
    last = additional[-1]
    if not all(_is_int(n) for n in numbers):
        return None
    if not layout.sliced and not (isinstance(last, fx.Node) and last.target is torch.scalar_tensor):
        return None
    return layout


def _is_int(n) -> bool:
    v = n.meta.get("example_value") if isinstance(n, fx.Node) else n
    return isinstance(v, (int, torch.SymInt)) and not isinstance(v, bool)


def _lowered(gm: fx.GraphModule, graph: fx.Graph, node: fx.Node, layout: CountedLoop) -> HostLoop:
    """Replace ``node`` (a counted ``while_loop`` of ``gm``, copied into ``graph``) by a
    ``counted_loop`` call; its :class:`HostLoop`."""
    test, body, carried, additional = node.args
    split = layout.extra + layout.numbers
    last = additional[-1]
    with graph.inserting_before(node):
        steps = graph.call_method("size", (last, 0)) if layout.sliced else last.args[0]
        operands = [*additional[:layout.extra], *additional[split:]]
        call = graph.call_function(torch.ops.magpy.counted_loop.default,
                                   (0, steps, list(carried), operands, list(additional[layout.extra:split])))
    loop = HostLoop(getattr(gm, body.target), layout)
    key = next(_KEYS)
    _LOOPS[key] = loop
    call.args = (key, *call.args[1:])
    node.replace_all_uses_with(call)
    graph.erase_node(node)
    for gone in (test, *(() if layout.sliced else (last,))):   # (what only the condition read)
        if not gone.users:
            graph.erase_node(gone)
    return loop


class HostLoop:
    """A counted loop's body run ``steps`` times from the host (see the module docstring)."""

    MAX_CAPTURES = 3
    _WARMUP, _CAPTURE, _PLAIN = range(3)   # (_CAPTURE: steps replay a capture, made on demand)

    def __init__(self, body: fx.GraphModule, layout: CountedLoop):
        self.layout = layout
        # The buffers and outs are the loop's own copies (made each call): rows written in place.
        first, buffers = _rows_at(layout)
        self.body = eager_twin(rows_in_place(body, tuple(range(first, buffers + layout.outs))))
        self.state = self._WARMUP if layout.device == "cuda" else self._PLAIN
        self.replay: _Replay | None = None
        self.first_extra: list = []   # the addresses of the extra tensors on the first call
        self.captures = 0
        self.lock = threading.Lock()

    def __call__(self, steps: int, carried: list, additional: list, numbers: list) -> list:
        if steps <= 0:
            return [t.clone() for t in carried]
        if self.state == self._PLAIN or torch.cuda.is_current_stream_capturing() \
                or not self.lock.acquire(blocking=False):   # (another thread replays: run plainly)
            return _outputs(self._plain(steps, carried, additional, numbers), carried)
        try:
            return _outputs(self._stepped(steps, carried, additional, numbers), carried)
        finally:
            self.lock.release()

    def _own(self, carried: list) -> list:
        """The values the first step takes: the loop's own buffers and outs (the operator's
        inputs stay as they are)."""
        first, buffers = _rows_at(self.layout)
        return [torch.empty_like(v) if first <= k < buffers else v.clone() if k >= buffers else v
                for k, v in enumerate(carried)]

    def _plain(self, steps: int, carried: list, additional: list, numbers: list) -> list:
        body, rest = self.body.forward, (*self._extra(additional), *numbers, *self._lasts(additional))
        values = self._own(carried)
        for _ in range(steps):
            values = body(*values, *rest)
        return list(values)

    def _extra(self, additional: list) -> list:
        return additional[:self.layout.extra]

    def _lasts(self, additional: list) -> list:
        return additional[self.layout.extra:]

    def _stepped(self, steps: int, carried: list, additional: list, numbers: list) -> list:
        if self.state == self._WARMUP:   # plain, watching for random draws
            self.first_extra = [t.data_ptr() for t in self._extra(additional)]
            rng = torch.cuda.get_rng_state()
            out = self._plain(steps, carried, additional, numbers)
            self.state = self._CAPTURE if torch.equal(torch.cuda.get_rng_state(), rng) else self._PLAIN
            return out
        replay = self.replay
        if replay is None or not replay.fits(steps, carried, additional, numbers):
            replay = self._capture(steps, carried, additional, numbers)
            if replay is None:
                return self._plain(steps, carried, additional, numbers)
        return replay(steps, carried, additional)

    def _capture(self, steps: int, carried: list, additional: list, numbers: list) -> _Replay | None:
        old = self.replay
        # Only a longer loop than the capture has room for: room for the next power of two
        # (lengths that grow capture O(log) times, not counted); else (a moved weight, other
        # numbers) at most MAX_CAPTURES.
        grown = old is not None and old.same_but_length(carried, additional, numbers)
        if not grown:
            if self.captures >= self.MAX_CAPTURES:
                self.state, self.replay = self._PLAIN, None
                return None
            self.captures += 1
        capacity = max(16, 1 << (steps - 1).bit_length())
        self.replay = None   # (frees an earlier capture's pool)
        try:
            self.replay = _Replay(self.body.forward, self.layout, capacity, carried, additional, numbers,
                                  self.first_extra)
        except Exception:  # noqa: BLE001 - not capturable (a host sync in the body, ...): run it plainly
            self.state = self._PLAIN
        return self.replay


def _outputs(values: list, carried: list) -> list:
    """The operator's outputs: new tensors (a body may give a carried tensor back as it was),
    laid out as the carried ones (as the operator's fake results say)."""
    outs = []
    for v, c in zip(values, carried):
        if v is c or v.stride() != c.stride():
            v = torch.empty_like(c).copy_(v)
        outs.append(v)
    return outs


def _meta(t: torch.Tensor) -> tuple:
    return (t.shape, t.stride(), t.dtype, t.device)


def _row_meta(t: torch.Tensor) -> tuple:
    return (t.shape[1:], t.stride()[1:], t.dtype, t.device)


class _Replay:
    """One step of a loop captured as a CUDA graph over static buffers with room for
    ``capacity`` steps: the step count, the carried tensors, the per-step buffers, the outs and
    the walked tensors (``lasts`` of a sliced loop) are the capture's own, copied in each call;
    so are the extra tensors that moved since the loop's first call (made by each call: an
    encoder's output a decoder loop reads), the others (parameters) are read in place at the
    addresses of the capture."""

    def __init__(self, body: Callable, layout: CountedLoop, capacity: int, carried: list, additional: list,
                 numbers: list, first_extra: list):
        self.layout, self.capacity = layout, capacity
        extra = additional[:layout.extra]
        self.fixed = [t.data_ptr() == p for t, p in zip(extra, first_extra)]
        self.signature = _signature(layout, carried, additional, numbers, self.fixed)
        self.extra = [t if fixed else t.clone() for t, fixed in zip(extra, self.fixed)]
        first, buffers = _rows_at(layout)
        self.statics = [_rows(v, capacity) if first <= k < buffers else v.clone()
                        for k, v in enumerate(carried)]
        lasts = additional[layout.extra:]
        self.lasts = [_rows(t, capacity) for t in lasts] if layout.sliced else [t.clone() for t in lasts]
        statics, rest = self.statics, (*self.extra, *numbers, *self.lasts)

        def step():
            for s, v in zip(statics, body(*statics, *rest)):
                if v is not s:
                    s.copy_(v)
            return ()
        self.graph, _ = cuda_graphs.captured(step, [])

    def fits(self, steps: int, carried: list, additional: list, numbers: list) -> bool:
        """Can this capture run a call of these operands?"""
        return steps <= self.capacity and self.same_but_length(carried, additional, numbers)

    def same_but_length(self, carried: list, additional: list, numbers: list) -> bool:
        return _signature(self.layout, carried, additional, numbers, self.fixed) == self.signature

    def __call__(self, steps: int, carried: list, additional: list) -> list:
        layout = self.layout
        first, buffers = _rows_at(layout)
        for k, (s, v) in enumerate(zip(self.statics, carried)):
            if not first <= k < buffers:   # (the rows of the buffers: written by the steps)
                s.copy_(v)
        for s, t, fixed in zip(self.extra, additional, self.fixed):
            if not fixed:
                s.copy_(t)
        if layout.sliced:
            for s, t in zip(self.lasts, additional[layout.extra:]):
                s[:steps].copy_(t)
        for _ in range(steps):
            self.graph.replay()
        return [s[:steps].clone() if first <= k < buffers else s.clone() for k, s in enumerate(self.statics)]


def _rows_at(layout: CountedLoop) -> tuple[int, int]:
    """Where the per-step buffers are among a counted loop's carried operands: ``[first, end)``."""
    first = 1 + layout.carried
    return first, first + layout.buffers


def _signature(layout: CountedLoop, carried: list, additional: list, numbers: list, fixed: list) -> tuple:
    """What a capture bakes in, but the loop's length: the lifted numbers, the layout of every
    tensor (of one row where it has one per step), and where the extra tensors read in place
    (``fixed``) are."""
    first, buffers = _rows_at(layout)
    extra, lasts = additional[:layout.extra], additional[layout.extra:]
    return (tuple(numbers),
            tuple(_row_meta(v) if first <= k < buffers else _meta(v) for k, v in enumerate(carried)),
            tuple((t.data_ptr() if f else None, _meta(t)) for t, f in zip(extra, fixed)),
            tuple(_row_meta(t) if layout.sliced else _meta(t) for t in lasts))


def _rows(t: torch.Tensor, capacity: int) -> torch.Tensor:
    """A tensor like ``t`` with room for ``capacity`` rows (its first dimension)."""
    return t.new_empty((capacity, *t.shape[1:]))
