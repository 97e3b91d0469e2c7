"""The fast guard (dict-version stamps) against changes it must not miss.

Every case calls several times *before* the change, so the change hits a stamped fast guard,
then calls again after it.  ``conftest.py`` turns on ``magpy.config.verify_fast_guard``, so a
fast guard that passes where the full guard fails raises; the differential harness catches
stale results besides.
"""
from __future__ import annotations

import collections

import torch
import torch.nn as nn

import magpy
from tests.harness.compile_harness import (  # noqa: F401
    MOCK,
    after,
    again,
    check_compiled,
    fresh_magpy,
    globals_view,
    isolated,
    standard,
)

x8 = lambda s: (torch.randn(2, 8),)   # noqa: E731


def warm(n=2):
    return [again() for _ in range(n)]


def make_seq():
    torch.manual_seed(0)
    seq = nn.Sequential(collections.OrderedDict(
        a=nn.Linear(8, 8), b=nn.Tanh(), c=nn.Linear(8, 8))).eval()
    return seq, seq


class Pipeline:
    def __init__(self):
        self.stages = collections.OrderedDict(a=nn.Linear(8, 8), b=nn.Tanh(), c=nn.Linear(8, 8))


def run_pipeline(p, x):
    for stage in p.stages.values():
        x = stage(x)
    return x


def test_ordered_dict_reordered_with_move_to_end():
    # OrderedDict.move_to_end changes the order without a new dict version.
    def build():
        torch.manual_seed(0)
        p = Pipeline()
        return (lambda x: run_pipeline(p, x)), p

    def reorder(p):
        p.stages.move_to_end("a")

    check_compiled(build, standard(x8) + warm() + [after(reorder), again()])


def test_submodule_replaced_and_hook_added():
    def replace(seq):
        seq.b = nn.ReLU()

    def hook(seq):
        seq.c.register_forward_hook(lambda m, i, o: o * 2)

    check_compiled(make_seq, standard(x8) + warm() + [after(replace), again(), after(hook), again()],
                   observe=lambda seq: seq.state_dict())   # each copy has its own hook function


def test_parameter_requires_grad_flipped_in_place():
    # Same tensor object, new metadata: only TensorGuards can see it.
    def freeze(seq):
        seq.a.weight.requires_grad_(False)

    check_compiled(make_seq, standard(x8) + warm() + [after(freeze), again()])


class Holder:
    def __init__(self):
        self.scale = 2.0
        self.items = [nn.Linear(8, 8), 3.0]


def holder_forward(h, x):
    return h.items[0](x) * h.scale + h.items[1]


def make_holder():
    torch.manual_seed(0)
    h = Holder()
    return (lambda x: holder_forward(h, x)), h


def test_object_dict_replaced_wholesale():
    def replace_dict(h):
        d = dict(h.__dict__)
        d["scale"] = 5.0
        h.__dict__ = d

    check_compiled(make_holder, standard(x8) + warm() + [after(replace_dict), again()])


def test_list_item_replaced_in_place():
    def new_layer(h):
        torch.manual_seed(1)
        h.items[0] = nn.Linear(8, 8)

    def new_number(h):
        h.items[1] = 4.0

    check_compiled(make_holder, standard(x8) + warm() + [after(new_layer), again(),
                                                         after(new_number), again()])


class Scaled:
    factor = 2.0

    def __init__(self):
        self.lin = nn.Linear(8, 8)


def scaled_forward(obj, x):
    return obj.lin(x) * obj.factor


def make_scaled():
    torch.manual_seed(0)
    obj = Scaled()
    return (lambda x: scaled_forward(obj, x)), {"obj": obj, "cls": Scaled}


def test_class_attribute_changed():
    def set_factor(s):
        s["cls"].factor = 3.0

    def restore(s):
        s["cls"].factor = 2.0

    try:
        check_compiled(make_scaled, standard(x8) + warm() + [after(set_factor), again()],
                       observe=lambda s: s["cls"].factor)
    finally:
        restore({"cls": Scaled})


COUNTER = 0
SCALE = 2.0


def scripted(x):
    return x * SCALE


def test_script_globals_written_between_calls():
    # A script writes its globals all the time: unrelated writes must still hit the record.
    def unrelated(s):
        s["COUNTER"] = s.get("COUNTER", 0) + 1

    def related(s):
        s["SCALE"] = 3.0

    check_compiled(lambda: isolated(scripted), standard(x8) + warm() + [
        after(unrelated, expect=MOCK), again(), after(related), again()],
        observe=globals_view("SCALE", "COUNTER"))


class Recorder(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(8, 8)
        self.seen = []

    def forward(self, x):
        self.seen = [x.shape[0]]   # a new list in the module's own dict on every call
        return self.lin(x)


def test_state_written_every_call_stops_stamping():
    def build():
        torch.manual_seed(0)
        m = Recorder()
        return m, m

    trace = check_compiled(build, standard(x8) + warm(6), expect_records=1)
    rec = trace.compiled._magpy_cache.records[0]
    assert rec.fast is None   # every fast guard missed: it is no longer stamped


def test_fast_guard_is_used_and_skips_unchanged_dicts():
    seq, _ = make_seq()
    compiled = magpy.compile(seq, backend="eager")
    x = torch.randn(2, 8)
    for _ in range(3):
        compiled(x)
    rec = compiled._magpy_cache.records[0]
    assert rec.fast is not None and rec.misses == 0
    assert "DICT_VERSION" in rec.fast_source
    # The fast guard loads nothing from the modules: only the argument is loaded.
    body = rec.fast_source.split("def fast", 1)[1]
    assert "_modules" not in body and "_parameters" not in body


class Doubler:
    def __init__(self):
        self.k = 2.0

    def apply(self, x):
        return x * self.k


class Tripler(Doubler):
    def apply(self, x):
        return x * self.k * 1.5


def test_object_class_reassigned():
    def build():
        obj = Doubler()
        return (lambda x: obj.apply(x)), obj

    def swap_class(obj):
        obj.__class__ = Tripler

    check_compiled(build, standard(x8) + warm() + [after(swap_class), again()])
