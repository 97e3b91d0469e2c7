"""FSDP2 (``torch.distributed.fsdp.fully_shard``) inside compiled calls.

A module wrapped with ``fully_shard`` runs a forward pre-hook and a forward hook of FSDP's
around its forward.  The pre-hook all-gathers the module's parameters and swaps each sharded
parameter in ``module._parameters`` for an unsharded one (whose storage it allocates and
fills); the hook swaps them back and frees that storage (not for the root, which the backward
reshards).  Both also hook autograd (post-backward functions on the inputs, pre-backward hooks
on the outputs), whose reduce-scatters write the sharded parameters' ``.grad``.

magpy compiles the compute between the hooks and leaves the hooks to FSDP:

- each hook call is an eager step (:func:`pre_forward_step`, :func:`post_forward_step`): FSDP's
  own function, run natively on every call, collectives included.  It is ``external``: the
  Python state it changes is FSDP's own, which the program never reads, except
- the parameter slots it swaps, which the step gives back (the parameters in them after
  the hook): the monitored stand-ins (:func:`pre_forward`, :func:`post_forward`) store them
  into the slots as the program's own stores, so the module's forward reads the unsharded
  parameters as the step's results (graph inputs taken from the step, not guarded state),
  and the mock's final state writes back what FSDP left there;
- the tensors the pre-hook gives back in place of its arguments (the outputs of its
  post-backward function: each tensor needing grad, when grad is enabled) are step results
  too; the others, and the forward hook's output, it gives back unchanged (:func:`plain`:
  where FSDP would cast them, under a mixed-precision policy, the call runs eagerly);
- ``loss.backward()`` stays an eager step (a process group is initialized), and gives back
  the ``.grad`` of the sharded parameters as well as of the leaves the engine reaches
  (:func:`gradient_holders`): FSDP's reduce-scatter writes those;
- FSDP's per-module states are held by identity (``keep_by_identity``): the steps are given
  them as constants of the record, and resume points do not take them apart.

Runs eagerly (exact): a mixed-precision policy that casts, ``fully_shard([a, b])`` of several
modules, a tensor needing grad nested in a container of a sharded module's arguments, inputs
FSDP would move to its device; and a check of a value computed eagerly inside a sharded
module's forward (``Module._call_impl`` runs the hooks in a closure made in the call, where
no resume point can be taken).
"""
from __future__ import annotations

import weakref

import torch
import torch.utils._pytree as pytree

from magpy.capture import annotations as ann
from magpy.capture.refgraph.graph import keep_by_identity

try:
    from torch.distributed.fsdp._common_utils import collect_grad_tensors
    from torch.distributed.fsdp._fully_shard._fsdp_state import FSDPState
except ImportError:   # a torch built without torch.distributed
    FSDPState = None


# id(unsharded parameter) -> (a weak reference to it, the sharded parameter whose .grad its
# reduce-scatter writes), filled by the steps (the pre-forward one makes the unsharded
# parameters).  By id: a tensor's ``==`` compares data, so it cannot be a weak dict's key.
_SHARDED_OF: dict[int, tuple] = {}


def _forget(key: int):
    return lambda ref: _SHARDED_OF.pop(key, None)


def _infos(state) -> list:
    return [fp._module_info for group in state._fsdp_param_groups for fp in group.fsdp_params]


def _params_now(state) -> tuple:
    """The parameters in the slots FSDP's hooks of ``state`` swap (:func:`param_paths`' order),
    noting which sharded parameter each unsharded one stands for."""
    for group in state._fsdp_param_groups:
        for fp in group.fsdp_params:
            unsharded = getattr(fp, "_unsharded_param", None)
            if unsharded is not None:
                key = id(unsharded)
                _SHARDED_OF[key] = (weakref.ref(unsharded, _forget(key)), fp.sharded_param)
    return tuple(m._parameters[name] for info in _infos(state)
                 for m, name in ((info.module, info.param_name),
                                 *zip(info.shared_modules, info.shared_param_names)))


def param_paths(state, module) -> list | None:
    """The parameter slots FSDP's hooks of ``state`` swap, as ``(path of the submodule of
    ``module``, parameter name)``; None where one is not in ``module`` (``fully_shard`` of
    several modules).  A pure function of FSDP's bookkeeping, run natively: FSDP's own
    objects are not the program's (the mock would write back their changes)."""
    where = {id(m): path for path, m in module.named_modules(remove_duplicate=False)}
    found = []
    for info in _infos(state):
        for m, name in ((info.module, info.param_name), *zip(info.shared_modules, info.shared_param_names)):
            if id(m) not in where:
                return None
            found.append((where[id(m)], name))
    return found


def plain(state, args, kwargs) -> bool:
    """Do FSDP's forward hooks of ``state`` give back the arguments and the output they are
    given, except each tensor needing grad at the top of ``args``/``kwargs``, which the
    pre-hook replaces by the output of its post-backward function (when grad is enabled)?
    So unless FSDP casts (a mixed-precision policy) or moves inputs to its device, a
    transform of functorch is active, or a tensor needing grad is inside a container."""
    policy = state._mp_policy
    if policy.param_dtype is not None or policy.output_dtype is not None \
            or torch._C._are_functorch_transforms_active():
        return False
    leaves = pytree.tree_leaves((args, kwargs))
    if state._device.type != "cpu" and any(isinstance(v, torch.Tensor) and v.device != state._device
                                           for v in leaves):
        return False
    inner = [v for a in (*args, *kwargs.values()) if not isinstance(a, torch.Tensor)
             for v in pytree.tree_leaves(a)]
    return not any(isinstance(v, torch.Tensor) and v.requires_grad for v in inner)


def grad_tensors(tree) -> list:
    """The tensors needing grad in ``tree``, which FSDP's forward hook hooks (in its order)."""
    return list(collect_grad_tensors(tree)) if torch.is_grad_enabled() else []


def pre_forward_step(state, module, tensors: list) -> list:
    """The eager step of FSDP's forward pre-hook, given the tensors needing grad of its
    arguments (the only ones it replaces or looks at, :func:`plain`): ``[the tensors it
    gives back for them, the parameters in the slots after it]``."""
    new_args, _ = _PRE_FORWARD(state, module, tuple(tensors), {})
    # (lists: an empty tuple is a cached object, whose identity says nothing, magpy.records.segments)
    return [list(new_args), list(_params_now(state))]


def part(got: list, which: int, i: int) -> torch.Tensor:
    """Tensor ``i`` of part ``which`` of :func:`pre_forward_step`'s result."""
    return got[which][i]


def post_forward_step(state, module, tensors: list) -> None:
    """The eager step of FSDP's forward hook, given the tensors needing grad of the output
    (the only ones it looks at, :func:`plain`: it hooks their backward)."""
    _POST_FORWARD(state, module, (), tuple(tensors))


# The stand-ins the monitor enters in place of FSDP's hooks (magpy.records.record reroutes them).
# The forward pre-hook's stand-in reads the slots it swaps (so the mock's final state can
# write back what FSDP leaves there, the sharded parameters), calls it as an eager step, and
# stores the unsharded parameters into the slots as the program's own stores, so the forward
# reads them as the step's results.  Nothing in them branches on a step's result: a check
# there could not resume (``Module._call_impl`` runs hooks in a closure made in the call).
# The steps are given only tensors (an object the call made and changes later, a key-value
# cache in the keywords, would be given to the step as the call leaves it).  The step's
# tensors are taken from its result by :func:`part`, whose tensors are steady (the
# post-backward function's outputs are views of the tensors it is given, the unsharded
# parameters are FSDP's of fixed shape): the program reads their metadata (``x.dtype``)
# without a check.  Loops, not comprehensions (those would be functions of magpy's, which
# run natively).
def pre_forward(state, module, args, kwargs):
    """FSDP's forward pre-hook, monitored: see the module docstring."""
    paths = param_paths(state, module)
    if paths is None or not plain(state, args, kwargs):
        return _PRE_FORWARD(state, module, args, kwargs)   # (natively: the call runs eagerly)
    slots = []
    for path, name in paths:
        d = module.get_submodule(path)._parameters
        d[name]   # noqa: B018 - read as found: the final state may leave it there
        slots.append((d, name))
    got = pre_forward_step(state, module, grad_tensors((args, kwargs)))
    for i in range(len(slots)):
        d, name = slots[i]
        d[name] = part(got, 1, i)
    grad = torch.is_grad_enabled()
    n = 0
    out_args, out_kwargs = [], {}
    for a in args:
        if grad and isinstance(a, torch.Tensor) and a.requires_grad:
            a, n = part(got, 0, n), n + 1
        out_args.append(a)
    for k in kwargs:
        a = kwargs[k]
        if grad and isinstance(a, torch.Tensor) and a.requires_grad:
            a, n = part(got, 0, n), n + 1
        out_kwargs[k] = a
    return (*out_args,), out_kwargs   # (built by moves: tuple() would compute from the step's values)


def post_forward(state, module, inputs, output):
    """FSDP's forward hook, monitored: an eager step (the slots it swaps back need no store:
    the mock's final state writes back what FSDP left in the slots the pre-hook stored)."""
    if not plain(state, (), {}):
        return _POST_FORWARD(state, module, inputs, output)   # (natively: the call runs eagerly)
    post_forward_step(state, module, grad_tensors(output))
    return output


def gradient_holders(leaves) -> tuple:
    """The sharded parameters whose ``.grad`` a backward reaching ``leaves`` (unsharded
    parameters among them) writes through FSDP's reduce-scatter."""
    found = []
    for leaf in leaves:
        ref, sharded = _SHARDED_OF.get(id(leaf), (None, None))
        if ref is not None and ref() is leaf and all(sharded is not f for f in found):
            found.append(sharded)
    return tuple(found)


def steps(recorder) -> list:
    """``(step, intrinsic)`` for a recording's call policy: each step runs unrecorded (its
    tensor work is FSDP's, an eager step's, not graph work)."""
    def unrecorded(step):
        def intrinsic(monitor, args, kwargs):
            with recorder.paused():
                return step(*args, **(kwargs or {}))
        return intrinsic
    return [(step, unrecorded(step)) for step in _STEPS]


def _hook(name: str):
    fn = FSDPState.__dict__[name]
    return fn, getattr(fn, "__wrapped__", fn)   # (torch._dynamo.disable's wrapper: Dynamo only)


if FSDPState is not None:
    (_PRE_FORWARD_HOOK, _PRE_FORWARD), (_POST_FORWARD_HOOK, _POST_FORWARD) = (
        _hook("_pre_forward"), _hook("_post_forward"))
    # (callee, stand-in) for magpy.records.record's call policy
    STAND_INS = ((_PRE_FORWARD_HOOK, pre_forward), (_POST_FORWARD_HOOK, post_forward))
    _STEPS = (pre_forward_step, post_forward_step)
    ann.FUNCTIONS.update(dict.fromkeys(_STEPS, ann.EXTERNAL))
    ann.FUNCTIONS[param_paths] = ann.Annotation(reads=ann.NONE)
    ann.FUNCTIONS[part] = ann.Annotation(steady=True)
    ann.FUNCTIONS[plain] = ann.Annotation(reads=(ann.NONE, ann.DEEP, ann.DEEP))
    ann.FUNCTIONS[grad_tensors] = ann.PURE
    keep_by_identity(FSDPState)
else:
    STAND_INS = _STEPS = ()
