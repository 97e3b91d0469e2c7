"""Library callees the recording run treats in its own way, so what they do with tensors is
recorded instead of hidden behind a native call.

==========================  ================================================================
module                      what
==========================  ================================================================
``builtin_standins``        Python stand-ins entered for builtins (``max``/``min`` of 0-d
                            tensors, ``Counter``'s tally helper)
``torchscript``             scripted functions and modules run their original Python
``numpy_arrays``            numpy on a tensor's ``.numpy()`` as torch operations
``checkpoint``              ``torch.utils.checkpoint``: the checkpointed function as a subgraph
``warnings_logging``        ``warnings.warn`` and ``logging`` calls as effects the mock makes again
==========================  ================================================================
"""
