"""fastspeech2_conformer (FALLBACK): a size read from tensor data (repeat_interleave's output,
zeros() sized by a 0-dim tensor) is baked into a record; the next call with other data runs the
mock with the old size.

transformers' FastSpeech2 length regulator, reduced to plain torch:
    if durations.sum() == 0: ...                       # graph break (Tensor.__bool__)
    max_len = torch.sum(durations, dim=1).max()        # a 0-dim tensor
    out = torch.zeros((B, max_len, D))                 # used as a size
    for i, (e, d) in enumerate(zip(x, durations)):
        r = torch.repeat_interleave(e, d, dim=0)       # data-dependent output size
        out[i, :r.size(0)] = r
"""
import torch

import magpy

torch.set_num_threads(1)
magpy.config.verify_fast_guard = True


def length_regulator(x, durations):
    if durations.sum() == 0:
        durations[durations.sum(dim=1).eq(0)] = 1
    max_len = torch.sum(durations, dim=1).max()
    out = torch.zeros((x.size(0), max_len, x.size(2)))
    for i, (e, d) in enumerate(zip(x, durations)):
        r = torch.repeat_interleave(e, d, dim=0)
        out[i, : r.size(0)] = r
    return out


def run(fn, x, d):
    compiled = magpy.compile(fn, backend="eager")
    calls = [(x, d[0]), (x, d[0]), (x, d[1])]
    for n, (a, b) in enumerate(calls):
        expected = fn(a, b.clone())
        try:
            got = compiled(a, b.clone())
        except Exception as e:   # noqa: BLE001
            print(f"call {n}: magpy raised {type(e).__name__}: {e}")
            continue
        same = got.shape == expected.shape and torch.equal(got, expected)
        print(f"call {n}: shape {tuple(got.shape)} vs eager {tuple(expected.shape)}; equal: {same}")
    print("stats:", magpy.stats(compiled))
    magpy.reset()


torch.manual_seed(0)
x = torch.randn(2, 4, 3)
D0 = torch.tensor([[1, 2, 0, 1], [2, 2, 1, 0]])   # the first (and repeated) call's durations
print("== durations with another max length on the fresh call (the sweep's failure)")
run(length_regulator, x, [D0, torch.tensor([[3, 2, 1, 1], [1, 1, 1, 0]])])
print("== a row whose new length is 1 on the fresh call, same max length: broadcasts into the baked slice")
run(length_regulator, x, [D0, torch.tensor([[0, 0, 1, 0], [1, 2, 1, 1]])])
print("== durations with the same row sums on the fresh call (only the values move)")
run(length_regulator, x, [D0, torch.tensor([[0, 1, 2, 1], [1, 0, 2, 2]])])
