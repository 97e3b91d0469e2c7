"""Backward inside the graph: ``loss.backward()`` recorded as graph operations (issue 13).

Where it is safe, a recording run does not make ``loss.backward()`` an eager step between
graphs (``magpy.training.train_steps``): it records it into the graph the forward is in, so a whole train
step (forward, loss, backward, ``.grad`` accumulation, ``clip_grad_norm_``, optimizer update)
is one graph the mock runs.  Three operations stand for what the autograd engine does:

- :func:`gradients`: ``torch.autograd.grad(loss, leaves, gradient)`` of the leaves the
  backward reaches (the parameters, graph inputs), in a fixed order;
- :func:`new_grad` for a leaf whose ``.grad`` is None (after ``zero_grad()``): a fresh tensor
  laid out as ``AccumulateGrad`` lays it out (the leaf's strides where it is dense);
- ``Tensor.add_`` into an existing ``.grad`` (accumulation over micro-batches, or across
  calls without ``zero_grad``): ``AccumulateGrad`` adds in place too, so the ``.grad`` object
  the program holds stays the same.

Gradient accumulation calls one program with ``.grad`` None (after
``zero_grad(set_to_none=True)``) and then present: recorded as above, each would be a record
of its own.  Where the call has not looked at a leaf's ``.grad`` before its backward
(:func:`unread_grads`), one record serves both: the graph adds the gradient in place into a
*buffer* input, which the mock takes (:func:`grad_buffer`) as the ``.grad`` the leaf has, or,
where it has none, as a new tensor laid out as :func:`new_grad` lays it out and filled with
``-0.0``, the identity of floating addition (``-0.0 + g`` is ``g`` bit for bit, signed zeros
included; not where denormals are flushed, ``torch.set_flush_denormal(True)``), which it
then leaves in ``.grad``.  The guard checks such a ``.grad`` with :func:`grad_fits` (None, or
a tensor the graph was compiled for) instead of by value, and that no two are one tensor
(:func:`distinct`).  Reads of the accumulated ``.grad`` later in the call (``clip_grad_norm_``,
the optimizer step) are reads of the graph's in-place result, so they see what eager sees
either way.

The recording run computes exactly these, eagerly (the monitor run is the eager run), and
the mock leaves the new tensors in ``.grad``.  With the "eager" backend the graph runs them
as they are; a backend compiling through AOTAutograd gets the graph in
:func:`inference_form`: its leaf inputs are made leaves of the graph's own, so the whole
step, backward included, is traced and compiled as one inference graph.

:func:`refusal` says where the backward must stay the real engine's (an eager step): what
runs in the engine besides the gradient arithmetic (tensor hooks, module backward hooks,
custom ``autograd.Function`` backwards, DDP's reducer), gradients flowing through tensors
from outside the graph, ``retain_graph``, sparse gradients, symbolic sizes, backends that
compile no backward, and ``magpy.config.joint_backward = False``.
"""
from __future__ import annotations

import collections
import dataclasses
import inspect

import torch
import torch.fx as fx
from torch._C._dynamo.guards import TensorGuards

from magpy.capture.refgraph.graph import ATTR
from magpy.config import config
from magpy.graphs.opgraph import DRAWS, Arm

# Backends whose compiled graphs may hold a backward: "eager" runs it with the autograd
# engine, "inductor" compiles :func:`inference_form`.
BACKENDS = frozenset({"eager", "inductor"})

# Leaf attributes holding hooks that run inside the engine's backward: the guard checks that
# each leaf of a joint graph still has none.
LEAF_HOOKS = ("_backward_hooks", "_post_accumulate_grad_hooks")


def gradients(loss, leaves: tuple, gradient):
    """The graph operation of ``loss.backward(gradient)``: the gradients of ``leaves`` (None
    for a leaf none flows to, which the engine leaves alone too)."""
    return torch.autograd.grad(loss, leaves, gradient, allow_unused=True)


def new_grad(grad, leaf):
    """The ``.grad`` ``AccumulateGrad`` makes of a leaf's first gradient: a tensor of its own
    (two leaves may get one gradient tensor), with the leaf's strides if the leaf is dense,
    else contiguous (``clone_obey_contract``)."""
    return _grad_like(leaf, grad.dtype).copy_(grad)


def _grad_like(leaf, dtype):
    dense = torch._prims_common.is_non_overlapping_and_dense_or_false(leaf)
    fmt = torch.preserve_format if dense else torch.contiguous_format
    return torch.empty_like(leaf, dtype=dtype, memory_format=fmt)


# The key of a graph input's ``meta`` that makes it a leaf's accumulation buffer (module
# docstring): (the leaf's RefGraph node, the node of the ``.grad`` the backward read).
BUFFER = "magpy_grad_buffer"


def grad_buffer(leaf):
    """The mock's buffer for ``leaf``'s accumulation: its ``.grad``, or where it has none a
    new tensor laid out as :func:`new_grad` lays it out, holding ``-0.0``."""
    grad = leaf.grad
    return _grad_like(leaf, leaf.dtype).fill_(-0.0) if grad is None else grad


def layout(t) -> tuple:
    """What :func:`grad_fits` compares: dtype, device, sizes, strides, storage offset."""
    return t.dtype, t.device, t.shape, t.stride(), t.storage_offset()


def grad_fits(grad, expected: tuple) -> bool:
    """Is ``grad``, a leaf's ``.grad`` that is not None, a tensor the graph adding into it
    was compiled for (``expected``: its :func:`layout`)?"""
    return (type(grad) is torch.Tensor and grad.layout is torch.strided and not grad.requires_grad
            and layout(grad) == expected)


class BuffersFit:
    """The guard's check of the ``.grad`` a record takes as buffers, given in the order of
    the buffers it was made for (the tensors the run had there): each None or a tensor the
    graphs were compiled for, no two one tensor.  All present (accumulating) or all None
    (after ``zero_grad(set_to_none=True)``) are the common cases: one ``TensorGuards`` call,
    or none; a mix is checked tensor by tensor."""

    __slots__ = ("layouts", "tensors")

    def __init__(self, examples: list):
        self.layouts = [layout(t) for t in examples]
        self.tensors = TensorGuards(*examples, tensor_check_names=[f"grad{i}" for i in range(len(examples))],
                                    dynamic_dims_sizes=[list(t.size()) for t in examples],
                                    dynamic_dims_strides=[list(t.stride()) for t in examples])

    def __call__(self, *grads) -> bool:
        present = [g for g in grads if g is not None]
        if not present:
            return True
        if len(present) == len(grads):
            fits = self.tensors.check(*grads) and not any(g.storage_offset() for g in grads) \
                and all(type(g) is torch.Tensor for g in grads)
        else:
            fits = all(g is None or grad_fits(g, want) for g, want in zip(grads, self.layouts))
        return fits and len(set(map(id, present))) == len(present)


def unread_grads(refgraph, leaves) -> set[int]:
    """The ids of the leaves whose ``.grad`` can be a buffer (module docstring): floating,
    with the ``.grad`` the call found, which it has neither read, nor reached otherwise, nor
    stored to, and which is None or a tensor of its own laid out as :func:`new_grad` would
    make it."""
    shared = collections.Counter(id(leaf.grad) for leaf in leaves if leaf.grad is not None)
    out = set()
    for leaf in leaves:
        node = refgraph.node_of(leaf)
        grad = leaf.grad
        if node is None or node.snapshot is None or node.snapshot.get("grad") is not grad \
                or (ATTR, "grad") in node.children or len(node.versions) > 1 or not leaf.is_floating_point():
            continue
        if grad is None or (shared[id(grad)] == 1 and refgraph.node_of(grad) is None
                            and grad_fits(grad, layout(_grad_like(leaf, leaf.dtype)))):
            out.add(id(leaf))
    return out




@dataclasses.dataclass
class Reach:
    """What backward from a loss runs into: the leaves whose ``.grad`` it accumulates into (the
    autograd graph's depth-first order from ``loss.grad_fn``), and the names of the nodes
    that run Python of their own (custom ``autograd.Function``s, module backward hooks)."""

    leaves: list
    python: list


def reach(loss) -> Reach | None:
    """The :class:`Reach` of backward from ``loss``; None if it has no autograd graph."""
    if not isinstance(loss, torch.Tensor) or loss.grad_fn is None:
        return None
    found, seen, todo = Reach([], []), {}, [loss.grad_fn]
    while todo:
        fn = todo.pop()
        if fn is None or id(fn) in seen:
            continue
        seen[id(fn)] = fn   # (kept alive, so ids stay unique)
        variable = getattr(fn, "variable", None)   # an AccumulateGrad node
        if variable is not None:
            found.leaves.append(variable)
        if isinstance(fn, torch.autograd.function.BackwardCFunction):
            found.python.append(type(fn).__name__)
        todo.extend(reversed([f for f, _ in fn.next_functions]))
    return found


def refusal(recorder, loss, gradient, retain_graph, found: Reach) -> str | None:
    """Why this ``loss.backward()`` cannot be recorded into the graph (the real engine must
    run it, as an eager step), or None if it can."""
    if not config.joint_backward:
        return "magpy.config.joint_backward is False"
    if not recorder.joint_backend:
        return "the backend compiles no backward"
    if retain_graph:
        return "retain_graph=True keeps the autograd graph for another backward"
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        return "a process group is initialized: DDP's reducer hooks the gradients in the engine"
    if found.python:
        return (f"autograd runs Python of its own ({found.python[0]}: a custom autograd.Function "
                "or a module backward hook)")
    hooked = next((name for leaf in found.leaves for name in LEAF_HOOKS if getattr(leaf, name, None)), None)
    if hooked is not None:
        return f"a parameter has a gradient hook ({hooked})"
    return _graph_refusal(recorder, loss, gradient, found.leaves)


def _graph_refusal(recorder, loss, gradient, leaves) -> str | None:
    """Why the operations the backward differentiates are not all in the current graph."""
    piece = recorder.piece
    if isinstance(piece, Arm):
        return "inside a branch recorded as torch.cond"
    if _symbolic(recorder):
        return "the graph has symbolic sizes"
    if recorder.produced(loss) is not piece:
        return "the loss was computed before an eager step or outside the call"
    if gradient is not None and not recorder.knows(gradient):
        return "the gradient argument is of unknown origin"
    for t in recorder.piece_inputs():
        if isinstance(t, torch.Tensor) and t.requires_grad and not t.is_leaf:
            return "gradients flow through a tensor computed before an eager step or outside the call"
    inputs = {id(t) for t in recorder.piece_inputs()}
    if not all(id(leaf) in inputs and recorder.refgraph.node_of(leaf) is not None for leaf in leaves):
        return "a tensor needing grad was made inside the call"
    if any(map(_sparse_gradient, piece.graph.nodes)):
        return "an embedding with sparse gradients"
    return None


def _symbolic(recorder) -> bool:
    """Does the forward the backward differentiates take symbolic sizes: a tensor input of a
    lifted size, or a lifted int?  (A lifted number the forward does not take -- a loop
    index that only steers a branch, guarded by its outcome -- or a float, a 0-d tensor
    input, leaves the forward's sizes fixed.)"""
    shapes = recorder.shapes
    if shapes is None or not shapes.symbols:
        return False
    return any(isinstance(v, torch.SymInt) or isinstance(v, torch.Tensor) and shapes.lifted_sizes(v)
               for v in recorder.piece_inputs())


def _sparse_gradient(node: fx.Node) -> bool:
    """Does operation ``node`` give its weight a sparse gradient (``nn.Embedding(sparse=True)``)?"""
    if node.target not in _SPARSE_GRADIENTS:
        return node.kwargs.get("sparse") is True
    try:
        bound = inspect.signature(node.target).bind(*node.args, **node.kwargs)
    except TypeError:
        return True   # (in doubt, the engine)
    return bound.arguments.get("sparse") is True


# Operations whose ``sparse`` argument a module passes by position.
_SPARSE_GRADIENTS = (torch.nn.functional.embedding, torch.nn.functional.embedding_bag)


def record(recorder, loss, gradient, leaves: list, buffered: set[int] = frozenset()) -> None:
    """Run ``loss.backward(gradient)`` as the graph will (module docstring) and record it into
    the current graph: the leaves' ``.grad`` end up as eager leaves them.  The ``.grad`` of
    the leaves whose ids are in ``buffered`` (:func:`unread_grads`) are buffers."""
    with recorder.paused():
        grads = gradients(loss, tuple(leaves), gradient)
    recorder.record_call(gradients, (loss, tuple(leaves), gradient), grads)
    for leaf, grad in zip(leaves, grads):
        if grad is None:
            continue
        old = leaf.grad
        with recorder.paused():
            if old is None:
                leaf.grad = new = new_grad(grad, leaf)
            else:
                new = old.add_(grad)
        if id(leaf) in buffered:
            _record_buffered(recorder, leaf, new, grad)
        elif old is None:
            recorder.record_call(new_grad, (grad, leaf), new)
        else:
            recorder.record_call(torch.Tensor.add_, (old, grad), new)


def _record_buffered(recorder, leaf, new, grad) -> None:
    """``new.add_(grad)`` into the buffer ``new`` (the ``.grad`` eager left: made, or added
    into), a graph input the mock makes (:func:`grad_buffer`), named after the leaf."""
    node = recorder.refgraph.node_of(leaf)
    recorder.eager_tensor(new, f"gbuf{node.id}")
    with recorder.paused():   # (what recording does with the new input is magpy's own work)
        recorder.record_call(torch.Tensor.add_, (new, grad), new)
    added = recorder.piece.nodes.get(id(new))
    if added is not None and added.target == "add_":
        added.args[0].meta[BUFFER] = (node, node.children[(ATTR, "grad")])


def buffered_grads(recorder) -> dict:
    """id of the RefGraph node of each ``.grad`` that is a buffer -> the tensor the run had
    there (what the graphs were compiled for)."""
    out = {}
    for piece in recorder.pieces:
        for _, ph in piece.inputs:
            if BUFFER in ph.meta:
                out[ph.meta[BUFFER][1].id] = ph.meta["example_value"]
    return out


def has_backward(gm: fx.GraphModule) -> bool:
    """Does ``gm`` hold a recorded backward (:func:`gradients`)?"""
    return any(n.target is gradients for n in gm.graph.nodes)


def inference_form(gm: fx.GraphModule, example_inputs: list) -> list:
    """Make ``gm``, a graph holding a backward, one that AOTAutograd compiles as an inference
    graph (no backward of its own), in place; the example inputs to compile it for.

    Each input that is a leaf needing grad (a parameter) is used through
    ``x.detach().requires_grad_()``: a leaf of the graph's own sharing the parameter's data,
    so the forward records autograd onto it, :func:`gradients` differentiates (AOTAutograd
    traces ``torch.autograd.grad`` into ATen operations, as it traces a joint graph), and the
    optimizer's in-place updates reach the parameter.  Compiled for inputs that need no grad,
    the graph's outputs need none either: the backward already ran inside it."""
    examples = list(example_inputs)
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    for i, (node, x) in enumerate(zip(placeholders, example_inputs)):
        if not (isinstance(x, torch.Tensor) and x.requires_grad and x.is_leaf):
            continue
        with gm.graph.inserting_after(node):
            alias = gm.graph.call_method("detach", (node,))
        with gm.graph.inserting_after(alias):
            leaf = gm.graph.call_method("requires_grad_", (alias,))
        node.replace_all_uses_with(leaf, delete_user_cb=lambda user, alias=alias: user is not alias)
        examples[i] = x.detach()
    gm.recompile()
    return examples


def channels_last_images(gm: fx.GraphModule, example_inputs: list) -> None:
    """Make the batches of images ``gm`` convolves (4-d floating inputs needing no grad, used
    by ``conv2d``) channels-last at the graph's start, in place, so that the whole step is
    traced channels-last, as Inductor lays out convolutions.

    Traced in eager's layout, a graph holding a backward ties Inductor to that layout where
    a ``convolution_backward`` reads an activation (it keeps the traced strides of an input
    it shares): a block's output was then written once per layout and per reader (five
    copies of each of ResNet-50's stage outputs), where torch.compile's backward graph
    receives the forward's channels-last outputs as they are.  The values are the same
    up to the convolutions' summation order.  Not in a graph that draws random numbers: a
    dropout after a convolution fills its mask in memory order, so a channels-last
    activation would get another mask than eager's (the training-loop fuzzer found it:
    a conv net with dropout off eager by 7% of its loss under Inductor)."""
    if any(DRAWS in n.meta for n in gm.graph.nodes):
        return
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    changed = False
    for node, x in zip(placeholders, example_inputs):
        if not _image_batch(x) or not any(u.target in _CONVOLUTIONS for u in node.users):
            continue
        with gm.graph.inserting_after(node):
            image = gm.graph.call_method("contiguous", (node,), {"memory_format": torch.channels_last})
        node.replace_all_uses_with(image, delete_user_cb=lambda user, image=image: user is not image)
        changed = True
    if changed:
        gm.recompile()


def _image_batch(x) -> bool:
    return isinstance(x, torch.Tensor) and x.dim() == 4 and x.is_floating_point() and not x.requires_grad


_CONVOLUTIONS = (torch.nn.functional.conv2d, torch.conv2d)


class BackwardDone:
    """A compiled :func:`inference_form` graph whose outputs ``needing_grad`` come back as
    eager's do after ``backward()``: tensors needing grad with a ``grad_fn`` whose graph is
    freed (another backward through them raises eager's error), not plain tensors.  Each is
    a view of the compiled output (no copy)."""

    __slots__ = ("fn", "needing_grad")

    def __init__(self, fn, needing_grad: tuple[int, ...]):
        self.fn, self.needing_grad = fn, needing_grad

    def __call__(self, *args):
        out = list(self.fn(*args))
        for i in self.needing_grad:
            out[i] = _Freed.apply(out[i], _ANCHOR)
        return out


# What a _Freed output's grad_fn hangs on: the output needs grad, as eager's did.
_ANCHOR = torch.zeros((), requires_grad=True)


class _Freed(torch.autograd.Function):
    """The identity, whose backward fails as eager's does through a graph already run."""

    @staticmethod
    def forward(ctx, x, anchor):
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        raise RuntimeError(
            "Trying to backward through the graph a second time (or directly access saved tensors after "
            "they have already been freed). Saved intermediate values of the graph are freed when you call "
            ".backward() or autograd.grad(). Specify retain_graph=True if you need to backward through the "
            "graph a second time or if you need to access saved tensors after calling backward.")
