"""Gradients of ``torch.while_loop`` in graphs AOTAutograd compiles (Inductor's path).

A counted loop under autograd (an RNN cell stepped over a sequence while training) is one
``torch.while_loop`` operator (magpy.graphs.controlflow).  Backend "eager" runs it as a Python
loop, so the autograd engine differentiates each step as eager does.  A backend compiling
through AOTAutograd differentiates the operator itself, where torch 2.13 has two faults, each
with a standalone repro in docs/training.md:

- **Carries that gain grad.**  ``while_loop``'s backward differentiates each step with respect
  to the carried tensors only where the carry *entering the loop* requires grad.  A carry
  that begins as zeros and requires grad from the first step on (``h = x.new_zeros(...)``)
  gets no gradient across steps: every parameter's gradient is the last step's alone (off by
  60-80% on an LSTM cell loop; torch's eager ``while_loop`` the same).  :func:`anchor_carries`
  makes such a carry require grad from the start: ``where(False, p, h0)`` of a parameter
  ``p`` the loop reads is ``h0`` bit for bit and adds a zero to ``p``'s gradient.
- **Donated buffers.**  Inductor lowers the operator's backward subgraphs with the backward
  graph's donated-input indices, by placeholder position: the body wrote its gradient sums in
  place into a carried buffer that the backward, seeing it dead after the loop, gave to
  another result, and one parameter got another's gradient.  :func:`functorch_patch` turns
  donated buffers off for graphs whose control flow has a backward.

Recurrent layers' fused kernels (``nn.LSTM``) have no backward under AOTAutograd at all: their
graphs run as backend "eager" runs them (:func:`eager_gradients_only`).
"""
from __future__ import annotations

import torch
import torch.fx as fx

from magpy.graphs.opgraph import GRAD_OUTPUTS
from magpy.training import backward

# Backends whose graphs give the gradients of torch.while_loop as eager does.  A graph with
# one under autograd runs as backend "eager" does on the others (records.record): still one
# record for every length.
LOOP_GRADIENTS = frozenset({"eager", "inductor"})
# Recurrent layers whose fused kernel AOTAutograd cannot differentiate ("expected all
# tensors_saved_with_vc_check to be Tensors", aot_eager; Inductor: "expected Tensor() for op
# mkldnn_rnn_layer"; torch 2.13), found by the training-loop fuzzer.
_RECURRENT = frozenset({"lstm", "gru", "rnn_tanh", "rnn_relu"})
_CONTROL_FLOW = (torch.ops.higher_order.cond, torch.ops.higher_order.while_loop)
WHILE_LOOP = torch.ops.higher_order.while_loop


def under_autograd(gm: fx.GraphModule) -> bool:
    """Does ``gm`` give tensors that need gradients, or hold a backward?"""
    return bool(gm.meta.get(GRAD_OUTPUTS)) or backward.has_backward(gm)


def eager_gradients_only(gm: fx.GraphModule, backend: str, op_names: set[str]) -> bool:
    """Must ``gm`` (whose operations are named ``op_names``), compiled by ``backend``, run as
    backend "eager" runs it: is it under autograd and holds a recurrent layer, or a
    ``while_loop`` the backend does not differentiate as eager does?"""
    if backend == "eager" or not under_autograd(gm):
        return False
    return bool(op_names & _RECURRENT) or (
        backend not in LOOP_GRADIENTS and any(n.target is WHILE_LOOP for n in gm.graph.nodes))


def functorch_patch(gm: fx.GraphModule) -> dict:
    """AOTAutograd's config patch for ``gm``: donated buffers off where a control-flow
    operator has a backward."""
    if under_autograd(gm) and any(n.target in _CONTROL_FLOW for n in gm.graph.nodes):
        return {"donated_buffer": False}
    return {}


def loops_under_autograd(gm: fx.GraphModule) -> list[fx.Node]:
    """The ``while_loop`` nodes of ``gm`` if it is under autograd (else none)."""
    return [n for n in gm.graph.nodes if n.target is WHILE_LOOP] if under_autograd(gm) else []


def anchor_carries(gm: fx.GraphModule, fakes: list, mode) -> bool:
    """Make each carry of ``gm``'s :func:`loops_under_autograd` that gains grad inside the
    loop require it on entry, anchored to a parameter the loop reads; False where one has no
    parameter to anchor to (the graph must then run as backend "eager" runs it).  ``fakes``
    are the graph's inputs as fake tensors of ``mode``."""
    values = _fake_values(gm, fakes, mode)
    changed = False
    for node in loops_under_autograd(gm):
        _, body, carried, extra = node.args
        entering = [values.get(a) for a in carried]
        extras = [values.get(a) if isinstance(a, fx.Node) else a for a in extra]
        gaining = _gaining(getattr(gm, body.target), entering, extras, mode)
        if not gaining:
            continue
        anchor = next((a for a, v in zip(extra, extras) if _anchors(v, entering[gaining[0]])), None)
        if anchor is None:
            return False
        node.args = (*node.args[:2], tuple(_anchored(gm.graph, node, a, anchor) if i in gaining else a
                                           for i, a in enumerate(carried)), extra)
        changed = True
    if changed:
        gm.recompile()
    return True


def _fake_values(gm: fx.GraphModule, fakes: list, mode) -> dict:
    """The fake value of each node of ``gm`` run on ``fakes`` (with grad on: which values
    require grad is what is asked)."""
    values = {}

    class Values(fx.Interpreter):
        def run_node(self, n):
            values[n] = out = super().run_node(n)
            return out

    with mode, torch.enable_grad():
        Values(gm).run(*fakes)
    return values


def _gaining(body: fx.GraphModule, entering: list, extras: list, mode) -> list[int]:
    """The carries that enter the loop without requiring grad and leave some step requiring
    it: the body run on fakes until which carries require grad stops changing."""
    needs = [isinstance(v, torch.Tensor) and v.requires_grad for v in entering]
    with mode, torch.enable_grad():
        while True:
            args = [v.detach().requires_grad_(r) if r else v.detach() for v, r in zip(entering, needs)]
            outs = fx.Interpreter(body).run(*args, *extras)
            after = [r or (isinstance(o, torch.Tensor) and o.requires_grad) for r, o in zip(needs, outs)]
            if after == needs:
                return [i for i, (v, r) in enumerate(zip(entering, needs)) if r and not v.requires_grad]
            needs = after


def _anchors(value, carry) -> bool:
    """Can ``value`` (a loop operand) anchor ``carry``: a floating tensor that requires grad,
    with an element, on the carry's device?"""
    return (isinstance(value, torch.Tensor) and value.requires_grad and value.is_floating_point()
            and isinstance(value.numel(), int) and value.numel() > 0 and value.device == carry.device)


def _anchored(graph: fx.Graph, loop: fx.Node, carry: fx.Node, anchor: fx.Node) -> fx.Node:
    """``where(False, anchor's first element, carry)``: the carry's value, bit for bit,
    requiring grad (a 0-d operand leaves the carry's dtype as it is)."""
    with graph.inserting_before(loop):
        element = graph.call_function(torch.select, (graph.call_function(torch.flatten, (anchor,)), 0, 0))
        no = graph.call_function(torch.zeros_like, (element,), {"dtype": torch.bool})
        return graph.call_function(torch.where, (no, element, carry))
