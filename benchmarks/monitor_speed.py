"""How fast is the monitor?

Run it with each interpreter magpy supports (its own bytecode each time); it prints the version.

1. Instructions per second on a pure-Python workload (no observers, and with one
   observer attached), next to the same workload run natively.
2. A 12-layer BERT forward (transformers, random weights, batch 1): eager time vs. the time
   of a monitor run, and the difference -- the cost magpy's monitor adds to the first call.

    python -m benchmarks.monitor_speed [--repeat 5]
"""
import argparse
import platform
import statistics
import time

import torch

import magpy.capture.monitor as monitor
from benchmarks.models import MODELS


def workload(n):
    """Plain Python: loops, calls, containers, strings, a generator and a comprehension."""
    def squares(k):
        for i in range(k):
            yield i * i

    table = {}
    total = 0
    for i in range(n):
        key = f"k{i % 97}"
        table[key] = table.get(key, 0) + i
        if i % 3 == 0:
            total += len(key)
        else:
            total -= 1
    words = sorted(table, key=lambda k: table[k])
    return total + sum(squares(n // 10)) + len([w for w in words if w.endswith("1")])


class Counter(monitor.Observer):
    def __init__(self):
        self.n = 0

    def on_instruction(self, frame, instruction, inputs, outputs):
        self.n += 1


def median_time(fn, repeat):
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--n", type=int, default=20000, help="workload size")
    opts = parser.parse_args()

    counter = Counter()
    expected = workload(opts.n)
    assert monitor.Monitor([counter]).run(workload, opts.n) == expected
    instructions = counter.n
    native = median_time(lambda: workload(opts.n), opts.repeat)
    plain = median_time(lambda: monitor.run(workload, opts.n), opts.repeat)
    observed = median_time(lambda: monitor.Monitor([Counter()]).run(workload, opts.n), opts.repeat)
    print(f"CPython {platform.python_version()}: pure-Python workload, {instructions} instructions")
    print(f"{'mode':<26}{'time (ms)':>12}{'instructions/s':>18}{'vs native':>12}")
    for label, t in (("native CPython", native), ("monitor", plain), ("monitor + 1 observer", observed)):
        print(f"{label:<26}{t * 1e3:>12.1f}{instructions / t:>18,.0f}{t / native:>11.1f}x")

    model, args, kwargs = MODELS["bert"]("bench12")
    counter = Counter()
    with torch.no_grad():
        for _ in range(2):
            model(*args, **kwargs)
        monitor.Monitor([counter]).run(model, *args, **kwargs)
        eager = median_time(lambda: model(*args, **kwargs), opts.repeat)
        monitored = median_time(lambda: monitor.run(model, *args, **kwargs), opts.repeat)
    print(f"\n12-layer BERT forward ({counter.n} monitored instructions, median of {opts.repeat}, "
          f"{torch.get_num_threads()} threads)")
    print(f"{'eager':<26}{eager * 1e3:>12.1f} ms")
    print(f"{'monitor run':<26}{monitored * 1e3:>12.1f} ms")
    print(f"{'monitor cost beyond eager':<26}{(monitored - eager) * 1e3:>12.1f} ms"
          f"   (target < 1000 ms; the MagPy paper's average: 2910 ms)")


if __name__ == "__main__":
    main()
