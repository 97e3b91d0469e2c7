"""The garbage collector's window (``magpy.capture.collector``): while magpy records or compiles, full
collections do not walk the objects that existed before (frozen, or, where objects are frozen
already, generation 2's threshold out of reach); the window ends with the last recording or
compile, and what became garbage meanwhile is collected after it.

Collections are forced (``gc.collect()``) so the tests do not depend on when CPython would
collect by itself.  Every compiled result is compared with eager's.
"""
import gc
import threading
import weakref

import pytest
import torch
from torch import nn

import magpy
from magpy.capture import collector
from tests.harness.compile_harness import fresh_magpy  # noqa: F401 - autouse fixture


class Cycle:
    """An object in a reference cycle: only the collector frees it."""

    def __init__(self):
        self.me = self


@pytest.fixture(autouse=True)
def collector_as_it_was():
    before = gc.get_threshold(), gc.isenabled()
    yield
    assert (gc.get_threshold(), gc.isenabled()) == before and not collector.is_open(), "a window was left open"


@pytest.fixture
def nothing_frozen():
    """A heap with nothing frozen, where the window freezes (CPython 3.12 moves its immortal
    objects to the permanent generation at each collection: unfrozen here for the test)."""
    gc.unfreeze()


def test_within_the_window_older_objects_are_frozen_and_their_garbage_waits_for_its_end(nothing_frozen):
    old = Cycle()
    gone = weakref.ref(old)
    with collector.full_collections_deferred():
        assert gc.get_freeze_count() > 0
        young = Cycle()
        young_gone = weakref.ref(young)
        del old, young
        gc.collect()
        assert young_gone() is None       # made in the window: collected as usual
        assert gone() is not None         # older: not walked while the window is open
    gc.collect()
    assert gone() is None                 # nothing lost


def test_where_objects_are_frozen_already_the_window_keeps_them_and_raises_the_threshold():
    gc.freeze()   # (a program freezing its heap, e.g. before forking workers)
    try:
        frozen, thresholds = gc.get_freeze_count(), gc.get_threshold()
        # Still frozen (an unfreeze would leave none): a few frozen objects may be freed
        # meanwhile by other threads of the test run (a background compile's), and CPython
        # 3.12's collections also move immortal objects there.
        kept = frozen * 0.99
        with collector.full_collections_deferred():
            assert gc.get_threshold() == (*thresholds[:2], collector.OUT_OF_REACH)
            assert gc.get_freeze_count() >= kept
        assert gc.get_freeze_count() >= kept and gc.get_threshold() == thresholds
    finally:
        gc.unfreeze()


def test_the_window_ends_with_the_last_of_overlapping_recordings_and_compiles():
    inside, leave = threading.Event(), threading.Event()

    def compiling():
        with collector.full_collections_deferred():
            inside.set()
            assert leave.wait(10)

    worker = threading.Thread(target=compiling)
    with collector.full_collections_deferred():
        worker.start()
        assert inside.wait(10)
    assert collector.is_open()                  # the other thread's window is still open
    leave.set()
    worker.join(10)
    assert not collector.is_open()


def test_an_exception_in_the_window_ends_it():
    with pytest.raises(RuntimeError):
        with collector.full_collections_deferred():
            raise RuntimeError("boom")
    assert not collector.is_open()


def test_a_disabled_collector_is_left_alone():
    gc.disable()
    try:
        before = gc.get_freeze_count(), gc.get_threshold()
        with collector.full_collections_deferred():
            assert (gc.get_freeze_count(), gc.get_threshold()) == before
        assert not gc.isenabled()
    finally:
        gc.enable()


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(8, 8), nn.Linear(8, 4)

    def forward(self, x):
        return self.b(torch.relu(self.a(x))).softmax(-1)


class Collecting(Net):
    """Collects fully in the middle of its forward (a break: an eager step of every call)."""

    def forward(self, x):
        h = torch.relu(self.a(x))
        gc.collect()
        return self.b(h).softmax(-1)


def test_a_recording_runs_within_the_window():
    seen: list[bool] = []   # whether the window was open at the start of each full collection

    def note(phase, info):
        if phase == "start" and info["generation"] == 2:
            seen.append(collector.is_open())

    net = Collecting()
    c = magpy.compile(net, backend="eager")
    x, fresh = torch.randn(3, 8), torch.randn(3, 8)
    want = [net(x), net(x), net(fresh)]
    gc.callbacks.append(note)
    try:
        got = [c(x), c(x), c(fresh)]
    finally:
        gc.callbacks.remove(note)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w)
    assert seen == [True, False, False]   # the recording; the replays have no window
    stats = magpy.stats(c)
    assert (stats.monitor_runs, stats.mock_runs) == (1, 2)


@pytest.mark.parametrize("background", [False, True], ids=["foreground", "background"])
def test_a_graph_compiles_within_the_window(background):
    magpy.config.background_compile = background
    open_while_compiling = []

    def backend(gm, example_inputs):
        open_while_compiling.append(collector.is_open())
        return gm.forward

    net = Net()
    c = magpy.compile(net, backend=backend)
    x = torch.randn(3, 8)
    for _ in range(3):
        torch.testing.assert_close(c(x), net(x))
    assert magpy.synchronize(60)
    torch.testing.assert_close(c(x), net(x))
    assert open_while_compiling == [True]
    assert not collector.is_open()
