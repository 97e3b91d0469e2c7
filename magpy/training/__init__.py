"""Training and distribution: what a training step adds to a recording run.

==========================  ================================================================
module                      what
==========================  ================================================================
``train_steps``             ``loss.backward()`` and ``optimizer.step()`` in a compiled call:
                            the backward in the graph or an eager step between graphs,
                            ``.grad`` as state, optimizer code monitored
``backward``                the backward recorded into the graph: gradients, ``.grad``
                            accumulation, the inference form Inductor compiles
``fsdp``                    FSDP2 (``fully_shard``) modules inside compiled calls
==========================  ================================================================
"""
