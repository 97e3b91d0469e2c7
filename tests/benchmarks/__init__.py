"""The benchmark scripts' plumbing at test size (no timings asserted)."""
