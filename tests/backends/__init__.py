"""Tests of magpy.backends: backends by name, background compiles, the autopilot, warm start, and
the GPU paths (CUDA graphs, host-stepped loops, predicates read back together)."""
