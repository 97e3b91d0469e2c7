"""Dynamic shapes and scalars (paper §6.1, §6.2.1): a tensor dimension, an int argument or a
float that keeps changing becomes a symbol or a graph input of one record, instead of one
record per value.

*Which* is :class:`Lifting`'s choice, the callable's memory of the sizes and numbers its
recordings met at each input (by its path from the call's arguments or from outside): one
seen with ``config.dynamic_after`` (2) distinct values is lifted from then on
(``magpy.config.dynamic``: None, the default; True lifts the dimensions of every tensor
argument and every int and float argument from the first call; False never lifts).  Int
arguments become symbols like sizes; a float becomes a 0-d tensor input where it is an
operand of float tensor arithmetic, directly or through Python arithmetic with constants
(``-lr``: the mock computes that again from each call's value, ``Scalar.source``, and writes
such floats where the program stored them), else it is *pinned* (guarded by value).  An int,
an argument (a training loop's index) or one read from program state (a counter: a
scheduler's ``last_epoch``), is lifted from 1 up (its second value: 0 stays a constant), and a
float the program computes from lifted ints (``float(step) / float(warmup)``, ``0.9 **
epoch``, ``math.cos``, ``max``/``min`` of floats: an ``IntFloat``) is computed again by the
mock from each call's ints, stored where the program stored it or given to the graph as an
input; a comparison on it is guarded by its outcome (a condition over the ints in the shape
check), so a learning-rate schedule records once per side of its branches, not per step.

*How*: a recording that lifts runs :class:`Shapes` beside the operator recorder.  Every
tensor the graphs see gets a fake twin (``FakeTensorMode`` with a ``ShapeEnv``): inputs get a
symbol for each lifted dimension, operation results get what the operation gives on the
twins.  The Python ints the program computes from sizes carry their symbolic value as the
*shadow* of their slot, which the monitor moves along with the value; so provenance never
depends on ``id()`` (``b = x.size(0)`` and a literal ``4`` are the same object):

=======================================  ================================================
the program ...                           the shadow ...
=======================================  ================================================
reads ``x.shape``, ``x.size(d)``,         is the twin's SymInt (a sequence's shadow is an
``len(x)``, ``x.numel()``                 ``Items`` of its items' shadows)
computes ``b * 4``, ``d // h``, ``-b``,   is the same computation on SymInts
``max(b, 1)``, ``(b, t, -1)``, ``s[1:]``
unpacks, stores, passes it to a Python    moves with it (monitor)
function, returns it to its caller
passes it to a tensor operation           becomes SymInt arithmetic in the graph (opgraph)
compares it, branches on it               the outcome is guarded (``s0 > 8``), not the value
does anything else with it (a store into  is *specialised*: the guard requires the value it
program state, a native call, a format,   has now (``Eq(s0, 6)``), as if it were not lifted
the call's result)
makes ``range(b)`` (or ``range(a, b,     is a ``Span``: a ``for`` loop over it recorded as
s)``, ``a`` and ``s`` not lifted)         one ``while_loop`` (magpy.graphs.controlflow) takes it
                                          whole; anything else specialises ``b``
=======================================  ================================================

Sizes the program reads where the monitor does not see the value land (inside native code)
are specialised too: an int of unknown origin never holds a lifted size unguarded.  The
record's guard checks its tensors without the lifted sizes and its lifted numbers by type,
then ``SHAPES`` (``codegen.guard.write_shape_check`` from :meth:`Shapes.conditions`: the
symbols' ranges, the relations torch and the program assumed, the specialisations).

================  ============================================================================
module            holds
================  ============================================================================
lifting           :class:`Lifting`: which sizes and numbers a recording lifts
lifted_shadows    the shadows (``Scalar``, ``IntFloat``, ``Items``, ``Span``...); specialising
rules             how each instruction moves, computes or consumes shadows
shapes            :class:`Shapes`, the observer that moves the shadows, and the one object the
                  recorder, the guard and the mock ask about the lifted values (its parts below)
twins             ``Twins``: the fake twins of the recording's tensors, the symbols of lifted
                  sizes and ints and where each is loaded from
shape_check       ``ShapeCheck``: the conditions of ``SHAPES``, over the symbols
lifted_floats     ``LiftedFloats``: the lifted floats, the pinned ones, the tuples holding some,
                  the outcomes the guard requires of each
number_reads      ``NumberReads``: numbers read from program state, lifted where they are read
stores            ``Stores``: sizes and lifted floats the call stored into program state, which
                  the mock writes from each call's values
call_shadows      ``CallShadows``, Shapes' part for calls: the shadow of a call's result
floats_from_ints  ``FloatsFromInts``, Shapes' part for floats computed from lifted ints: native
                  float calls, comparisons guarded by outcome, ifs whose arms compute floats
arms              an ``if`` on lifted ints whose arms only compute floats, kept whole
================  ============================================================================
"""
from magpy.graphs.dynamic.lifted_shadows import IntFloat, Scalar, Span, Walk, specialise, symbolic
from magpy.graphs.dynamic.lifting import Lifting, input_key
from magpy.graphs.dynamic.rules import argument_shadows
from magpy.graphs.dynamic.shapes import Shapes

__all__ = ["IntFloat", "Lifting", "Scalar", "Shapes", "Span", "Walk", "argument_shadows", "input_key",
           "specialise", "symbolic"]
