"""A differential fuzzer of training loops (issue 41, item 2): random training loops written
the ways people write them, each run step by step eagerly and through ``magpy.compile``
(twins built from the same torch seed), compared after every step: the loss (and an
evaluation loss), every parameter and ``.grad`` (None against zeros differs), the
optimizer's and scheduler's ``state_dict()``, buffers, the GradScaler's and EMA's state and
torch's RNG state.  Bit for bit under backend "eager", within a tolerance under the others.

- :mod:`tests.fuzz_train.generator`: ``generate(seed)`` -> a :class:`Loop` (a readable
  description) and its Python source (``Loop.source()``: a module with ``build(compile)``);
- :mod:`tests.fuzz_train.worker`: runs one loop's twins in one process (a rank);
- :mod:`tests.fuzz_train.runner`: runs a loop in fresh worker processes (1 or 2 ranks, a
  gloo process group where the loop has one), with a time limit, and classifies it;
- :mod:`tests.fuzz_train.minimize`: simplifies a failing loop dimension by dimension;
- :mod:`tests.fuzz_train.campaign`: ``python -m tests.fuzz_train --n N --seed S --jobs J
  --backend eager|aot_eager|inductor [--ranks 1|2]``.
"""
