"""Tests of magpy.capture: the monitor (every opcode, observers, liveness, tracebacks), the process
state it holds, and the library callees a recording run treats in its own way."""
