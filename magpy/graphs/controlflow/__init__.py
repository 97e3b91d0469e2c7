"""Control flow on tensor data recorded as graph operators, not graph breaks (paper §6.2.2): an
``if`` as one ``torch.cond``, a ``while`` loop as one ``torch.while_loop``, a ``for`` loop over
tensors' slices or a long ``range`` as one ``while_loop`` that counts its steps.

One observer, :class:`Branches`, records all three: at the jump (or the loop's iterator) it
runs the code ahead in *forks*, copies of the frame under a sandbox, compares the states
they leave and puts the operator into the graph.  It is one package of small modules, not one
module, because each kind of jump has its own part of the class; they share the fork
machinery and the bytecode and value analyses below it:

================  ============================================================================
module            holds
================  ============================================================================
branches          :class:`Branches`, the observer: which jump it records and how, and the checks
                  on each instruction of the run and of its forks
ifs               an ``if`` as ``torch.cond``: both arms, their merge at the join, the tensors an
                  arm left as they were (``Passed``) followed through the program
whiles            a ``while`` as ``torch.while_loop``: two iterations, then the real run
fors              a ``for`` as ``torch.while_loop``: its two steps, the lists it appends to, the
                  rows it stores, the real run on an iterator of its own
forks             running a region of the frame on a copy (a fork) and a loop for real; what the
                  parts share; the jumps and loops recordings refused
sandbox           ``Sandbox``: what a fork may do before it is stopped
jumps             the bytecode: an ``if``'s arms and join, a ``while``'s body and test, a ``for``'s
                  head, body and bindings
walks             what each step of a ``for`` loop gives (slices, ``zip``, ``enumerate``, ``range``)
carried           what a loop carries: the slots that change from one iteration to the next
operator_shadows  the shadows the operators leave on the frame's slots
================  ============================================================================
"""
from magpy.graphs.controlflow.branches import Branches
from magpy.graphs.controlflow.forks import forget_refusals

__all__ = ["Branches", "forget_refusals"]
