"""Records: one recording run into a guard, a mock and compiled graphs, and the records of a
compiled callable.

==========================  ================================================================
module                      what
==========================  ================================================================
``segments``                a recording's parts (``Capture``): graphs cut around dynamic
                            operations, the eager steps between them, values computed eagerly
``eager_steps``             a ``Step``, and what the segmenter's parts share about step results
``value_flow``              values computed eagerly followed through each instruction
``graph_floats``            floats read from tensors that the graph computes itself
``deferred_checks``         step results with no identity of their own, checked where used
``resume_points``           where a failed check hands the call back to the monitor
``index_reads``             tensors read only as indices
``continuations``           resume points: a frame state rebuilt to resume the monitor
``codegen/``                guard and mock as generated Python source
``record``                  one monitor run into one record, its graphs compiled
``cache``                   the records per compiled callable: MRU order, limits, misses
``report``                  what a compiled callable tells: stats, logs, warnings
==========================  ================================================================
"""
