"""Backends: what compiles a record's graphs and what runs them fast.

==========================  ================================================================
module                      what
==========================  ================================================================
``registry``                graph compilers by name (eager, inductor, torchscript, onnxrt)
                            or any callable ``(gm, example_inputs) -> callable``
``eager_twins``             a graph's eager twin: its operations run one by one
``background``              compiles in a worker thread; the eager twins run meanwhile
``autopilot``               each compiled graph on trial against its eager twin
``warm``                    what a new process need not find out again before it compiles
``gpu/``                    CUDA graphs, counted loops stepped from the host, branch
                            predicates read back together
==========================  ================================================================
"""
