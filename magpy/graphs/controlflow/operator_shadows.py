"""The shadows control flow operators leave on the frame's slots (magpy.graphs.controlflow): where the
slot's value is not what the operator's graph gives, or must not be read.

====================  ===============================================================
shadow                the slot holds
====================  ===============================================================
:class:`Passed`       a tensor an ``if`` (or a ``while`` the run did not enter) left as it
                      was: reached through the slot, it is the operator's output
:class:`LoopLocal`    a variable a loop set that was unbound before it
:class:`Accumulated`  a list a ``for`` loop appended to: its buffer in the graph
====================  ===============================================================
"""
from __future__ import annotations


class Passed:
    """The shadow of a slot where the run's arm left tensor ``value`` as it was: reached
    through the slot, it is the cond's output, which ``out`` (a stand-in) holds."""

    __slots__ = ("out", "value", "site")

    def __init__(self, out, value, site):
        self.out, self.value, self.site = out, value, site

    def __repr__(self):
        return f"<tensor passed through the if at {self.site[0]}:{self.site[1]}>"


class LoopLocal:
    """The shadow of a variable a ``while_loop``'s body set that was unbound before the loop
    at ``site``: reading it after the loop ends the recording (magpy.graphs.controlflow.whiles)."""

    __slots__ = ("site",)

    def __init__(self, site):
        self.site = site


class Accumulated:
    """The shadow of a list a ``for`` loop recorded as a ``while_loop`` appended to: ``items``
    (the tensors it holds after the loop), ``out`` (a stand-in of the buffer the operator
    filled with them), ``site`` (the loop's)."""

    __slots__ = ("lst", "items", "out", "site")

    def __init__(self, lst, out, site):
        self.lst, self.items, self.out, self.site = lst, list(lst), out, site
