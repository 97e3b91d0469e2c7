"""WRONG (silent), from fastspeech2_conformer: the size of a tensor whose shape depends on tensor
*data* (``repeat_interleave`` with tensor repeats, ``nonzero``, ``masked_select``, boolean-mask
indexing) is read with ``.size(0)`` / ``.shape[0]`` / ``len()`` and used as a Python int; magpy
records the int as a constant of the graph with no check, so a later call whose data gives another
size reuses the old number.  Where the sizes then disagree the mock fails and magpy falls back
(the sweep's FALLBACK on fastspeech2_conformer); where they broadcast, the result is silently
wrong (below: a 1-row tensor broadcast into the recorded 4-row slice)."""
import torch

import magpy

torch.set_num_threads(1)
magpy.config.verify_fast_guard = True


def repeat(x, d):
    r = torch.repeat_interleave(x, d, dim=0)
    out = torch.zeros(8, x.size(1))
    out[: r.size(0)] = r
    return out


def nonzero(x, m):
    idx = m.nonzero()[:, 0]
    out = torch.zeros(8, x.size(1))
    out[: idx.shape[0]] = x[idx]
    return out


def masked(x, m):
    sel = x[m]
    return x[: len(sel)] * 2 + sel.sum()


def check(fn, first, fresh):
    compiled = magpy.compile(fn, backend="eager")
    for n, args in enumerate((first, first, fresh)):
        expected = fn(*args)
        try:
            got = compiled(*args)
            ok = got.shape == expected.shape and torch.allclose(got, expected)
            detail = "" if ok else f"  magpy {got.tolist()}\n{'':19s}eager {expected.tolist()}"
            print(f"{fn.__name__:8s} call {n}: {'ok' if ok else 'WRONG'}{detail}")
        except Exception as e:  # noqa: BLE001
            print(f"{fn.__name__:8s} call {n}: magpy raised {type(e).__name__}: {e}")
    s = magpy.stats(compiled)
    print(f"{'':8s} stats {s.monitor_runs}/{s.mock_runs}/{s.eager_runs}/{s.graph_count}", s.break_reasons[:1])
    magpy.reset()


x = torch.arange(4.0).repeat(2, 1).T.contiguous()          # rows 0, 1, 2, 3
check(repeat, (x, torch.tensor([1, 2, 0, 1])), (x, torch.tensor([0, 0, 1, 0])))
m1, m2 = torch.tensor([True, True, False, True]), torch.tensor([False, False, True, False])
check(nonzero, (x, m1), (x, m2))
check(masked, (x[:, 0], m1), (x[:, 0], m2))
