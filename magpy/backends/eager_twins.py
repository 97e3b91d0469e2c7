"""The eager twin of a recorded graph: the same operations run one by one, as eager would.

Every compiled graph has one: it runs while the graph compiles in the background
(``magpy.backends.background``), it is what ``magpy.backends.autopilot`` times the compiled graph against,
and it replaces a graph the backend failed to compile.  For most graphs it is the fx
``GraphModule`` itself.  A graph with control flow operators is run with Python's own
``if`` and ``while`` instead: calling ``torch.ops.higher_order.cond`` / ``while_loop``
eagerly goes through the higher-order operators' Python dispatch on every call (the
BlockDrop benchmark's graph with 6 conds: 4.27 ms per call with the operators, 3.92 ms as
Python, the model itself 3.84 ms).  The Python versions below follow the operators' dense
kernels (``cond_op_dense``, ``while_loop_dense`` in ``torch._higher_order_ops``); they call
the branches' and bodies' ``forward`` directly (an fx ``GraphModule`` call goes through
``nn.Module``'s call machinery, once per loop step).

A ``while_loop`` is functional: a body that writes one row of a buffer it carries (the
outputs of a ``for`` loop, ``magpy.graphs.controlflow``) gives back a new buffer, a copy of the
whole buffer per step.  In the twin, where the buffer is the loop's own (made for it by
``torch.empty`` and used by nothing else) and the body does nothing else with it, the row
is written in place (``index_put_``): the same values, without the copies.

A checkpointed function (``tag_activation_checkpoint``, ``magpy.capture.callees.checkpoint``) is run by
``torch.utils.checkpoint`` as the program called it, which recomputes it in the backward
from the generators' state of the forward: the same random numbers (``magpy.graphs.rng``).
"""
from __future__ import annotations

from typing import Callable

import torch
from torch import fx
from torch.utils.checkpoint import checkpoint


def _cond(pred: torch.Tensor, true_fn: Callable, false_fn: Callable, operands: tuple):
    return true_fn(*operands) if pred else false_fn(*operands)


def _while_loop(cond_fn: Callable, body_fn: Callable, carried: tuple, additional: tuple) -> tuple:
    if not cond_fn(*carried, *additional):
        # (the operator's outputs are new tensors even when the body never runs)
        return tuple(v.clone() if isinstance(v, torch.Tensor) else v for v in carried)
    while True:
        carried = body_fn(*carried, *additional)
        if not cond_fn(*carried, *additional):
            return carried


def _checkpoint(body: Callable, *args, **kwargs):
    # What the program called.  The operator's own eager kernel recomputes the body in the
    # backward without putting the generators back first (preserve_rng_state=False, for
    # AOTAutograd's tracing): a dropout in it would draw another mask (magpy.graphs.rng).
    return checkpoint(body, *args, **kwargs)


# Operator -> its Python version (same arguments: the branches/body/test are submodules).
PYTHON_CONTROL_FLOW: dict = {
    torch.ops.higher_order.cond: _cond,
    torch.ops.higher_order.while_loop: _while_loop,
}
_PYTHON_VERSIONS = {**PYTHON_CONTROL_FLOW, torch.ops.higher_order.tag_activation_checkpoint: _checkpoint}
_PYTHON = frozenset(_PYTHON_VERSIONS.values())


def eager_twin(gm: fx.GraphModule) -> fx.GraphModule:
    """``gm``, or where it has control flow or checkpoint operators (at any depth), a copy of
    it that runs them as Python control flow and ``torch.utils.checkpoint``.  The copy shares
    ``gm``'s parameters and constants."""
    if not _has_python_version(gm):
        return gm
    graph = fx.Graph()
    graph.output(graph.graph_copy(gm.graph, {}))
    for node in graph.nodes:
        if node.op == "call_function" and node.target in _PYTHON_VERSIONS:
            node.target = _PYTHON_VERSIONS[node.target]
    own = _own_buffers(graph)
    attrs = {}
    for node in graph.nodes:
        if node.op == "get_attr":
            value = _attr(gm, node.target)
            if isinstance(value, fx.GraphModule):
                value = _submodule_twin(value, own.get(node, ()), node.users)
            attrs[node.target] = value
    return fx.GraphModule(attrs, graph, class_name=type(gm).__name__)


def _submodule_twin(sub: fx.GraphModule, buffers: tuple, users) -> object:
    """A branch's, loop test's or body's twin; only the Python control flow calling it: its
    ``forward``."""
    twin = eager_twin(sub)
    if buffers:
        twin = rows_in_place(twin, buffers)
    return twin.forward if all(u.target in _PYTHON for u in users) else twin


def _own_buffers(graph: fx.Graph) -> dict:
    """Body ``get_attr`` node -> the positions of the carried values that are the loop's own
    buffers (``torch.empty`` results nothing else uses)."""
    own = {}
    for node in graph.nodes:
        if node.op == "call_function" and node.target is _while_loop:
            body, carried = node.args[1], node.args[2]
            own[body] = tuple(k for k, c in enumerate(carried)
                              if isinstance(c, fx.Node) and c.op == "call_function"
                              and c.target is torch.empty and len(c.users) == 1)
    return own


def rows_in_place(body: fx.GraphModule, buffers: tuple) -> fx.GraphModule:
    """A copy of loop ``body`` writing, in place, the rows of the carried ``buffers`` (their
    positions) that it only writes with one ``index_put`` and gives back at the same place."""
    graph = fx.Graph()
    graph.output(graph.graph_copy(body.graph, {}))
    inputs = [n for n in graph.nodes if n.op == "placeholder"]
    returned = graph.output_node().args[0]
    changed = False
    for k in buffers:
        (write,) = inputs[k].users if len(inputs[k].users) == 1 else (None,)
        if (write is not None and write.op == "call_method" and write.target == "index_put"
                and write.args[0] is inputs[k] and returned[k] is write and len(write.users) == 1):
            write.target = "index_put_"
            changed = True
    return fx.GraphModule(body, graph, class_name=type(body).__name__) if changed else body


def _has_python_version(gm: fx.GraphModule) -> bool:
    return any(n.op == "call_function" and n.target in _PYTHON_VERSIONS for n in gm.graph.nodes)


def _attr(gm: fx.GraphModule, target: str):
    value = gm
    for name in target.split("."):
        value = getattr(value, name)
    return value
