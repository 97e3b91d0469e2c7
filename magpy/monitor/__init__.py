"""The monitor: runs real CPython bytecode instruction by instruction on real values and
reports every execution state to observers.  (Under construction.)"""


def run(fn, *args, **kwargs):
    """Run ``fn(*args, **kwargs)`` under the monitor and return its result."""
    raise NotImplementedError("monitor under construction")
