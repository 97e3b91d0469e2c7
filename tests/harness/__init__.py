"""What the tests share: the differential harness (`differential`) and the compiled-call
harness (`compile_harness`: steps, expected kinds, record counts)."""
