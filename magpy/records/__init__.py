"""Records: one recording run into a guard, a mock and compiled graphs, and the records of a
compiled callable.

==========================  ================================================================
module                      what
==========================  ================================================================
``segments``                a recording's parts (``Capture``): graphs cut around dynamic
                            operations, the eager steps between them, values computed eagerly
``continuations``           resume points: a frame state rebuilt to resume the monitor
``codegen/``                guard and mock as generated Python source
``record``                  one monitor run into one record, its graphs compiled
``cache``                   the records per compiled callable: MRU order, limits, misses
==========================  ================================================================
"""
