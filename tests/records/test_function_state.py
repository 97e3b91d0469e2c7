"""A function's own attributes are program state: ``step.calls += 1``, ``fn.scale``, a cache
kept on a function.  The program reads them (the guard checks what it read) and writes them
(the mock writes them again), and its caller changes them between calls.  (A function was
guarded by its identity only: a changed attribute replayed the record's value, and a store
into one was left out of the mock.)
"""
import types

import torch

from tests.harness.compile_harness import (
    ANY,
    MOCK,
    MONITOR,
    after,
    again,
    check_compiled,
    first,
    fresh_magpy,  # noqa: F401 - autouse fixture: magpy.reset() before each test
    standard,
)


def x34(state=None):
    return (torch.randn(3, 4),)


def _with_function(**attributes):
    """A function made per copy of the program (the copies must not share its attributes)."""
    def helper():
        return None
    helper.__dict__.update(attributes)
    return helper


def _attributes(s):
    return dict(vars(s["helper"]))


def test_function_attribute_read_and_changed_from_outside():
    def build():
        helper = _with_function(scale=2.0, dim=1)

        def f(x):
            return x.sum(helper.dim) * helper.scale
        return f, {"helper": helper}

    def set_dim(s):
        s["helper"].dim = 0

    def set_scale(s):
        s["helper"].scale = 5.0
    check_compiled(build, standard(x34) + [
        after(set_dim, expect=MONITOR), again(), after(set_scale, expect=ANY), again()],
        observe=_attributes)


def test_function_attribute_written_by_the_program():
    # A tensor and a flag kept on the function: the mock stores them as the program did,
    # whatever the caller left there.
    def build():
        helper = _with_function(last=None, seen=False)

        def f(x):
            helper.last = x.sum()
            helper.seen = True
            return x + 1
        return f, {"helper": helper}

    def reset(s):
        s["helper"].seen = False
        s["helper"].last = None
    check_compiled(build, standard(x34) + [after(reset, expect=MOCK), again()], observe=_attributes)


def test_function_attribute_counted_by_the_program():
    # The count is lifted from its second value and written back from it: two records.
    def build():
        helper = _with_function(calls=0)

        def f(x):
            helper.calls = helper.calls + 1
            return x + 1
        return f, {"helper": helper}
    check_compiled(build, [first(x34), again(expect=MONITOR), again(expect=MOCK), again(expect=MOCK)],
                   observe=_attributes, expect_records=2)


def test_function_attribute_deleted_by_the_program():
    def build():
        helper = _with_function(pending=torch.ones(4))

        def f(x):
            if hasattr(helper, "pending"):
                x = x + helper.pending
                del helper.pending
            return x * 2
        return f, {"helper": helper}

    def restore(s):
        s["helper"].pending = torch.full((4,), 3.0)
    check_compiled(build, [first(x34), again(expect=MONITOR), again(), after(restore, expect=MOCK),
                           again()], observe=_attributes)


def test_attribute_of_a_held_methods_function():
    # ``holder.fn.tag`` of a bound method is its function's attribute.
    def build():
        class Local:
            def reduce(self, x):
                return x.sum(1)
        Local.reduce.tag = 1.0
        holder = types.SimpleNamespace(fn=Local().reduce)

        def f(x):
            return holder.fn(x) * holder.fn.tag
        return f, {"holder": holder}

    def retag(s):
        s["holder"].fn.__func__.tag = 4.0
    check_compiled(build, standard(x34) + [after(retag, expect=ANY), again()],
                   observe=lambda s: vars(s["holder"].fn.__func__))
