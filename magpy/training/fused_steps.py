"""Fused Adam and AdamW steps, for compiling backends: the same update written with tensor ops.

``torch.optim.AdamW(..., fused=True)`` updates every parameter in one ``torch._fused_adamw_``
call.  torch 2.13 has no meta kernel for its overload that takes the learning rate as a tensor
(``_fused_adamw_.tensor_lr``, the one a lifted learning rate reaches), and registering one only
moves the failure into functionalization, so Inductor cannot compile a graph that holds it:
such graphs ran as their eager twins.  :func:`fused_as_tensor_ops` rewrites each such call
into :func:`adam_step`, the CPU kernel's arithmetic (``aten/src/ATen/native/cpu/FusedAdamKernel.cpp``)
in plain tensor operations, which AOTAutograd traces and Inductor fuses per parameter.  For
compiling backends only: the kernel computes its bias corrections in double and in its own
order, so the result agrees within rounding, not bit for bit (backend "eager" runs the graph as
recorded, the kernel itself).
"""
from __future__ import annotations

import torch

# The fused kernels rewritten, and whether their weight decay is AdamW's (decoupled).
_FUSED_ADAM = {torch._fused_adam_: False, torch._fused_adamw_: True}


def fused_as_tensor_ops(gm: torch.fx.GraphModule) -> None:
    """Rewrite, in place, each ``torch._fused_adam(w)_`` call of ``gm`` as :func:`adam_step`."""
    changed = False
    for node in gm.graph.nodes:
        if node.op != "call_function" or node.target not in _FUSED_ADAM or len(node.args) != 6 or node.users:
            continue
        node.kwargs = {**node.kwargs, "decoupled": _FUSED_ADAM[node.target]}
        node.target = adam_step
        changed = True
    if changed:
        gm.recompile()


def adam_step(params: list, grads: list, exp_avgs: list, exp_avg_sqs: list, max_exp_avg_sqs: list,
              state_steps: list, *, lr, beta1: float, beta2: float, weight_decay: float, eps: float,
              amsgrad: bool, maximize: bool, grad_scale=None, found_inf=None, decoupled: bool) -> None:
    """What ``torch._fused_adam_`` (``decoupled``: ``_fused_adamw_``) does to its lists, in
    place: the gradients unscaled by ``grad_scale`` (left so, as the kernel leaves them), and
    nothing changed where ``found_inf`` is 1.  ``lr``: a float or a 0-d tensor."""
    for i, param in enumerate(params):
        grad = grads[i]
        if grad_scale is not None:
            grad = grad / grad_scale
            _write(grads[i], grad, found_inf)
        if maximize:
            grad = -grad
        step = state_steps[i]
        bias_correction1 = 1 - torch.pow(beta1, step)
        bias_correction2_sqrt = (1 - torch.pow(beta2, step)).sqrt()
        new_param = param
        if weight_decay != 0:
            if decoupled:
                new_param = param - param * (lr * weight_decay)
            else:
                grad = grad + param * weight_decay
        exp_avg = exp_avgs[i].lerp(grad, 1 - beta1)
        exp_avg_sq = exp_avg_sqs[i] * beta2 + grad * grad * (1 - beta2)
        second = exp_avg_sq
        if amsgrad:
            second = torch.maximum(max_exp_avg_sqs[i], exp_avg_sq)
            _write(max_exp_avg_sqs[i], second, found_inf)
        denom = second.sqrt() / bias_correction2_sqrt + eps
        new_param = new_param - (lr / bias_correction1) * exp_avg / denom
        _write(exp_avg_sqs[i], exp_avg_sq, found_inf)
        _write(exp_avgs[i], exp_avg, found_inf)
        _write(param, new_param, found_inf)


def _write(target: torch.Tensor, value: torch.Tensor, found_inf) -> None:
    """``target[:] = value``, unless ``found_inf`` (a 0-d tensor) is 1: the kernel skips the step."""
    if found_inf is not None:
        value = torch.where(found_inf == 1, target, value)
    target.copy_(value)
