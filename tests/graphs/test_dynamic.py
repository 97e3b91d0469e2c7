"""Dynamic shapes: lifting tensor dimensions that keep changing.

``magpy.config.dynamic`` chooses how a compiled callable treats the sizes of its tensors:

1. ``False``: every new input shape makes a new record (a monitor run), as before; past
   ``magpy.config.cache_size_limit`` records the callable runs eagerly with one ``UserWarning``
   that names ``cache_size_limit``, suggests ``dynamic`` and does not print the module's repr;
2. ``None`` (the default, automatic): the first call records a record specialised to its
   shapes; a later call that misses because a dimension of the same input (argument position,
   attribute path) differs from what an earlier record saw records again with that dimension
   symbolic ("lifted"), and that record serves every later size >= 2 of it.  A sweep of batch
   sizes from 2..16 in random order is exactly 2 monitor runs, the rest mock runs, no eager
   runs.  Sizes 0 and 1 are specialised: each records once more, then hits;
3. ``True``: the dimensions of tensors passed as arguments are symbolic from the first call
   (a sweep is 1 monitor run); parameters and buffers of modules stay static;
4. Python arithmetic on shapes (``b, t, c = x.shape``, ``x.size(0)``, ``x.shape[-1]``,
   ``len(x)``, ``view``/``reshape``/``expand`` with computed sizes, ``d // heads``,
   ``torch.ones(t, t).tril()``, ``torch.arange(t)``, ``x.new_zeros(b, 4)``, ``x[:, : t // 2]``,
   ``torch.zeros((b, t))``, ``(*x.shape[:-1], h, d)``) is symbolic arithmetic in the graph and
   costs no recording for new sizes;
5. Python control flow on a shape stays guarded: a record never serves a size that takes the
   other branch;
6. shapes stored into program state, printed, or driving a Python loop give eager's results and
   eager's state afterwards, with no eager runs (whether sizes are specialised is left open);
7. equal small ints of different origins (a batch size, a config value, a literal) are told
   apart;
8. realistic programs: an MLP and a conv net over batch sizes, a small causal attention block
   over sequence lengths 8..256, batch and sequence length changing independently (at most 3
   monitor runs, none after both changed once), ``.item()`` fed back into arithmetic;
9. ``magpy.explain`` on a compiled callable after a lift mentions "dynamic".

Programs run through ``tests.harness.compile_harness.check_compiled`` (outputs, stdout, arguments and
program state compared with eager after every call, per-call MONITOR/MOCK expectations) with
``backend="eager"`` (bit-exact); a few sweeps also run with ``backend="inductor"`` (allclose;
the long ones are marked slow).
"""
import math
import random
import re
import warnings

import pytest
import torch
from torch import nn

import magpy
from tests.harness.compile_harness import (
    ANY,
    MOCK,
    MONITOR,
    Step,
    after,
    check_compiled,
    fresh_magpy,  # noqa: F401 - autouse fixture: magpy.reset() before each test
    isolated,
)

_UNSET = object()


@pytest.fixture(autouse=True)
def _restore_config():
    """Every test sets ``magpy.config.dynamic`` (and maybe ``cache_size_limit``) itself."""
    saved = {k: getattr(magpy.config, k, _UNSET) for k in ("dynamic", "cache_size_limit", "dynamic_after")}
    yield
    for k, v in saved.items():
        if v is not _UNSET:
            setattr(magpy.config, k, v)


# ============================================================================ helpers

def expected(sizes, mode):
    """Per call of a sweep of ONE changing dimension, what the spec says the call is."""
    assert sizes[0] >= 2, "a sweep starts at a size >= 2 (what 1 -> n lifts is not specified)"
    out, seen = [], []
    for n in sizes:
        if mode is False or n < 2:                 # specialised: a record per size
            out.append(MOCK if n in seen else MONITOR)
        elif mode is True:                         # symbolic from the first call
            assert min(sizes) >= 2
            out.append(MOCK if any(s >= 2 for s in seen) else MONITOR)
        else:                                      # automatic: the second size >= 2 lifts
            big = {s for s in seen if s >= 2}
            out.append(MOCK if n in big or len(big) >= 2 else MONITOR)
        seen.append(n)
    return out


def sized_steps(make_args, sizes, expects):
    """One Step per size; each call gets new values (its own seed)."""
    return [Step(f"size {n}", (lambda s, n=n: make_args(n)), expect=e, seed=i + 1)
            for i, (n, e) in enumerate(zip(sizes, expects))]


def random_sizes(lo, hi, k, seed):
    """``k`` sizes from ``lo..hi`` in random order: ``k - 4`` distinct ones, plus 4 repeats."""
    rng = random.Random(seed)
    picked = rng.sample(range(lo, hi + 1), k - 4)
    sizes = picked + rng.choices(picked, k=4)
    rng.shuffle(sizes)
    return sizes


def module(make):
    def build():
        m = make()
        return m, m
    return build


def function(fn):
    return lambda: (fn, None)


def counts(compiled):
    st = magpy.stats(compiled)
    return st.monitor_runs, st.mock_runs, st.eager_runs


def sweep(build, make_args, sizes, mode, *, backend="eager", fullgraph=True):
    """``check_compiled`` over ``sizes`` with the spec's expectation for ``mode``; then the
    totals: monitor runs as the spec says, every other call a mock run, no eager runs."""
    magpy.config.dynamic = mode
    expects = expected(sizes, mode)
    tol = {} if backend == "eager" else {"rtol": 1e-5, "atol": 1e-5}
    trace = check_compiled(build, sized_steps(make_args, sizes, expects), backend=backend,
                           fullgraph=fullgraph, **tol)
    monitors = expects.count(MONITOR)
    assert counts(trace.compiled) == (monitors, len(sizes) - monitors, 0), magpy.stats(trace.compiled)
    return trace


# ============================================================================ models

def mlp():
    return nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))


def conv_net():
    net = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
                        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 5))
    with torch.no_grad():
        net[1].running_mean.uniform_(-0.5, 0.5)
        net[1].running_var.uniform_(0.5, 2.0)
    return net.eval()


class Block(nn.Module):
    """A tiny causal transformer block: token + position embeddings, 2-head attention, MLP."""

    def __init__(self, mask="tril", vocab=50, dim=32, heads=2, max_len=256):
        super().__init__()
        self.mask, self.heads = mask, heads
        self.tok, self.pos = nn.Embedding(vocab, dim), nn.Embedding(max_len, dim)
        self.ln1, self.ln2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.qkv, self.proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, idx):
        b, t = idx.shape
        h = self.tok(idx) + self.pos(torch.arange(t))
        d = h.shape[-1]
        hd = d // self.heads
        q, k, v = self.qkv(self.ln1(h)).split(d, dim=-1)
        q, k, v = (z.view(b, t, self.heads, hd).transpose(1, 2) for z in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(hd)
        if self.mask == "tril":
            att = att.masked_fill(torch.ones(t, t).tril() == 0, float("-inf"))
        else:
            att = att + torch.triu(torch.full((t, t), float("-inf")), diagonal=1)
        y = (att.softmax(-1) @ v).transpose(1, 2).reshape(b, t, d)
        h = h + self.proj(y)
        return h + self.mlp(self.ln2(h))


SWEEPS = {   # name: (build, sizes -> args, lowest size, highest size)
    "mlp_batch": (module(mlp), lambda n: (torch.randn(n, 16),), 2, 16),
    "conv_batch": (module(conv_net), lambda n: (torch.randn(n, 3, 12, 12),), 2, 16),
    "attention_tril_seq": (module(Block), lambda n: (torch.randint(0, 50, (2, n)),), 8, 256),
    "attention_triu_seq": (module(lambda: Block("triu")), lambda n: (torch.randint(0, 50, (2, n)),), 8, 256),
}


# ============================================================================ 1. the option

def test_option_default_is_automatic():
    assert type(magpy.config)().dynamic is None
    assert magpy.config.dynamic is None
    # Not setting it at all is automatic mode: a batch sweep records twice.
    build, make_args, lo, hi = SWEEPS["mlp_batch"]
    sizes = random_sizes(lo, hi, 12, seed=7)
    trace = check_compiled(build, sized_steps(make_args, sizes, expected(sizes, None)))
    assert counts(trace.compiled) == (2, 10, 0), magpy.stats(trace.compiled)
    for mode in (True, False, None):
        magpy.config.dynamic = mode
        assert magpy.config.dynamic is mode


def test_static_mode_records_every_new_shape():
    sizes = [4, 6, 8, 6, 4, 11, 8]
    assert expected(sizes, False).count(MONITOR) == 4
    sweep(module(mlp), SWEEPS["mlp_batch"][1], sizes, False)


def test_static_mode_over_the_cache_limit_warns_about_dynamic():
    magpy.config.dynamic = False
    magpy.config.cache_size_limit = 3
    torch.manual_seed(0)
    model = mlp()
    fast = magpy.compile(model, backend="eager")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for n in (3, 5, 7, 9, 11):
            x = torch.randn(n, 16)
            assert torch.equal(fast(x), model(x)), f"batch {n}: compiled result differs from eager"
    assert counts(fast) == (3, 0, 2), magpy.stats(fast)
    msgs = [str(w.message) for w in caught
            if issubclass(w.category, UserWarning) and "cache_size_limit" in str(w.message)]
    assert len(msgs) == 1, [str(w.message) for w in caught]
    assert "dynamic" in msgs[0], msgs[0]
    assert "Linear(in_features" not in msgs[0], f"the warning prints the module's repr: {msgs[0]}"


# ============================================================================ 2-3. sweeps

@pytest.mark.parametrize("case", SWEEPS, ids=str)
def test_automatic_sweep_records_twice(case):
    build, make_args, lo, hi = SWEEPS[case]
    sweep(build, make_args, random_sizes(lo, hi, 14, seed=11), None)


@pytest.mark.parametrize("case", SWEEPS, ids=str)
def test_dynamic_true_sweep_records_once(case):
    build, make_args, lo, hi = SWEEPS[case]
    sweep(build, make_args, random_sizes(lo, hi, 10, seed=12), True)


def test_automatic_sizes_one_and_zero_are_specialised():
    sizes = [4, 6, 1, 1, 9, 0, 0, 3, 1, 12, 0]
    assert expected(sizes, None) == [MONITOR, MONITOR, MONITOR, MOCK, MOCK, MONITOR, MOCK, MOCK, MOCK, MOCK,
                                     MOCK]
    sweep(module(mlp), SWEEPS["mlp_batch"][1], sizes, None)


class Scaled(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(4, 5))
        self.register_buffer("shift", torch.randn(5))

    def forward(self, x):
        return x @ self.w + self.shift


def _widen_parameter_and_buffer(m):
    with torch.no_grad():
        m.w.data = torch.randn(4, 6)         # the same Parameter object, a new shape
        m.shift.data = torch.randn(6)


def test_dynamic_true_keeps_parameters_and_buffers_static():
    magpy.config.dynamic = True

    def x(n):
        return lambda s: (torch.randn(n, 4),)

    trace = check_compiled(module(Scaled), [
        Step("batch 3", x(3), expect=MONITOR), Step("batch 7", x(7), expect=MOCK, seed=1),
        Step("batch 2", x(2), expect=MOCK, seed=2),
        after(_widen_parameter_and_buffer, args=x(5), expect=MONITOR, name="a parameter's shape changed"),
        Step("batch 9, wide", x(9), expect=MOCK, seed=3), Step("batch 5, wide", x(5), expect=MOCK, seed=4),
    ])
    assert counts(trace.compiled) == (2, 4, 0)


# ============================================================================ 4. shape arithmetic

def _unpack_view(x):                 # x: (n, 3, 4)
    b, t, c = x.shape
    return x.view(b, t * c).cumsum(-1)


def _size0_reshape(x):               # x: (n, 3, 4)
    return x.reshape(x.size(0), -1) * 2


def _divide_by_last_dim(x):          # x: (3, n)
    return x / x.shape[-1] + x.shape[-1]


def _mean_by_len(x):                 # x: (n, 5)
    return x.sum(0) / len(x)


def _view_batch_rest(x):             # x: (n, 2, 3)
    b = x.shape[0]
    return x.view(b, -1).softmax(-1)


def _heads_reshape(x):               # x: (2, n, 8): the sequence length changes
    b, t, c = x.shape
    h = 2
    return x.reshape(b, t, h, c // h).transpose(1, 2).contiguous() * 3


class HeadDim(nn.Module):            # x: (2, 3, 2n): the model dimension changes
    heads = 2

    def forward(self, x):
        b, t, d = x.shape
        hd = d // self.heads
        return x.view(b, t, self.heads, hd).sum(-1) / hd


def _tril_mask(x):                   # x: (2, n, 4)
    t = x.shape[1]
    mask = torch.ones(t, t).tril()
    return (x @ x.transpose(-1, -2)).masked_fill(mask == 0, float("-inf")).softmax(-1)


def _arange_positions(x):            # x: (2, n, 3)
    t = x.shape[1]
    return x + torch.arange(t).unsqueeze(-1) * 0.5


def _new_zeros_padding(x):           # x: (n, 3)
    b = x.shape[0]
    return torch.cat([x, x.new_zeros(b, 4)], dim=1)


def _first_half(x):                  # x: (2, n)
    t = x.shape[1]
    return x[:, : t // 2] * 3


class ClassToken(nn.Module):         # x: (n, 3, 4)
    def __init__(self):
        super().__init__()
        self.cls = nn.Parameter(torch.randn(1, 1, 4))

    def forward(self, x):
        b = x.shape[0]
        return torch.cat([self.cls.expand(b, -1, -1), x], dim=1)


def _zeros_of_tuple(x):              # x: (n, 5, 2)
    b, t = x.shape[:2]
    return torch.zeros((b, t)) + x.sum(-1)


def _shape_tuple_star(x):            # x: (n, 3, 8)
    h = 2
    d = x.shape[-1] // h
    return x.view((*x.shape[:-1], h, d)).transpose(-1, -2)


IDIOMS = {   # name: (build, size -> args)
    "unpack_shape_view": (function(_unpack_view), lambda n: (torch.randn(n, 3, 4),)),
    "size0_reshape": (function(_size0_reshape), lambda n: (torch.randn(n, 3, 4),)),
    "shape_minus1_arith": (function(_divide_by_last_dim), lambda n: (torch.randn(3, n),)),
    "len_mean": (function(_mean_by_len), lambda n: (torch.randn(n, 5),)),
    "view_b_minus1": (function(_view_batch_rest), lambda n: (torch.randn(n, 2, 3),)),
    "reshape_heads_seq": (function(_heads_reshape), lambda n: (torch.randn(2, n, 8),)),
    "d_floordiv_heads": (module(HeadDim), lambda n: (torch.randn(2, 3, 2 * n),)),
    "ones_tril_mask": (function(_tril_mask), lambda n: (torch.randn(2, n, 4),)),
    "arange_positions": (function(_arange_positions), lambda n: (torch.randn(2, n, 3),)),
    "new_zeros": (function(_new_zeros_padding), lambda n: (torch.randn(n, 3),)),
    # 2n: half a length of 2 or 3 is 1, which torch specialises (a record of its own).
    "slice_half": (function(_first_half), lambda n: (torch.randn(2, 2 * n),)),
    "expand_cls_token": (module(ClassToken), lambda n: (torch.randn(n, 3, 4),)),
    "zeros_tuple": (function(_zeros_of_tuple), lambda n: (torch.randn(n, 5, 2),)),
    "star_shape_tuple": (function(_shape_tuple_star), lambda n: (torch.randn(n, 3, 8),)),
}

IDIOM_SIZES = [5, 8, 3, 12, 8, 2, 7]


@pytest.mark.parametrize("mode", [None, True], ids=["automatic", "dynamic_true"])
@pytest.mark.parametrize("idiom", IDIOMS, ids=str)
def test_shape_arithmetic_needs_no_new_recording(idiom, mode):
    build, make_args = IDIOMS[idiom]
    sweep(build, make_args, IDIOM_SIZES, mode)


# ============================================================================ 5. control flow on a shape

def _branch_on_batch(x):
    if x.shape[0] > 8:
        return x + 100
    return x * 2


@pytest.mark.parametrize("mode", [None, True], ids=["automatic", "dynamic_true"])
def test_branch_on_shape_stays_guarded(mode):
    magpy.config.dynamic = mode
    sizes = [4, 5, 6, 12, 13, 8, 9, 6, 16, 2, 12]
    if mode is None:   # 4: specialised; 5: lifts (b <= 8); 12: the other branch, lifted
        expects = [MONITOR, MONITOR, MOCK, MONITOR] + [MOCK] * 7
    else:              # 4: symbolic (b <= 8); 12: the other branch
        expects = [MONITOR, MOCK, MOCK, MONITOR] + [MOCK] * 7
    steps = sized_steps(lambda n: (torch.randn(n, 3),), sizes, expects)
    trace = check_compiled(function(_branch_on_batch), steps)
    for (res_e, res_c), n in zip(trace.results, sizes):     # both branches really ran
        assert torch.equal(res_c, res_e) and bool((res_c > 50).all()) == (n > 8)
    assert counts(trace.compiled) == (expects.count(MONITOR), len(sizes) - expects.count(MONITOR), 0)


# ============================================================================ 6. shapes into state

class RowLoop(nn.Module):
    def forward(self, x):
        rows = []
        for i in range(x.size(0)):
            rows.append(x[i] * (i + 1))
        return torch.stack(rows)


class LastBatch(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(3, 3)
        self.last_batch = None

    def forward(self, x):
        self.last_batch = x.shape[0]
        return self.lin(x) * 2


class AppendBatch(nn.Module):
    def __init__(self):
        super().__init__()
        self.results = []

    def forward(self, x):
        b, c = x.shape
        self.results.append(b)
        self.results.append((b // 2, b * c))
        return x.relu()


class PrintBatch(nn.Module):
    def forward(self, x):
        print("batch", x.shape[0], "shape", x.shape, "area", x.size(0) * x.size(1))
        return x.tanh()


STATEFUL = {"row_loop": RowLoop, "last_batch_attribute": LastBatch, "append_to_list": AppendBatch,
            "print_shape": PrintBatch}


@pytest.mark.parametrize("mode", [None, True], ids=["automatic", "dynamic_true"])
@pytest.mark.parametrize("case", STATEFUL, ids=str)
def test_shapes_into_state_and_prints_are_eagers(case, mode):
    # Correctness only: a record per size or a symbolic one are both fine; never eager.
    magpy.config.dynamic = mode
    sizes = [3, 5, 3, 7, 2, 5, 6]
    trace = check_compiled(module(STATEFUL[case]),
                           sized_steps(lambda n: (torch.randn(n, 3),), sizes, [ANY] * len(sizes)),
                           fullgraph=False)
    assert magpy.stats(trace.compiled).eager_runs == 0


# ============================================================================ 7. equal small ints

class SmallInts(nn.Module):
    """The batch (4 at first), ``self.heads = 4`` and a literal 4 all reach ``view``."""

    def __init__(self):
        super().__init__()
        self.heads = 4
        self.proj = nn.Linear(8, 8)

    def forward(self, x):            # x: (b, 16, 8)
        b = x.shape[0]
        q = self.proj(x).view(b, self.heads, 4, 8)
        q = q.transpose(1, 2).reshape(b, 4, self.heads * 8)
        out = q.view(b * 4, self.heads, 8).sum(-1)
        return out, torch.full((self.heads, 4), b), x.new_zeros(b, self.heads) + 4


@pytest.mark.parametrize("mode", [None, True], ids=["automatic", "dynamic_true"])
def test_equal_small_ints_are_told_apart(mode):
    sweep(module(SmallInts), lambda n: (torch.randn(n, 16, 8),), [4, 6, 4, 9, 2, 5, 4], mode)


# ============================================================================ 8. two dims, .item()

def _both_change_at_once():
    return [(2, 16), (4, 40), (3, 8), (2, 16), (5, 33), (4, 40)]


def _one_at_a_time():
    return [(2, 16), (2, 24), (2, 9), (3, 24), (5, 60), (2, 16), (6, 17)]


def _random_pairs():
    rng = random.Random(5)
    return [(2, 16)] + [(rng.randint(2, 6), rng.randint(8, 64)) for _ in range(11)]


PAIRS = [_both_change_at_once, _one_at_a_time, _random_pairs]


@pytest.mark.parametrize("pairs", PAIRS, ids=lambda f: f.__name__)
def test_batch_and_sequence_change_independently(pairs):
    magpy.config.dynamic = None
    pairs = pairs()
    expects, bs, ts = [], set(), set()
    for b, t in pairs:
        expects.append(MONITOR if not bs else MOCK if len(bs) >= 2 and len(ts) >= 2 else ANY)
        bs.add(b)
        ts.add(t)
    assert len(bs) >= 2 and len(ts) >= 2
    steps = [Step(f"batch {b}, length {t}", (lambda s, b=b, t=t: (torch.randint(0, 50, (b, t)),)),
                  expect=e, seed=i + 1) for i, ((b, t), e) in enumerate(zip(pairs, expects))]
    trace = check_compiled(module(Block), steps)
    st = magpy.stats(trace.compiled)
    assert 2 <= st.monitor_runs <= 3 and st.eager_runs == 0, st


def _item_feedback(x):
    n = x.sum().item()
    return x * n + 1


@pytest.mark.parametrize("mode", [None, True], ids=["automatic", "dynamic_true"])
def test_item_fed_back_into_arithmetic(mode):
    # Correctness only (the .item() is an eager step): shapes and values change every call.
    magpy.config.dynamic = mode
    sizes = [3, 5, 3, 8, 2, 5, 11]
    steps = sized_steps(lambda n: (torch.randn(n, 2),), sizes, [None] * len(sizes))
    check_compiled(function(_item_feedback), steps, fullgraph=False)


# ---------------------------------------------------------------------------- .item() ints
# A small int an eager step returns (``n = t.item()`` of an integer tensor, ``int(t)``) is a
# graph input (a 0-d int64 tensor) when the program only moves it and uses it as an operand
# of floating tensor arithmetic: a new value reuses the record.  Every other use keeps the
# value checked: a new value records again.

def _int_operand(x, counts):
    n = counts.sum().item()
    return x * n + 1, x.sum() / n


def _int_through_calls(x, counts):
    def scale(a, m):
        return a - m
    n = int(counts.max())
    k = n
    return scale(x, k) * 2


def _int_returned(x, counts):
    n = counts.sum().item()
    return x * n, n


def _int_steers(x, counts):
    n = counts.sum().item()
    return x * n if n > 3 else x - n


def _int_sizes(x, counts):
    n = counts.sum().item()
    return x[:n] * n


def _int_stored(x, counts):
    n = counts.sum().item()
    _int_stored.last = n
    return x * n


def _int_in_closure(x, counts):
    n = counts.sum().item()
    return (lambda: x * n)()


def _int_computed(x, counts):
    n = counts.sum().item()
    return x * (n + 1)


def _int_in_list(x, counts):
    n = counts.sum().item()
    return [x * n, n]


def _int_via_locals(x, counts):
    n = counts.sum().item()
    return x * locals()["n"]


INT_USES = [(_int_operand, True), (_int_through_calls, True), (_int_returned, False), (_int_steers, False),
            (_int_sizes, False), (_int_stored, False), (_int_in_closure, False), (_int_computed, False),
            (_int_in_list, False), (_int_via_locals, False)]


@pytest.mark.parametrize("program, lifted", INT_USES, ids=[f.__name__[1:] for f, _ in INT_USES])
def test_item_int_is_a_graph_input_only_where_tensor_arithmetic_uses_it(program, lifted):
    magpy.config.dynamic = None
    values = [2, 3, 2, 5, 7, 1, 0, 4, 7]
    steps = [Step(f"count {v}", (lambda s, v=v: (torch.randn(10, 3), torch.tensor([v, 0]))), seed=i + 1,
                  expect=MONITOR if i == 0 else MOCK if lifted or v in values[:i] else MONITOR)
             for i, v in enumerate(values)]
    trace = check_compiled(function(program), steps, fullgraph=False)
    assert counts(trace.compiled) == ((1, 8, 0) if lifted else (7, 2, 0)), magpy.stats(trace.compiled)


def test_large_item_ints_are_graph_inputs_too():
    magpy.config.dynamic = None
    steps = [Step(f"count {v}", (lambda s, v=v: (torch.randn(4, 3), torch.tensor([v, 0]))), seed=i + 1,
                  expect=MONITOR if i == 0 else MOCK) for i, v in enumerate([300, 2, 1000, 300, 5])]
    trace = check_compiled(function(_int_operand), steps, fullgraph=False)
    assert counts(trace.compiled) == (1, 4, 0), magpy.stats(trace.compiled)


def _int_after_effect(x, counts, acc):
    acc.add_(1)    # an input updated in place: a failed check can no longer miss
    n = counts.sum().item()
    return x * n + acc


def test_item_int_after_an_effect_stays_checked():
    magpy.config.dynamic = None
    values = [2, 3, 2, 5]
    steps = [Step(f"count {v}", (lambda s, v=v: (torch.randn(4, 3), torch.tensor([v, 0]), torch.zeros(3))),
                  seed=i + 1) for i, v in enumerate(values)]
    trace = check_compiled(function(_int_after_effect), steps, fullgraph=False)
    assert magpy.stats(trace.compiled).eager_runs == 0, magpy.stats(trace.compiled)


def test_item_int_operand_under_inductor():
    magpy.config.dynamic = None
    steps = [Step(f"count {v}", (lambda s, v=v: (torch.randn(10, 3), torch.tensor([v, 0]))), seed=i + 1,
                  expect=MONITOR if i == 0 else MOCK) for i, v in enumerate([2, 3, 9, 2])]
    trace = check_compiled(function(_int_operand), steps, backend="inductor", fullgraph=False,
                           rtol=1e-5, atol=1e-5)
    assert counts(trace.compiled) == (1, 3, 0), magpy.stats(trace.compiled)


# A 0-d float tensor times a lifted number keeps its own dtype (two 0-d tensors would give
# float64): the number is cast to the tensor's dtype in the graph.

def _zero_d_times_item(x):
    return x.sum() * x.mean().item()


def _zero_d_times_argument(x, s):
    return x.sum() * s, (x.sum() - s).double()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16], ids=str)
def test_zero_d_tensor_times_a_lifted_number_keeps_its_dtype(dtype):
    magpy.config.dynamic = True
    steps = [Step(f"call {i}", (lambda s: (torch.randn(5).to(dtype),)), seed=i + 1, expect=ANY)
             for i in range(3)]
    check_compiled(function(_zero_d_times_item), steps, fullgraph=False)
    steps = [Step(f"scale {v}", (lambda s, v=v: (torch.randn(5).to(dtype), v)), seed=i + 1,
                  expect=MONITOR if i == 0 else ANY) for i, v in enumerate([0.5, 1.25, 3.0])]
    trace = check_compiled(function(_zero_d_times_argument), steps)
    assert magpy.stats(trace.compiled).eager_runs == 0


# ============================================================================ 9. explain

def test_explain_mentions_the_lifted_dimension():
    magpy.config.dynamic = None
    torch.manual_seed(0)
    model = mlp()
    fast = magpy.compile(model, backend="eager")
    for n in (4, 6, 9):
        x = torch.randn(n, 16)
        assert torch.equal(fast(x), model(x))
    assert counts(fast) == (2, 1, 0), magpy.stats(fast)
    explanation = magpy.explain(fast, torch.randn(7, 16))
    text = str(explanation)
    assert "dynamic" in text, text
    # The guarded input shows its symbol, and the full dump has the shape check's source.
    assert re.search(r"Tensor float32 \[s\d+, 16\]", text), text
    assert "--- shape check (SHAPES) ---\ndef shapes(t0) -> bool:" in explanation.full()


# ============================================================================ inductor

INDUCTOR = [
    pytest.param("mlp_batch", [4, 7, 12, 7, 3], id="mlp_batch_small"),
    pytest.param("mlp_batch", random_sizes(2, 16, 14, seed=21), id="mlp_batch_sweep", marks=pytest.mark.slow),
    pytest.param("attention_tril_seq", random_sizes(8, 256, 12, seed=22), id="attention_seq_sweep",
                 marks=pytest.mark.slow),
]


@pytest.mark.parametrize("case, sizes", INDUCTOR)
def test_inductor_automatic_sweep(case, sizes):
    build, make_args, _, _ = SWEEPS[case]
    sweep(build, make_args, sizes, None, backend="inductor")


# ----------------------------------------------------------------------------- float arguments

def _temperature(logits, temperature):
    return (logits / temperature).softmax(-1)


def _temperature_kw(logits, *, temperature=1.0):
    return logits * temperature - temperature


def _steering(x, scale):
    if scale > 1.0:          # steers the program: guarded by the outcome (a record per side)
        return x * scale
    return x - scale


def _python_arithmetic(x, t):
    return x * (t + 1.0)     # computed in Python first: the mock computes it from each call's t


class _Softmax(nn.Module):
    def forward(self, logits, temperature):
        return (logits / temperature).softmax(-1)


class _Sampler(nn.Module):
    """``temperature`` by keyword through two modules' ``__call__`` (whose ``*args, **kwargs``
    are closure cells of ``_call_impl``)."""

    def __init__(self):
        super().__init__()
        self.proj, self.head = nn.Linear(10, 10), _Softmax()

    def forward(self, x, temperature=1.0):
        return self.head(self.proj(x), temperature=temperature)


_SAMPLER = _Sampler()


def _through_modules(x, *, temperature):
    with torch.no_grad():
        return _SAMPLER(x, temperature=temperature)


FLOATS = {   # name: (program, how it is called with float t, recordings for TEMPERATURES automatic)
    "operand": (_temperature, lambda x, t: ((x, t), {}), 2),
    "keyword": (_temperature_kw, lambda x, t: ((x,), {"temperature": t}), 2),
    "module_keyword": (_through_modules, lambda x, t: ((x,), {"temperature": t}), 2),
    "steering": (_steering, lambda x, t: ((x, t), {}), 3),
    "python_arithmetic": (_python_arithmetic, lambda x, t: ((x, t), {}), 2),
}
TEMPERATURES = [0.7, 0.9, 1.3, 0.5, 2.0, 0.9, 1.1, -0.0, 0.0, float("inf")]


@pytest.mark.parametrize("mode", [None, True, False], ids=["automatic", "dynamic_true", "static"])
@pytest.mark.parametrize("name", FLOATS)
def test_float_argument_that_changes_every_call(name, mode):
    """A float argument that is only an operand of tensor arithmetic, directly or through
    Python arithmetic with constants, becomes a graph input: a new value reuses the record.
    One the program compares with a constant is guarded by the outcome (a record per side of
    the branch: ``dynamic=True`` lifts it from the first call).  Every result still equals
    eager's (signed zeros and infinities included, whose NaNs must match too)."""
    magpy.config.dynamic = mode
    magpy.config.cache_size_limit = 16   # the guarded programs record once per distinct value
    program, call, recordings = FLOATS[name]
    fast = magpy.compile(program, backend="eager")
    x = torch.randn(4, 10)
    for t in TEMPERATURES:
        args, kwargs = call(x, t)
        got, want = fast(*args, **kwargs), program(*args, **kwargs)
        torch.testing.assert_close(got, want, rtol=0, atol=0, equal_nan=True, msg=f"{name}, t={t}")
    stats = magpy.stats(fast)
    assert stats.eager_runs == 0
    distinct = len({(t, math.copysign(1, t)) for t in TEMPERATURES})
    if mode is False:
        assert stats.monitor_runs == distinct
    else:
        assert stats.monitor_runs == (_SIDES.get(name, 1) if mode is True else recordings)


_SIDES = {"steering": 2}   # (records under dynamic=True: one per side of its branch)


class _Decay:
    def __init__(self):
        self.scales = {"a": 1.0, "b": 2.0}
        self.last = None


def _decayed(decay, x):
    y = x * decay.scales["a"] - decay.scales["b"]
    for key, s in zip(list(decay.scales), [decay.scales[k] * 0.5 for k in decay.scales]):
        decay.scales[key] = s
    decay.last = [decay.scales[k] for k in decay.scales]
    return y


def test_lifted_floats_written_back_computed_in_python():
    """Dict items read as floats that change are lifted; what the program computes from them
    in Python (``s * 0.5``), walks with ``zip`` and stores back (into the dict, into a new
    list on an attribute) the mock computes from each call's values: one record serves
    every value, and the state stays eager's bit for bit."""
    fast = magpy.compile(_decayed, backend="eager")
    mine, theirs = _Decay(), _Decay()
    for _ in range(8):
        x = torch.randn(3)
        torch.testing.assert_close(fast(mine, x), _decayed(theirs, x), rtol=0, atol=0)
        assert mine.scales == theirs.scales and mine.last == theirs.last
    stats = magpy.stats(fast)
    assert stats.eager_runs == 0 and stats.monitor_runs == 2 and stats.mock_runs == 6, stats


def test_backend_without_symbolic_sizes_records_per_size_and_says_so():
    """TorchScript compiles fixed sizes: a record per batch size, results still eager's, and
    ``explain`` says why."""
    torch.manual_seed(0)
    model = mlp()
    fast = magpy.compile(model, backend="torchscript")
    for n in (4, 6, 9, 6):
        x = torch.randn(n, 16)
        torch.testing.assert_close(fast(x), model(x))
    assert counts(fast) == (3, 1, 0), magpy.stats(fast)
    assert "'torchscript' compiles fixed sizes" in str(magpy.explain(fast, torch.randn(5, 16)))


@pytest.mark.parametrize("after, recordings", [(2, [1, 1, 0, 0, 0, 0]), (3, [1, 1, 1, 0, 0, 0])])
def test_lifting_threshold_is_configurable(after, recordings):
    """``magpy.config.dynamic_after``: the distinct size at which a dimension is lifted."""
    magpy.config.dynamic_after = after
    torch.manual_seed(0)
    model = mlp()
    fast = magpy.compile(model, backend="eager")
    runs = []
    for n in (4, 6, 8, 9, 4, 6):
        before = magpy.stats(fast).monitor_runs
        x = torch.randn(n, 16)
        assert torch.equal(fast(x), model(x))
        runs.append(magpy.stats(fast).monitor_runs - before)
    assert runs == recordings


def test_config_dynamic_values_are_checked():
    with pytest.raises(ValueError, match="dynamic must be None"):
        magpy.config.dynamic = "auto"
    with pytest.raises(ValueError, match="dynamic_after must be an int >= 2"):
        magpy.config.dynamic_after = 1


class _Embed(nn.Module):
    """The first operation on the lifted input makes the tensor whose size the program reads
    (``h.shape[1]``): that operation must already run on the twins."""

    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(50, 8)

    def forward(self, ids):
        h = self.emb(ids)
        t = h.shape[1]
        return h * torch.arange(t).view(1, t, 1) + t


def test_size_of_the_first_result_of_a_lifted_input_is_symbolic():
    torch.manual_seed(0)
    model = _Embed()
    fast = magpy.compile(model, backend="eager")
    for n in (16, 12, 10, 14, 9):
        ids = torch.randint(0, 50, (2, n))
        assert torch.equal(fast(ids), model(ids)), n
    assert counts(fast) == (2, 3, 0), magpy.stats(fast)


class _Tempered(nn.Module):
    """A float attribute the program changes between calls (``model.temperature = t``), one
    it branches on, and one that never changes."""

    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(6, 6)
        self.temperature, self.threshold, self.eps = 1.0, 0.5, 1e-5

    def forward(self, x):
        y = self.proj(x) / self.temperature + self.eps
        return y.relu() if self.threshold > 0.6 else y.softmax(-1)


@pytest.mark.parametrize("changing", ["temperature", "threshold"])
def test_float_attribute_that_changes_between_calls(changing):
    """A changing float attribute that only scales tensors becomes a graph input (2
    recordings); one that picks a branch is guarded by the branch it takes (0.5, then 0.7
    lifted on the other side, then 0.3 back on the first: 3 recordings).  Both give eager's
    results, and the constant ``eps`` stays a constant."""
    torch.manual_seed(0)
    eager, model = _Tempered(), _Tempered()
    model.load_state_dict(eager.state_dict())
    fast = magpy.compile(model, backend="eager")
    values = [0.5, 0.7, 0.9, 0.3, 0.7, 1.1]
    x = torch.randn(3, 6)
    with torch.no_grad():
        for v in values:
            setattr(eager, changing, v)
            setattr(model, changing, v)
            assert torch.equal(fast(x), eager(x)), v
    recordings = 2 if changing == "temperature" else 3
    assert counts(fast) == (recordings, len(values) - recordings, 0), magpy.stats(fast)


# ----------------------------------------------------------------------------- int arguments

def _int_sizes(x, n):
    return x[:, :n] * n + torch.arange(n)


def _int_steers(x, n):
    if n > 4:
        return x * 2
    return x + n


def _int_loop(x, n):
    for i in range(n):
        x = x + i
    return x


INTS = {   # name: (program, recordings for INT_VALUES in automatic mode; None: one per value)
    "sizes": (_int_sizes, 2),
    "steers": (_int_steers, 3),   # the first value, then one record per side of n > 4
    "loop": (_int_loop, None),    # range(n) unrolls: n is specialised
}
INT_VALUES = [3, 5, 7, 2, 9, 5, 4, 10]


@pytest.mark.parametrize("mode", [None, True], ids=["automatic", "dynamic_true"])
@pytest.mark.parametrize("name", INTS)
def test_int_argument_that_changes_every_call(name, mode):
    """An int argument that changes becomes a symbol: a size of the graph's operations
    (slices, ``arange``, arithmetic with tensors) serves every value; a branch on it keeps its
    outcome in the guard; a loop over ``range(n)`` specialises it.  ``dynamic=True`` lifts it
    from the first call (one recording less)."""
    magpy.config.dynamic = mode
    program, recordings = INTS[name]
    fast = magpy.compile(program, backend="eager")
    x = torch.randn(3, 10)
    for n in INT_VALUES:
        assert torch.equal(fast(x, n), program(x, n)), (name, n)
    stats = magpy.stats(fast)
    assert stats.eager_runs == 0
    # (sizes: n == 10 is the whole row, which torch's slicing tells apart: one more record)
    expected = len(set(INT_VALUES)) if recordings is None else recordings + (name == "sizes") - (mode is True)
    assert stats.monitor_runs == expected, stats


@pytest.mark.parametrize("mode", [None, True], ids=["automatic", "dynamic_true"])
def test_int_beyond_int64_stays_a_guarded_value(mode):
    # A symbol is an int64: a bigger int that changes records per value (torch's shape
    # environment cannot hold it, and failed on logging it).
    magpy.config.dynamic = mode
    fast = magpy.compile(lambda x, n: x + n % 7, backend="eager")
    x = torch.randn(3)
    for n in (10 ** 30, 10 ** 30 + 1, 10 ** 5000, 2 ** 63):
        assert torch.equal(fast(x, n), x + n % 7)
    assert magpy.stats(fast).eager_runs == 0 and magpy.stats(fast).monitor_runs == 4


# ----------------------------------------------------------------------------- sizes into state

class _Counter:
    def __init__(self, length=0):
        self.length, self.calls = length, 0


class _Accumulates(nn.Module):
    """Stores sizes into an object from outside (a cache's length, a call counter): the mock
    writes them from the new sizes (and the old values, lifted once they changed)."""

    def __init__(self, state):
        super().__init__()
        self.state = state

    def forward(self, x):
        self.state.length += x.shape[1]
        self.state.calls += 1
        self.state.last = x.shape[0]
        return x * self.state.length


@pytest.mark.parametrize("start", [0, 6], ids=["from_zero", "equal_first_size"])
def test_sizes_stored_into_state_are_written_by_the_mock(start):
    eager_state, state = _Counter(start), _Counter(start)
    eager, fast = _Accumulates(eager_state), magpy.compile(_Accumulates(state), backend="eager")
    shapes = [(6, 3), (4, 5), (6, 7), (3, 2), (8, 9), (6, 5), (5, 4)]
    for shape in shapes:
        x = torch.randn(*shape)
        assert torch.equal(fast(x), eager(x)), shape
        assert vars(state) == vars(eager_state), (shape, vars(state), vars(eager_state))
    stats = magpy.stats(fast)
    assert stats.eager_runs == 0
    # First call; then the sizes, the old length and the call count lifted at once (a counter
    # read from program state is lifted from its second value, 1, on).
    assert stats.monitor_runs == 2, stats


def _reads_globals(x):
    return x * SCALE + x[:, :STEPS].sum(-1, keepdim=True)   # noqa: F821 - the isolated namespace's


def test_numbers_read_from_globals_that_change():
    """Module-level numbers the program reads (``SCALE``, ``STEPS``) that change between
    calls are lifted like attributes: a float operand is a graph input, an int a symbol."""
    program, ns = isolated(_reads_globals, SCALE=1.0, STEPS=3)
    fast = magpy.compile(program, backend="eager")
    x = torch.randn(3, 10)
    for scale, steps in ((1.0, 3), (0.5, 4), (0.7, 5), (2.0, 2), (0.1, 7), (0.5, 4)):
        ns["SCALE"], ns["STEPS"] = scale, steps
        assert torch.equal(fast(x), program(x)), (scale, steps)
    assert counts(fast) == (2, 4, 0), magpy.stats(fast)
