"""On a GPU, where each kernel launch and each read back to the host costs.

==========================  ================================================================
module                      what
==========================  ================================================================
``cuda_graphs``             a compiled graph replayed as one captured CUDA graph
``host_loops``              counted loops stepped from the host, a captured graph per step
``batched_predicates``      the predicates of a run of conds read back to the host at once
==========================  ================================================================
"""
