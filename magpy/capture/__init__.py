"""Capture: running the program under the monitor and watching what it does.

The first stage of the pipeline (DESIGN.md, "The parts"): the monitor runs the real bytecode
and reports each execution state; the RefGraph's rules follow where every value came from and
went; the property table says what a native callee may be assumed to do; the callees
package is what the recording run enters in place of library machinery it must see through.

==========================  ================================================================
module                      what
==========================  ================================================================
``monitor/``                the concrete interpreter for CPython bytecode (per version)
``refgraph/``               ShadowNodes, versions, edges, Algorithm 1; the rules that build it
``annotations``             the property table of native callees; ``magpy.annotate``
``callees/``                builtins, TorchScript, numpy, checkpointing, warnings and logging
                            as the recording run treats them
``process_state``           process-wide state held while any session needs it (recursion
                            limit, collector window, switch interval)
``collector``               the garbage collector while magpy records or compiles
==========================  ================================================================
"""
