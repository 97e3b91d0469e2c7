"""Tests of magpy.records: graph breaks as segments, continuations, the state a mock leaves,
guards against mutations (full and fast), checks as guards, faults in magpy's own machinery."""
