"""Which torch calls of a recording run are operations of the graph.

The recorder sees every torch call the run makes, the program's and native code's alike,
through a ``TorchFunctionMode``.  Most are graph operations; some are not: reads of
metadata (the guard fixes it), grad mode switches (the graph follows them where it records
an operation), draws from a generator the program passed, and reads of tensor data into
Python, which are a branch recorded as an operator, an assertion, or an eager step.  The
call itself always runs as the program made it: only it may raise into the program.
"""
from __future__ import annotations

import torch
from torch.overrides import TorchFunctionMode

from magpy.capture import annotations as ann
from magpy.graphs import rng
from magpy.graphs.operands import Unsupported

# A tensor's data read by numpy: ``.numpy()``, and what numpy calls on a tensor it is given.
_NUMPY_READS = frozenset({"numpy", "__array__", "__array_wrap__"})


class Interception(TorchFunctionMode):
    """The torch function mode of :class:`magpy.graphs.opgraph.OpRecorder`: it runs each call
    and hands the recorder those that are graph operations (``_record_result``), and the
    sizes the others read where dimensions are lifted (``shapes``)."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        self.pieces[-1].check(func, args, kwargs)
        if self.dynamic.brk is not None or self._opaque:
            return func(*args, **kwargs)
        # Only func(...) itself may raise into the program: magpy's own work around it stops
        # recording instead.
        try:
            name = self._recorded_name(func, args, kwargs)
        except Exception as e:  # noqa: BLE001 - magpy's failure, never the program's
            self.dynamic.fail(e)
            name = None
        before = rng.state() if name is not None else None
        out = func(*args, **kwargs)
        self.drew = before is not None and rng.changed(before)
        if name is None and self.shapes is not None and args and isinstance(args[0], torch.Tensor):
            try:
                self._size_read(func, args, out)
            except Exception as e:  # noqa: BLE001 - magpy's failure, never the program's
                self.dynamic.fail(e)
        if name is not None:
            try:
                self._record_result(func, name, args, kwargs, out)
            except Unsupported as e:
                self.dynamic(str(e))
            except Exception as e:  # noqa: BLE001 - magpy's failure, never the program's
                self.dynamic.fail(e)
        return out

    def _recorded_name(self, func, args, kwargs) -> str | None:
        """The name ``func`` is recorded under, or None when it is not a graph operation."""
        name = ann.torch_name(func)
        if self.data_shaped and (name in ann.TORCH_SIZE_READS or name in ann.TORCH_SIZED_RESULTS) and \
                any(id(a) in self.data_shaped for a in args[:2] if isinstance(a, torch.Tensor)):
            self.dynamic(f"{qualname(func)} reads the size of a tensor whose shape follows tensor data",
                         step=True)
            return None
        if name in ann.TORCH_GRAD_MODE or name in ann.TORCH_METADATA or name in ann.TORCH_REFERENCES:
            return None   # graph state (Piece.sync_modes records it where it matters), metadata, a .grad
        if rng.own_generator(kwargs):
            # A graph cannot hold the program's generator object: eager draws from it.
            self.dynamic(f"{qualname(func)} draws from a torch.Generator the program passed", step=True)
            return None
        if name == "unbind" and args[1:] == (0,) and self.forks_allowed() and \
                self.branches.wants_iteration(args[0]):
            return None   # iter(x) of a for loop recorded as a while_loop (magpy.graphs.controlflow)
        if name in _GRAD_METADATA and self._grad_known(args[0]) and not _GRAD_METADATA[name](*args):
            # ``zero_grad(set_to_none=False)`` on each .grad: ``grad_fn`` is None for a tensor
            # that needs no grad; ``requires_grad_(flag)`` changes nothing where it is ``flag``
            # (an embedding's output made to require grad by a hook, as transformers does).
            return None
        if name in ann.TORCH_DYNAMIC:
            if name in ann.TORCH_TRUTH and self._assertion() is not None:
                return name   # recorded as an assertion if the truth lets the assertion pass
            if name in ann.TORCH_TRUTH and self.forks_allowed() and self.branches.wants(args[0]):
                return None   # a branch: recorded as a cond once the jump completes
            if name in _NUMPY_READS and self.arrays is not None and self.arrays.follows(args[0], name):
                return None   # numpy on its array: torch operations (magpy.capture.callees.numpy_arrays)
            self.dynamic(f"{qualname(func)} {ann.dynamic_reason(name)}", step=True)
            return None
        return name

    def forks_allowed(self) -> bool:
        """May control flow run forks of the program now?  (Not while it holds an array
        magpy.capture.callees.numpy_arrays follows: the forks run unfollowed.)"""
        return self.branches is not None and not (self.arrays is not None and self.arrays.holding())

    def _grad_known(self, t) -> bool:
        """Does the record know whether ``t`` needs grad (a tensor from outside, whose
        ``requires_grad`` the guard checks, one a graph made, or a gradient an eager backward
        wrote)?"""
        return self.refgraph.node_of(t) is not None or id(t) in self.made or id(t) in self.gradless

    def _size_read(self, func, args, out) -> None:
        if ann.torch_name(func) in ann.TORCH_METADATA:
            shapes = self.shapes
            shapes.consider(args[0])
            if shapes.active:
                shapes.read(func, args, out)


def qualname(func) -> str:
    """``func``'s name in a message: ``Tensor.add``, ``torch.nonzero``."""
    owner = getattr(func, "__self__", None)
    if type(owner).__name__ == "getset_descriptor":
        return f"Tensor.{owner.__name__}"
    qual = getattr(func, "__qualname__", None) or repr(func)
    return qual.replace("TensorBase.", "Tensor.").replace("_VariableFunctionsClass.", "torch.")


# Autograd metadata reads and writes that are constants or no-ops, given the tensor's known
# requires_grad and the other arguments: name -> (tensor, *arguments) -> whether it is not one.
_GRAD_METADATA = {"grad_fn": lambda t: t.requires_grad,
                  "requires_grad_": lambda t, requires_grad=True: requires_grad != t.requires_grad}
