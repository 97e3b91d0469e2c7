"""Shapes that follow tensor data (``torch.nonzero``, ``x[mask]``, ``repeat_interleave`` with
tensor repeats, a size given as a tensor, and what is computed from them): reading such a
size in Python reads tensor data, so it is an eager step of the record (a check of the value
where a later operation takes it as a constant), never a constant baked into the record.

Each program runs through ``tests.harness.compile_harness.check_compiled`` (results and state compared
with eager's on every call): its first call, the same call again, then inputs whose data
give another size, and inputs whose data give the recorded size again.  Before, every one of
these replayed the first call's size: a wrong result, or a failing mock.
"""
import pytest
import torch
import torch.nn.functional as F

import magpy
from tests.harness.compile_harness import ANY, EAGER, MOCK, MONITOR, Step, check_compiled, fresh_magpy  # noqa: F401

BREAK = "reads the size of a tensor whose shape follows tensor data"


def _positives(x):
    n = torch.nonzero(x > 0)
    return torch.zeros(n.size(0)) + x.sum()


def _masked_count(x):
    picked = x[x > 0] * 2             # (computed from a masked read: its size follows the data too)
    return x / max(picked.numel(), 1)


def _regulated(x, d):
    # transformers' FastSpeech2 length regulator: rows repeated by durations into a padded tensor
    h = torch.zeros((x.size(0), torch.sum(d, dim=1).max(), x.size(2)))
    for i, (e, t) in enumerate(zip(x, d)):
        r = torch.repeat_interleave(e, t, dim=0)
        h[i, : r.size(0)] = r
    return h


def _sized_by_a_tensor(x, d):
    h = x.new_zeros((d.max(), 3))
    return h + h.shape[0]


def _distinct(x):
    return x * len(torch.unique(x.round()))


def _routed(x, router):
    # a mixture of experts' loop over the experts the tokens chose (Mixtral's eager path)
    mask = F.one_hot((x @ router).argmax(-1), router.size(1)).permute(1, 0)
    out = torch.zeros_like(x)
    for e in torch.greater(mask.sum(-1), 0).nonzero():
        idx = torch.where(mask[e.squeeze()])[0]
        out.index_add_(0, idx, x[idx] * (e + 1))
    return out


def _data(values):
    return lambda s: (torch.tensor(values, dtype=torch.float32),)


def _durations(rows):
    return lambda s: (torch.randn(2, 3, 4), torch.tensor(rows))


def _tokens(seed):
    def make(s):
        g = torch.Generator().manual_seed(seed)
        return torch.randn(5, 8, generator=g), torch.randn(8, 4, generator=torch.Generator().manual_seed(0))
    return make


# (program, inputs of the first call, inputs giving another size, inputs giving the first size,
# what the later calls are: a record's (ANY), or eager runs where the size is read as a
# torch.Size (.shape) or by iterating, which no eager step of a record follows yet)
PROGRAMS = [
    (_positives, _data([1., -1, 2]), _data([1., 1, 2]), _data([-3., 4, 5]), ANY),
    (_masked_count, _data([1., -1, 2]), _data([1., 1, 2]), _data([-3., 4, 5]), ANY),
    (_regulated, _durations([[1, 2, 3], [2, 2, 2]]), _durations([[1, 0, 0], [2, 2, 2]]),
     _durations([[3, 2, 1], [2, 2, 2]]), ANY),
    (_sized_by_a_tensor, _durations([[1, 2], [2, 2]]), _durations([[1, 5], [0, 2]]), _durations([[2, 0], [1, 1]]),
     EAGER),
    (_distinct, _data([1., 1, 2]), _data([1., 3, 2]), _data([5., 5, 5.2]), ANY),
    (_routed, _tokens(0), _tokens(1), _tokens(0), EAGER),
]


@pytest.mark.parametrize("program, first, other, same, later", PROGRAMS,
                         ids=lambda p: getattr(p, "__name__", "")[1:])
def test_a_size_that_follows_data_is_read_on_every_call(program, first, other, same, later):
    steps = [Step("first call", first, expect=MONITOR), Step("the same inputs", first, expect=later),
             Step("data giving another size", other, expect=later),
             Step("data giving the first size", same, expect=later)]
    trace = check_compiled(lambda: (program, None), steps, fullgraph=False)
    explained = magpy.explain(trace.compiled, *first(None))
    assert any(BREAK in b.reason for b in explained.break_reasons), explained.break_reasons


def test_the_record_is_reused_where_the_data_gives_the_recorded_size():
    steps = [Step("first call", _data([1., -1, 2]), expect=MONITOR),
             Step("other data, two positives again", _data([-3., 4, 5]), expect=MOCK),
             Step("three positives", _data([1., 1, 2]), expect=MONITOR),
             Step("two again", _data([7., 1, -2]), expect=MOCK)]
    trace = check_compiled(lambda: (_positives, None), steps, fullgraph=False)
    assert magpy.stats(trace.compiled).eager_runs == 0


def _shaped_by_shapes(x, idx):
    y = x.view(x.size(0), -1)[:, idx]   # (an index tensor: the result's shape is idx's)
    return y * y.size(1)


def test_sizes_that_follow_shapes_only_stay_constants_of_one_graph():
    make = lambda s: (torch.randn(3, 2, 2), torch.tensor([0, 2]))   # noqa: E731
    check_compiled(lambda: (_shaped_by_shapes, None),
                   [Step("first call", make, expect=MONITOR), Step("fresh data", make, seed=1, expect=MOCK)],
                   expect_graphs=1)


def _scattered(x):
    idx = torch.nonzero(x > 0).squeeze(1)
    out = torch.zeros_like(x).index_add(0, idx, x[idx])   # (x's shape, whatever idx holds)
    return out * out.size(0)


def test_a_write_through_an_index_that_follows_data_keeps_a_fixed_shape():
    make = lambda s: (torch.randn(6),)   # noqa: E731
    check_compiled(lambda: (_scattered, None),
                   [Step("first call", make, expect=MONITOR), Step("other data", make, seed=3, expect=MOCK)],
                   expect_graphs=1)


def _prompt_attention(q, e, m):
    # MochiAttnProcessor2_0's shape: per sample, the prompt tokens its mask keeps, then padded
    # back to the full length computed from a size that follows the data
    outs = []
    for i in range(q.shape[0]):
        v = torch.cat([q[i:i + 1], e[i:i + 1, torch.nonzero(m[i]).flatten()]], dim=1)
        outs.append(F.pad(v, (0, 0, 0, q.shape[1] + e.shape[1] - v.size(1))))
    a, b = torch.cat(outs).split_with_sizes((q.shape[1], e.shape[1]), dim=1)
    return a * 2, b + 1


def test_a_size_that_follows_data_in_a_recording_with_lifted_sizes():
    """A new batch size records with symbolic sizes; a size read of nonzero's result there is
    an expression of a symbol no input fixes (``u0 + 4``).  It is the eager step's value, not a
    guard: before, specialising it failed the capture ("Could not extract specialized integer
    from data-dependent expression") and the call ran eagerly."""
    def batch(b, seed=0):
        def make(s):
            g = torch.Generator().manual_seed(seed)
            return (torch.randn(b, 4, 3, generator=g), torch.randn(b, 5, 3, generator=g),
                    (torch.rand(b, 5, generator=g) > 0.4).long())
        return make

    magpy.config.on_capture_error = "raise"
    trace = check_compiled(lambda: (_prompt_attention, None), [
        Step("first call", batch(1), expect=MONITOR), Step("the same inputs", batch(1), expect=MOCK),
        Step("batch 2", batch(2), expect=MONITOR), Step("batch 2, other masks", batch(2, 1), expect=ANY)],
        fullgraph=False)
    assert magpy.stats(trace.compiled).eager_runs == 0
