"""A differential fuzzer for magpy: random small programs over the Python and torch features
real models use, each called 6-10 times with arguments and external state changing as real
calls change, compared with eager after every call (result or exception, program state,
grad mode, torch RNG state).

- :mod:`tests.fuzz.program`: the world programs run in, the statement tree, the source text;
- :mod:`tests.fuzz.generator`: the random programs and call plans (``generate(seed)``);
- :mod:`tests.fuzz.runner`: eager vs ``magpy.compile`` side by side, and the outcome;
- :mod:`tests.fuzz.minimize`: delta debugging of a failing program;
- :mod:`tests.fuzz.campaign`: ``python -m tests.fuzz --n 10000 --out DIR``.
"""
