"""Graphs: the tensor operations of a recording run as torch.fx graphs.

The second stage: what the program does with tensors becomes operator graphs, with the sizes
and numbers that change lifted into them and control flow on tensor data as operators.

==========================  ================================================================
module                      what
==========================  ================================================================
``opgraph``                 the recorder: every tensor operation into torch.fx, one graph
                            per piece, and which piece made each tensor
``interception``            which of a run's torch calls are graph operations
``operands``                an operation's arguments as the graph's (numbers as inputs)
``higher_order``            ``torch.cond``, ``while_loop`` and checkpointing into a piece
``assertions``              checks on tensor data as graph assertions
``mode_stack``              torch's function-mode stack as the program sees it in eager
``rng``                     the generators' state: saved, put back and compared
``dynamic/``                dynamic shapes and scalars: what to lift, fake twins, symbols
``controlflow/``            ``if``/``while``/``for`` on tensor data as ``torch.cond`` and
                            ``torch.while_loop``
==========================  ================================================================
"""
