"""vilt (FALLBACK: "magpy failed generating the guard and mock (codegen): AttributeError: 'int'
object has no attribute 'items'"): a graph break inside ``for i, (a, b) in enumerate(zip(xs, ys))``
over Python lists.  The continuation must rebuild the loop's iterator; ``iter(list)`` reduces to
``(iter, (list,), position)`` whose state is an int set with ``list_iterator.__setstate__``, but
``codegen/mock.py`` ``rebuild`` asks ``hasattr(v, "__setstate__")`` of magpy's stand-in
(``continuations.Reduced``), not of the iterator, and takes the int for a ``__dict__`` state.
(Resume points are written only where an effect comes before a check: ViLT's and this one's is
drawing from the global generator, ``torch.multinomial`` there, ``torch.rand`` here.)
magpy then runs the call (and every later one) eagerly.

ViLT's ``visual_embed`` does exactly this: ``for i, (v, nv, p) in enumerate(zip(valid_nums,
non_valid_nums, pad_nums)): if p <= 0: ...`` with ``p`` a 0-dim tensor."""
import torch

import magpy

torch.set_num_threads(1)
magpy.config.verify_fast_guard = True


def f(x, limit):
    out = []
    for i, (a, b) in enumerate(zip([1, 2], [3, 4])):
        if limit - a <= 0:          # Tensor.__bool__: a graph break inside the loop
            out.append(x * b + torch.rand(1))   # draws from the global generator: an effect
        else:
            out.append(x - b)
    return torch.stack(out)


x, limit = torch.randn(3), torch.tensor(1)
compiled = magpy.compile(f, backend="eager")
for _ in range(3):
    torch.manual_seed(0)
    expected = f(x, limit)
    torch.manual_seed(0)
    torch.testing.assert_close(compiled(x, limit), expected)
s = magpy.stats(compiled)
print(f"stats {s.monitor_runs}/{s.mock_runs}/{s.eager_runs}/{s.graph_count}", s.break_reasons[:1])
magpy.reset()
print("with on_capture_error='raise':")
magpy.config.on_capture_error = "raise"
try:
    magpy.compile(f, backend="eager")(x, limit)
except Exception as e:   # noqa: BLE001
    print(f"{type(e).__name__}: {e}")
