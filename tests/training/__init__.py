"""Tests of magpy.training: compiled training steps (backward in the graph or as an eager step,
optimizers, schedules, accumulation, GradScaler), DDP and FSDP2, and the training-loop fuzzer."""
