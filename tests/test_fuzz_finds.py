"""What the differential fuzzer (tests/fuzz) found, each as its minimal program: the calls
make a first call (a recording), repeated calls with the same objects (the mock), new values,
and state changed between calls, and every call is compared with eager on its result or
exception, the program's state, grad mode and torch's RNG state (tests.fuzz.runner.check).

Each is marked xfail(strict=True) while its cause is open: when a fix lands the mark comes off
and the test must pass.  Finds that are issue 33's own examples (A..L) are tested with those.
"""
import textwrap

import pytest

import magpy
from tests.fuzz.generator import generate
from tests.fuzz.program import WORLD
from tests.fuzz.runner import check

PRELUDE = """\
import io
import torch
torch.manual_seed(0)
GEN = torch.Generator().manual_seed(1)
LOG = io.StringIO()


class O:
    pass


"""
FIRST = "X = torch.randn(4, 4, generator=GEN); ARGS = (X,)"
SAME = "ARGS = (X,)"
NEW = "X = torch.randn(4, 4, generator=GEN); ARGS = (X,)"


def like_eager(src: str, calls: list, target: str = "f", prelude: str = PRELUDE) -> None:
    """Every call of ``src``'s ``target`` through magpy as eager, or the difference."""
    outcome = check(prelude + textwrap.dedent(src), calls, target)
    assert outcome.kind == "ok", outcome.describe()


def test_unused_random_draw_advances_the_generator():
    like_eager("""
        def f(x):
            torch.nn.functional.dropout(x, 0.5, training=True)
            torch.rand(3)
            return x * 2
    """, [FIRST, SAME, NEW, SAME])


def test_update_after_random_item_check_applied_once():
    like_eager("""
        M = O()
        M.scale = 1.0
        M.flag = True

        def f(x):
            M.flag = not M.flag
            k = int(torch.randint(0, 3, ()).item())
            M.scale = M.scale * 0.5
            return x + k
    """, [FIRST, SAME, SAME, SAME, SAME, NEW])


def test_caught_raise_on_tensor_data_before_a_print():
    like_eager("""
        def f(x):
            try:
                if x[0, 0] > 0:
                    raise ValueError("x")
            except ValueError:
                pass
            print("done", file=LOG)
            return x * 2
    """, [FIRST, SAME, NEW, NEW, NEW])


def test_in_place_update_after_an_int_check():
    like_eager("""
        def f(x):
            h = x * 1.0
            x.add_(0.5)
            k = int(x.sum() > 0)
            h.add_(1)
    """, [FIRST, SAME, "X.mul_(-1); ARGS = (X,)", "X.mul_(-1); ARGS = (X,)", SAME])


def test_failed_mock_does_not_draw_twice():
    like_eager("""
        def f(x):
            h = x * 1.0
            k = int(torch.randint(0, 3, ()).item())
            h.add_(1)
    """, [FIRST, "torch.manual_seed(0); ARGS = (X,)", SAME, SAME])


def test_store_after_a_resume_point_is_not_the_points():
    # (campaign seeds 100147, 102284, 103114, 103157, 103495, 106022, 106183, 106869, 109061,
    # 109202) A counter stored after an ``.item()`` check: once lifted, the continuation wrote
    # back the count it had when recorded (a store the program made only after the point),
    # and the rest of the call counted from there.  A continuation writes back only the
    # stores made before its point.
    like_eager("""
        M = O()
        M.count = 0
        M.scale = 1.0
        T = torch.ones(4)

        def f(x):
            T.mul_(0.9)   # (an effect before the check: a failed check resumes there)
            M.scale = M.scale * 0.9
            k = int(torch.randint(0, 3, ()).item())
            M.count += 1
            return x + k
    """, [FIRST] + [SAME] * 7)


@pytest.mark.xfail(strict=True, reason="a global float written from .item() and read back: from the second "
                                       "record on the result uses a stale value of it")
def test_global_float_written_from_item_then_read():
    new3 = "X = torch.randn(3, 4, generator=GEN); ARGS = (X,)"
    like_eager("""
        Z = 0.0

        def f(x):
            global Z
            Z = x.sum().item()
            return x - Z
    """, [new3, new3, new3, new3, new3])


def test_zero_division_path_is_checked():
    calls = [f"X = torch.full((2,), {v}); ARGS = (X,)" for v in (0.3, 1.0, 1.0, 0.2, 2.0)]
    like_eager("""
        LST = [0]

        def f(x):
            acc = 0.0
            try:
                acc = 1.0 / int(x.sum())
                LST[0] = LST[0] + 1
            except ZeroDivisionError:
                pass
            return acc
    """, calls)


def test_grad_mode_after_a_print_inside_no_grad():
    like_eager("""
        def f(x):
            h = x * 1.0
            with torch.no_grad():
                print("hi", file=LOG)
    """, [FIRST, SAME, SAME, NEW])


def test_grad_mode_at_a_resume_after_a_no_grad_step():
    # (fuzz seed 20624, the sample's last failure) The mock switched grad mode off for an
    # .item() step inside no_grad; a check after effects failed later and the monitor resumed
    # there with grad mode still off, which the call left off.  A resume point now puts its
    # own modes back.  (The program as generated: smaller ones took other paths.)
    program = generate(20624)
    outcome = check(program.source(), program.calls, program.target)
    assert outcome.kind == "ok", outcome.describe()


def test_caught_zero_division_in_a_replayed_step():
    # The fuzzer's world (tests.fuzz.program.WORLD) seeds torch: the dropout masks are those it found.
    like_eager("""
        M = Net()

        def f(x, s, n, name):
            h = x * 1.0
            acc = 0.0
            k = 0
            L = [h]
            h = torch.nn.functional.dropout(h, 0.5, training=True)
            try:
                acc = 1.0 / int(h.sum())
                h = h + torch.rand(4)
            except ZeroDivisionError:
                pass
    """, ["X = torch.randn(2, 4, generator=GEN); ARGS = (X, 0.5, 1, 'pos')", "ARGS = (X, 0.5, 1, 'pos')"],
        prelude=WORLD + "\n\n")


ARM_UPDATES = {
    "subscript": """
        def f(x):
            h = x * 2
            if x.mean() < 0:
                h[:, 0] += 3.0
            return h
    """,
    "view": """
        def f(x):
            h = x * 2
            if x.mean() < 0:
                v = h[0]
                v += 3.0
            return h
    """,
    "global-slice": """
        T = torch.zeros(4)

        def f(x):
            if x.mean() < 0:
                T[1:] += 3.0
            return x
    """,
    "while-body": """
        def f(x):
            h = x * 2
            i = 0
            while i < 2 and h.sum() < 0:
                h[:, 0] += 1.0
                i += 1
            return h
    """,
}


TWICE = ("an augmented assignment to a view of a tensor from outside a tensor-if arm (or while body) is "
         "applied twice on the recording call itself: the fork that tries to record a cond runs the in-place "
         "+= before it stops, then the real run does it again")


@pytest.mark.xfail(strict=True, reason=TWICE)
@pytest.mark.parametrize("name", sorted(ARM_UPDATES))
def test_augmented_update_of_an_outer_view_in_a_tensor_branch(name):
    neg, pos = "X = -torch.ones(3, 4); ARGS = (X,)", "X = torch.ones(3, 4); ARGS = (X,)"
    like_eager(ARM_UPDATES[name], [neg, SAME, neg, pos, neg])


def test_view_of_contiguous_by_size_in_a_tensor_if_arm():
    neg, pos = "X = -torch.ones(4, 4); ARGS = (X,)", "X = torch.ones(4, 4); ARGS = (X,)"
    like_eager("""
        def f(x):
            h = x * 1.0
            if x.mean() < 0:
                h = h.contiguous().view(x.shape[0], -1)
            return h
    """, [neg, SAME, pos, "X = -torch.ones(2, 4); ARGS = (X,)"])


@pytest.mark.xfail(strict=True, reason=TWICE + " (here: a range loop whose length changed, recorded again)")
def test_augmented_subscript_store_in_a_loop_of_changing_length():
    like_eager("""
        def f(x):
            h = x * 1.0
            for i in range(x.shape[0]):
                h[:, 0] += 1.0
            return h
    """, [f"X = torch.ones({b}, 4); ARGS = (X,)" for b in (2, 5, 3, 5, 2)])


def test_break_on_tensor_data_after_a_global_in_place_update_compiles():
    # codegen's rebuild of the continuation's stack failed ('int' object has no attribute
    # 'items') and the callable ran eagerly from then on: ~7% of the fuzzed programs.
    rows = "X = torch.tensor([[-1.0] * 4, [1.0] * 4]); ARGS = (X,)"
    like_eager("""
        T = torch.zeros(4)

        def f(x):
            for row in x:
                if row.sum() > 0:
                    break
                T.add_(1)
    """, [rows, SAME, "X = torch.tensor([[-1.0] * 4, [-1.0] * 4, [1.0] * 4]); ARGS = (X,)"])


def test_failed_mock_of_a_later_record():
    # A later record whose mock failed was dropped, then promoted by its old index: an
    # IndexError reached the program as its own.
    like_eager("""
        M = O()
        M.flag = True

        def f(x):
            h = x * 1.0
            M.flag = not M.flag
            k = int(torch.randint(0, 3, ()).item())
            h.clamp_(-5, 5)
    """, [FIRST, SAME, SAME, SAME, SAME, SAME])


# The wrong results of a 10,000-program campaign after this session's fixes (python -m
# tests.fuzz --n 10000 --seed 100000: 9,925 ok, 22 wrong, 0 crashes, 53 fallbacks), with the
# campaign's settings (background compile on).  Open: mostly lifted floats and counts written
# back by a resume after a draw and a check in a while loop (M.scale, M.count), and results
# after such resumes.
CAMPAIGN_WRONG = [100691, 100991, 102649, 103063, 106540, 107123, 107127, 108684, 109051, 109414, 109845]
# (fixed: 100147, 102284, 103114, 103157, 103495, 106022, 106183, 106869, 109061, 109202 by
# test_store_after_a_resume_point_is_not_the_points's fix)
# (104465: by the fixes of "a tensor of unknown origin" below)
CAMPAIGN_FIXED = [100147, 102284, 103114, 103157, 103495, 104465, 106022, 106183, 106869, 109061, 109202]


def campaign_program_like_eager(seed: int, kinds: tuple = ("ok", "fallback")) -> None:
    magpy.config.background_compile = True   # as the campaign ran it (the fixture puts it back)
    program = generate(seed)
    outcome = check(program.source(), program.calls, program.target)
    assert outcome.kind in kinds, outcome.describe()


@pytest.mark.magpy_rerecords   # (the calls change what guards read on purpose)
@pytest.mark.parametrize("seed", CAMPAIGN_FIXED)
def test_fixed_campaign_program_matches_eager(seed):
    campaign_program_like_eager(seed)


@pytest.mark.magpy_rerecords
# Not strict: 3.12 and 3.13 compile a few of them otherwise, and in the whole suite seed
# 109845 once gave eager's result (what ran before in the process decides some of them: the
# campaign runs each from a fresh world, as here); `pytest -rxX` lists which still differ.
@pytest.mark.xfail(strict=False, reason="open: a wrong result or state of the 10,000-program campaign")
@pytest.mark.parametrize("seed", CAMPAIGN_WRONG)
def test_campaign_program_matches_eager(seed):
    campaign_program_like_eager(seed)


# ------------------------------------------------------------------ "a tensor of unknown origin"
# 53 programs of the 10,000-program campaign fell back to eager with "the call leaves behind a
# tensor of unknown origin" (codegen): each cause below with its smallest program.

def compiles_like_eager(src: str, calls: list, target: str = "f"):
    """``like_eager``, and no call ran eagerly: each was recorded or replayed; the stats."""
    made = []

    def compiler(fn):
        made.append(magpy.compile(fn, backend="eager"))
        return made[-1]
    outcome = check(PRELUDE + textwrap.dedent(src), calls, target, compiler=compiler)
    assert outcome.kind == "ok", outcome.describe()
    stats = magpy.stats(made[0])
    assert stats.eager_runs == 0 and stats.records and stats.graph_count, stats
    return stats


def rows(*signs) -> str:
    """A call on rows of ones times ``signs`` (which rows a tensor ``if`` takes)."""
    return f"X = torch.tensor({list(signs)}, dtype=torch.float)[:, None] * torch.ones(4); ARGS = (X,)"


def test_rows_of_a_loop_at_a_continuations_resume_point():
    # A continuation's resume point took the loop's iterator (rebuilt by the parent's mock),
    # whose rows, the parent's graph outputs, its RefGraph never saw.
    compiles_like_eager("""
        B = torch.zeros(4)

        def f(x):
            h = x * 1.0
            with torch.no_grad():
                B.add_(h.mean())
            for row in x:
                if row.sum() > 0:
                    break
            return h
    """, [rows(1, -1, 1), rows(-1, -1, 1), rows(-1, -1, 1), rows(-1, 1, -1), rows(1, 1, 1)])


def test_variable_a_loop_left_at_a_resume_point():
    # A for loop recorded as one operator (its length changed) leaves its variable as the
    # real run's tensor, which a resume point after it took (a continuation may read it):
    # the loop is unrolled instead, as where the program reads it after the loop.
    compiles_like_eager("""
        B = torch.ones(4)

        def f(x):
            h = x * 1.0
            B.mul_(0.5)
            for row in x:
                pass
            if bool((h > 0).any()):
                return row * 2
            return h
    """, [f"X = {sign}torch.ones({n}, 4); ARGS = (X,)" for sign, n in
          (("", 2), ("-", 3), ("", 3), ("-", 4), ("", 4), ("-", 2), ("", 3))])


def test_arm_giving_back_a_tensor_an_earlier_if_passed_through():
    # ``h.contiguous()`` in an arm gives back the tensor the first if passed through: the arm
    # was taken as its maker, then forgotten when it ended.
    compiles_like_eager("""
        def f(x):
            h = x * 1.0
            if x[0].sum() > 0:
                h = h * 2
            if x[1].sum() > 0:
                h = h.contiguous().view(4, -1)
            return h
    """, [rows(-1, 1, 1, 1), rows(-1, 1, 1, 1), rows(1, 1, 1, 1), rows(-1, -1, 1, 1), rows(1, -1, 1, 1)])


def test_arm_giving_back_a_tensor_in_a_loop_of_ifs():
    compiles_like_eager("""
        def f(x):
            h = x * 1.0
            for row in x:
                if row.sum() > 0:
                    continue
                h = h.contiguous().view(x.shape[0], -1)
            return h
    """, [rows(1, 1, 1, 1), rows(1, 1, 1, 1), rows(-1, 1, -1, 1), rows(-1, -1, -1, -1)])


def test_if_output_at_a_resume_point():
    # The tensor an if made at a resume point after an effect: the mock picks it or the tensor
    # the other arm passed through by the if's predicate, which the point did not know.
    compiles_like_eager("""
        def f(x):
            h = x * 1.0
            x.add_(0.5)
            if x.sum() > 0:
                h = h * 2
            acc = bool(h.min() < 0)
            return h, acc
    """, [rows(1, 1), rows(1, 1), rows(-1, -1), rows(1, -1), rows(-1, 1)])


def test_tensor_an_if_passed_through_at_a_resume_point():
    # A silent wrong result: the resume point took the tensor this run's arm passed through,
    # not the if's output, so a call whose if went the other way resumed with the old tensor.
    compiles_like_eager("""
        G = [0]

        def f(x):
            h = x * 1.0
            x.add_(0.5)
            if x.sum() > 0:
                pass
            else:
                h = h * -2
            if bool(h.mean() > 1):
                G[0] += 1
            return h + 1
    """, [rows(1, 1), rows(0.2, 0.2), rows(-3, -3), rows(-0.5, -0.5), rows(-3, -3)])


# Programs of the campaign that fell back to eager with "a tensor of unknown origin" (53), one
# or two per cause above: they compile now.
CAMPAIGN_UNKNOWN_ORIGIN = [100146, 101219, 102456, 100464, 105716, 107616, 108244]


@pytest.mark.magpy_rerecords
@pytest.mark.parametrize("seed", CAMPAIGN_UNKNOWN_ORIGIN)
def test_campaign_program_of_unknown_origin_compiles(seed):
    campaign_program_like_eager(seed, kinds=("ok",))
