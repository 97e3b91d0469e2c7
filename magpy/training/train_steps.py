"""Training steps: ``loss.backward()`` and ``optimizer.step()`` inside a compiled call.

A step ``opt.zero_grad(); loss = f(model(x), y); loss.backward(); opt.step()`` is recorded as
one graph where ``magpy.training.backward`` can put the backward into it, else as graph, eager step, graph:

- the forward and the loss are recorded into the graph as any tensor operations;
- ``loss.backward()`` (:func:`backward_intrinsic`) is recorded into the same graph as the
  gradients of the leaves it reaches and their ``.grad`` accumulation (``magpy.training.backward``), or,
  where the engine must run it (hooks, custom ``autograd.Function`` backwards, DDP's
  reducer, ...: ``backward.refusal``), it is an eager step: the real autograd engine, so those
  run exactly as in eager.  The step gives back the ``.grad`` of every leaf it reached; the
  later graphs take those tensors as inputs (a backend compiling the forward graph through
  AOTAutograd, as Inductor does, compiles its backward too);
- either way the mock leaves the new tensors in ``.grad`` (the RefGraph tracks a leaf's
  ``.grad`` as its state, ``refgraph.tensor_state``);
- the optimizer's Python code (param_groups loops, its ``state`` dicts, lazily created
  momentum buffers and step counters) is monitored like the program's own
  (:data:`MONITORED_TORCH`), so its tensor updates are recorded after the backward and its
  state is guarded and written back by the mock.

The table entries here keep the optimizer's eager semantics under the monitor: wrappers that
only hide a function from Dynamo are looked through, profiler ranges of torch's own code are
not recorded, and the step counter's value enters the update as a float64 tensor computed
in the graph instead of a float read into Python on every step.
"""
from __future__ import annotations

import sys
import types

import torch
from torch.amp.grad_scaler import GradScaler
from torch.optim import optimizer as _optimizer

from magpy.capture import annotations as ann
from magpy.capture.callees import builtin_standins
from magpy.capture.monitor.policy import CallPolicy
from magpy.capture.refgraph.graph import ATTR
from magpy.training import backward, fsdp

# torch's Python code the monitor enters (the rest runs natively): an optimizer's and
# clip_grad_norm_'s reads of parameters, ``.grad`` and optimizer state are the program's reads.
MONITORED_TORCH = ("torch.optim", "torch.nn.utils.clip_grad", "torch.amp.grad_scaler")

_DISABLED_CODE = torch._disable_dynamo(lambda: None).__code__


def add_to(policy: CallPolicy) -> None:
    """Add the training entries that do not depend on a recording to ``policy``."""
    for fn in _disabled_functions():
        policy.alias(fn, fn.__wrapped__)
    record = torch.autograd.profiler.record_function
    policy.add_intrinsic(record.__enter__, _enter_profiler_range)
    policy.add_intrinsic(record.__exit__, _exit_profiler_range)
    policy.add_intrinsic(_optimizer._get_value, _step_value)
    if hasattr(_optimizer, "_stack_if_compiling"):
        policy.add_intrinsic(_optimizer._stack_if_compiling, _stacked_if_tensors)
    policy.reroute(GradScaler._maybe_opt_step, builtin_standins.always(_maybe_opt_step))


def _maybe_opt_step(self, optimizer, optimizer_state, *args, **kwargs):
    """``GradScaler._maybe_opt_step``: its ``sum(v.item() for v in ...)`` hands values read
    from tensors to the native ``sum`` through a generator, out of the monitor's sight (the call
    would end recording there); the same loop written out.  Each value is a found-inf flag, 0.0
    or 1.0, so any order of adding them gives the same sum, and only its truth is read."""
    retval = None
    found = 0.0
    for v in optimizer_state["found_inf_per_device"].values():
        found += v.item()
    if not found:
        retval = optimizer.step(*args, **kwargs)
    return retval


def _disabled_functions() -> list:
    """The functions of torch.optim wrapped by ``torch._disable_dynamo`` (``zero_grad``,
    ``load_state_dict`` ...): the wrapper only keeps Dynamo out; magpy follows the function."""
    found = []
    for name, mod in list(sys.modules.items()):
        if not name.startswith(MONITORED_TORCH) or mod is None:
            continue
        for cls in vars(mod).values():
            if isinstance(cls, type):
                found += [f for f in vars(cls).values()
                          if type(f) is types.FunctionType and f.__code__ is _DISABLED_CODE]
    return found


def _enter_profiler_range(monitor, args, kwargs):
    # record_function ranges are profiler annotations: a compiled step does not open them
    # (opening one returns a profiler handle, which is not a tensor a graph could carry).
    return args[0]


def _exit_profiler_range(monitor, args, kwargs):
    return None


def _step_value(monitor, args, kwargs):
    """``torch.optim.optimizer._get_value(step_t)``: eagerly ``step_t.item()``, a new float on
    every step.  A float64 0-d tensor instead keeps the update one graph for every step; the
    bias corrections then compute in float64 as Python's float arithmetic does.  Only in the
    implementations of :data:`_TENSOR_STEP`, and not where the learning rate is a tensor:
    ``lr / bias_correction1`` of two 0-d tensors computes in float64, where eager divides in
    the learning rate's dtype, nor in a foreach update of FSDP2's DTensor parameters (which
    takes no plain tensor of step sizes).  Elsewhere the step count is read as eager reads it
    (an eager step, whose float the graph takes as an input)."""
    (x,) = args
    if not isinstance(x, torch.Tensor):
        return x
    caller = monitor.current
    if caller is not None:
        update = _enclosing(caller)
        name = update.code.co_name
        if isinstance(caller.f_locals.get("lr"), torch.Tensor) or name not in _TENSOR_STEP \
                or name.startswith("_multi_tensor") and _sharded(update.f_locals.get("params", ())):
            return x.item()
    return x.to(torch.float64)


# The optimizer implementations whose step-count arithmetic gives eager's values with the
# count as a float64 0-d tensor (checked bit for bit: tests/test_training*.py): their bias
# corrections meet tensors with dimensions, or reach the kernels stacked into one tensor
# (``_stack_if_compiling``), so they act as the float would.  Elsewhere it is read as eager
# reads it: NAdam's ``mu_product *= mu`` of two 0-d tensors computes in float64 where eager
# multiplies the float32 state by a float in float32, its foreach ``_foreach_mul_(mu_products,
# mus)`` takes another overload with a list of tensors, Adamax's foreach step sizes none.
_TENSOR_STEP = frozenset({"_single_tensor_adam", "_multi_tensor_adam", "_single_tensor_adagrad",
                          "_multi_tensor_adagrad"})


def _stacked_if_tensors(monitor, args, kwargs):
    """``torch.optim.optimizer._stack_if_compiling(x)``: ``torch.stack(x)`` under a compiler
    (magpy's recording says it is one), else the list.  Stacked only where every item is a
    tensor: the step count read as a float (:func:`_step_value`) makes floats, which eager
    leaves a list and ``torch.stack`` refuses."""
    (x,) = args
    return torch.stack(x) if all(isinstance(v, torch.Tensor) for v in x) else x


def _sharded(params) -> bool:
    return any(map(ann.is_dtensor, params))


def _enclosing(frame):
    """The frame of the function ``frame`` runs in, through comprehensions (their own frames
    before CPython 3.12)."""
    while frame.back is not None and frame.code.co_name.startswith("<"):
        frame = frame.back
    return frame


def _addcdiv_(self, tensor1, tensor2, *, value):
    # The kernel computes self + value * tensor1 / tensor2 with value cast to self's dtype:
    # the same roundings, one operation each.
    return self.add_(tensor1.mul(value).div(tensor2))


def _addcmul_(self, tensor1, tensor2, *, value):
    return self.add_(tensor1.mul(value).mul(tensor2))


# Tensor methods whose number argument ``value`` an optimizer passes as a 0-d tensor (the
# step counter's float64 value, :func:`_step_value`): torch reads it with ``.item()``,
# which a graph compiler cannot trace; these compute the same in tensor operations.
NUMBER_ARGUMENTS = {"addcdiv_": _addcdiv_, "addcmul_": _addcmul_}


def number_arguments(gm: torch.fx.GraphModule) -> None:
    """Rewrite, in place, the calls of :data:`NUMBER_ARGUMENTS` given a tensor ``value``."""
    changed = False
    for node in gm.graph.nodes:
        rewrite = NUMBER_ARGUMENTS.get(node.target) if node.op == "call_method" else None
        if rewrite is not None and isinstance(node.kwargs.get("value"), torch.fx.Node):
            node.op, node.target = "call_function", rewrite
            changed = True
    if changed:
        gm.recompile()


def tensor_alphas(gm: torch.fx.GraphModule) -> None:
    """Rewrite, in place, ``x.add_(y, alpha=t)`` (``add``, ``sub``, ``sub_``) given a 0-d
    tensor ``t`` (a lifted float learning rate, or a tensor one) as ``x.add_(y.mul(t))``:
    AOTAutograd reads a tensor ``alpha`` into Python (``.item()``), which it cannot trace.
    For compiling backends only: the kernel fuses the multiply-add, so this rounds
    differently from the graph as recorded (which the "eager" backend runs)."""
    changed = False
    for node in gm.graph.nodes:
        alpha = node.kwargs.get("alpha") if node.op in ("call_method", "call_function") else None
        name = node.target if node.op == "call_method" else getattr(node.target, "__name__", None)
        if not isinstance(alpha, torch.fx.Node) or name not in _ALPHA_METHODS or len(node.args) != 2:
            continue
        with gm.graph.inserting_before(node):
            scaled = gm.graph.call_method("mul", (node.args[1], alpha))
        node.args = (node.args[0], scaled)
        node.kwargs = {k: v for k, v in node.kwargs.items() if k != "alpha"}
        changed = True
    if changed:
        gm.recompile()


_ALPHA_METHODS = frozenset({"add", "add_", "sub", "sub_"})


def tensor_scalar_lists(gm: torch.fx.GraphModule) -> None:
    """Rewrite, in place, ``torch._foreach_addcdiv_(xs, t1s, t2s, scalars)`` (``addcmul``, and
    their out-of-place forms) given a 1-D tensor ``scalars`` (a foreach optimizer's step
    sizes, which torch stacks where ``torch.compiler.is_compiling()``, as it is while magpy
    records) as ``torch._foreach_add_(xs, torch._foreach_div(torch._foreach_mul(t1s,
    scalars.unbind()), t2s))``: torch cannot trace that overload (it reads the tensor into
    numbers; torch.compile fails on it too, torch 2.13).  For compiling backends only: the
    graph as recorded (which the "eager" backend runs) computes ``x + s * t1 / t2`` in one
    kernel, in the same order, where a compiler may round each step apart."""
    changed = False
    for node in gm.graph.nodes:
        ops = _SCALAR_LISTS.get(node.target) if node.op == "call_function" else None
        if ops is None or len(node.args) != 4 or not isinstance(node.args[3], torch.fx.Node) or node.kwargs:
            continue
        xs, t1s, t2s, scalars = node.args
        combine, accumulate = ops
        with gm.graph.inserting_before(node):
            each = gm.graph.call_method("unbind", (scalars,))
            scaled = gm.graph.call_function(torch._foreach_mul, (t1s, each))
            term = gm.graph.call_function(combine, (scaled, t2s))
        node.target, node.args = accumulate, (xs, term)
        changed = True
    if changed:
        gm.recompile()


# foreach operation -> (how it combines its two lists, how it adds the result to the first).
_SCALAR_LISTS = {torch._foreach_addcdiv_: (torch._foreach_div, torch._foreach_add_),
                 torch._foreach_addcdiv: (torch._foreach_div, torch._foreach_add),
                 torch._foreach_addcmul_: (torch._foreach_mul, torch._foreach_add_),
                 torch._foreach_addcmul: (torch._foreach_mul, torch._foreach_add)}


# --------------------------------------------------------------------------- backward
def backward_intrinsic(recorder):
    """``loss.backward(gradient, retain_graph)`` in a recording: recorded into the graph where
    ``magpy.training.backward`` can, else an eager step of the record that gives back the ``.grad``
    tensors it wrote (module docstring).  Other forms (``create_graph``, ``inputs``) are
    ordinary dynamic operations."""
    def intrinsic(monitor, args, kwargs):
        loss, gradient, retain_graph, other = _backward_arguments(*args, **(kwargs or {}))
        breaker = recorder.dynamic
        with recorder.paused():   # (reading the autograd graph is not the program's read)
            found = None if other or breaker.brk is not None else backward.reach(loss)
        if found is None or not all(map(recorder.knows, found.leaves)):
            # An ordinary dynamic operation: an eager step whose effects are not tracked.
            breaker(f"Tensor.backward {ann.dynamic_reason('backward')}", step=True)
            return torch.Tensor.backward(*args, **(kwargs or {}))
        # FSDP2's reduce-scatter writes the .grad of the sharded parameters the leaves stand for.
        holders = fsdp.gradient_holders(found.leaves)
        if not all(map(recorder.knows, holders)):
            breaker.stop("loss.backward() writes the .grad of FSDP's sharded parameters, unread by the call")
            return torch.Tensor.backward(*args, **(kwargs or {}))
        leaves = (*found.leaves, *holders)
        with recorder.paused():
            # (FSDP's reduce-scatter writes the holders' .grad itself: theirs stay as found)
            buffered = set() if holders else backward.unread_grads(recorder.refgraph, leaves)
            before = tuple(_grad_read(recorder.refgraph, leaf) for leaf in leaves)
        if not all(map(recorder.knows, (g for g in before if g is not None))):
            breaker("Tensor.backward into a .grad of unknown origin", step=True)
            return torch.Tensor.backward(*args, **(kwargs or {}))
        with recorder.paused():
            why = backward.refusal(recorder, loss, gradient, retain_graph, found)
            if why is None:
                _guard_leaf_hooks(recorder.refgraph, leaves)
        if why is None:
            backward.record(recorder, loss, gradient, leaves, buffered)
            return None
        brk = breaker.where(f"loss.backward() runs eagerly between graphs ({why})")
        step = (loss, gradient, retain_graph, tuple(leaves), before)
        var = breaker.segmenter.effect_step(gradients, step, brk)
        with recorder.paused():
            grads = gradients(*step)
        if var is not None:
            for i, g in enumerate(grads):
                # A .grad an earlier step made and this one accumulated into keeps its name.
                if g is not None and id(g) not in recorder.eager:
                    # (create_graph is False: the engine's gradients need no grad)
                    recorder.eager_tensor(g, f"{var}[{i}]", gradless=not g.requires_grad)
        return None
    return intrinsic


def gradients(loss, gradient, retain_graph, leaves: tuple, before: tuple) -> tuple:
    """The eager step of ``loss.backward()``: the leaves' ``.grad`` after it.  ``before`` is
    their ``.grad`` where the program called it: the mock writes the program's state back at
    its end, so what the call set before (``zero_grad``'s None) is set here first."""
    for leaf, grad in zip(leaves, before):
        if leaf.grad is not grad:
            leaf.grad = grad
    torch.autograd.backward(loss, gradient, retain_graph)
    return tuple(leaf.grad for leaf in leaves)


def _grad_read(refgraph, leaf):
    """``leaf.grad`` now; if it is the one the call found, a read of the leaf's state (whether
    backward creates or accumulates into it), which the guard checks."""
    grad = leaf.grad
    node = refgraph.node_of(leaf)
    if node is not None and node.snapshot is not None and node.snapshot.get("grad") is grad:
        refgraph.child(node, ATTR, "grad", grad)
    return grad


def _guard_leaf_hooks(refgraph, leaves) -> None:
    """A backward in the graph runs no hooks: the guard checks that each leaf still has none
    (a hook registered later makes the call record again, with the backward eager)."""
    for leaf in leaves:
        node = refgraph.node_of(leaf)
        for name in backward.LEAF_HOOKS:
            refgraph.child(node, ATTR, name, getattr(leaf, name))


def _backward_arguments(loss, gradient=None, retain_graph=None, create_graph=False, inputs=None):
    return loss, gradient, retain_graph, (create_graph or inputs is not None)
