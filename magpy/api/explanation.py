"""``magpy.explain``: what magpy makes of one call, summarised before the generated code.

A call runs once under the monitor (its effects happen, as with ``torch._dynamo.explain``) and
the record it gives is described in words: graphs and their operations, graph breaks and why,
the guarded inputs, the symbolic sizes, the control flow operators, the segments of the mock
and, for a compiled callable, its autopilot trials.
"""
from __future__ import annotations

import copy
import dataclasses
from typing import Any, Callable

from magpy.api import explain_html
from magpy.api.compiled import original_of, roots_of
from magpy.backends import registry
from magpy.errors import GraphBreak
from magpy.graphs.dynamic import Lifting
from magpy.records.record import capture


@dataclasses.dataclass(repr=False)
class Explanation:
    """What magpy makes of one call.  ``print()`` it for a summary (graphs, operations, breaks,
    the guarded inputs in words, the segments); :meth:`full` adds the generated code."""

    graph_count: int
    graphs: list
    op_count: int
    break_reasons: list
    guard_source: str
    mock_source: str | None
    result: Any = None
    fast_guard_source: str | None = None   # the stamped fast form of the guard (see codegen)
    eager: bool = False                    # the call runs eagerly (the last break ended recording)
    segments: list = dataclasses.field(default_factory=list)   # the mock's graphs and steps, in order
    inputs: list = dataclasses.field(default_factory=list)     # the guard's checks on the inputs, in words
    # the symbolic sizes, in words (magpy.graphs.dynamic)
    dynamic: list = dataclasses.field(default_factory=list)
    shape_check_source: str | None = None  # the guard's check of the symbolic sizes (SHAPES)
    control_flow: list = dataclasses.field(default_factory=list)   # ifs, loops as operators
    autopilot: list = dataclasses.field(default_factory=list)  # a compiled callable's graph trials, in words
    recompiles: list = dataclasses.field(default_factory=list)  # why a compiled callable recorded again

    def __repr__(self) -> str:
        counts = f"graphs={self.graph_count}, ops={self.op_count}, breaks={len(self.break_reasons)}"
        return f"Explanation({counts}{', eager' * self.eager})"

    def __str__(self) -> str:
        return "\n".join(self.summary())

    def summary(self) -> list[str]:
        """The summary's lines (what ``print`` shows)."""
        out = [f"magpy.explain: {self.graph_count} graph{'s' * (self.graph_count != 1)}, "
               f"{self.op_count} tensor operations, {len(self.break_reasons)} graph breaks"
               + (" (the call runs eagerly)" if self.eager else "")]
        if self.inputs:
            out.append("guarded inputs:")
            out += [f"  {line}" for line in self.inputs]
        if self.dynamic:
            out.append("dynamic sizes:")
            out += [f"  {line}" for line in self.dynamic]
        for i, gm in enumerate(self.graphs):
            out.append(f"graph {i}: {_op_summary(gm)}")
        if self.control_flow:
            out.append("control flow:")
            out += [f"  {line}" for line in self.control_flow]
        for i, b in enumerate(self.break_reasons):
            last = self.eager and i == len(self.break_reasons) - 1
            out.append(f"break ({'ends recording: the call runs eagerly' if last else 'eager step'}): {b}")
        if self.autopilot:
            out.append("compiled graphs (background compile, then compiled vs eager, the faster kept; "
                       "magpy.config.background_compile, autopilot):")
            out += [f"  {line}" for line in self.autopilot]
        if self.recompiles:
            out.append("recompiles (why each recording after the first was made):")
            out += [f"  {i + 2}: {line}" for i, line in enumerate(self.recompiles)]
        if len(self.segments) > 1:
            out.append("segments (what the mock runs, in order):")
            out += [f"  {line}" for line in self.segments]
        sizes = [f"guard {_lines(self.guard_source)} lines"]
        if self.fast_guard_source:
            sizes.append(f"fast guard {_lines(self.fast_guard_source)}")
        if self.mock_source:
            sizes.append(f"mock {_lines(self.mock_source)}")
        out.append(f"generated code: {', '.join(sizes)} (print(explanation.full()) shows it)")
        return out

    def html(self, path=None, title: str = "magpy.explain") -> str:
        """One self-contained HTML page of this explanation (``magpy.api.explain_html``): the call
        as a timeline of graphs and eager steps with the user's lines, each graph's operations
        by kind, the guards in words, a compiled callable's recompile history, the generated
        source.  Written to ``path`` if given; returned either way."""
        page = explain_html.render(self, title)
        if path is not None:
            with open(path, "w", encoding="utf-8") as f:
                f.write(page)
        return page

    def full(self) -> str:
        """The summary, then each graph's code, the guard, the fast guard and the mock."""
        out = self.summary()
        for i, gm in enumerate(self.graphs):
            out.append(f"--- graph {i} ---\n{gm.code.strip()}")
        out.append(f"--- guard ---\n{self.guard_source}")
        if self.shape_check_source:
            out.append(f"--- shape check (SHAPES) ---\n{self.shape_check_source}")
        if self.fast_guard_source:
            out.append(f"--- fast guard ---\n{self.fast_guard_source}")
        if self.mock_source:
            out.append(f"--- mock ---\n{self.mock_source}")
        return "\n".join(out)


def _lines(src: str) -> int:
    return src.count("\n") + 1


def _op_summary(gm) -> str:
    """``52 operations (conv2d 20, batch_norm 20, relu 17, ...)``: the most frequent first."""
    counts: dict[str, int] = {}
    for n in gm.graph.nodes:
        if n.op.startswith("call"):
            name = n.target if isinstance(n.target, str) else getattr(n.target, "__name__", str(n.target))
            counts[name] = counts.get(name, 0) + 1
    top = sorted(counts.items(), key=lambda kv: -kv[1])
    listed = ", ".join(f"{k} {v}" for k, v in top[:6]) + (", ..." if len(top) > 6 else "")
    return f"{sum(counts.values())} operations ({listed})" if counts else "0 operations"


def explain(fn: Callable, *args, **kwargs) -> Explanation:
    """Run ``fn(*args, **kwargs)`` once under the monitor and report what magpy records.

    The call really runs (its side effects happen), as with ``torch._dynamo.explain``.  For
    a compiled callable, the sizes its calls were seen to change are symbolic, as in its
    next record.
    """
    target = original_of(fn)
    if not callable(target):
        raise TypeError(f"magpy.explain needs a callable, got {type(target).__name__}")
    cache = getattr(fn, "_magpy_cache", None)
    lifting = copy.deepcopy(cache.lifting) if cache is not None and cache.lifting is not None else Lifting()
    result, rec = capture(target, args, kwargs, registry.resolve("eager"), roots_of(target), lifting=lifting)
    if rec is None:
        return Explanation(0, [], 0, [GraphBreak("capture failed")], "", None, result)
    graphs = list(rec.graphs)
    breaks = list(rec.breaks) + ([rec.graph_break] if rec.graph_break is not None else [])
    return Explanation(len(graphs), graphs, rec.op_count, breaks, rec.guard_source, rec.mock_source, result,
                       rec.fast_source, rec.graph_break is not None, _segments(rec), list(rec.inputs),
                       list(rec.lifted) + _static_backend(cache), rec.shape_source,
                       control_flow=list(rec.conds), autopilot=_trials(cache),
                       recompiles=list(cache.stats.recompiles) if cache is not None else [])


def _trials(cache) -> list[str]:
    """The trials of a compiled callable's graphs (magpy.backends.autopilot), one line each, and the
    records whose graphs are not compiled yet (magpy.backends.background)."""
    if cache is None:
        return []
    return [line for r, rec in enumerate(cache.records) for line in
            ([f"record {r}: {rec.deferred.describe()}"] if rec.deferred is not None else [])
            + [f"record {r} graph {g}: {trial.describe()}" for g, trial in enumerate(rec.trials)]]


def _static_backend(cache) -> list[str]:
    """What explain says of a compiled callable whose backend cannot take symbolic sizes."""
    if cache is None or cache.lifting is not None:
        return []
    return [f"backend {cache.backend[0]!r} compiles fixed sizes: one record per input size "
            f"(symbolic sizes need one of {', '.join(sorted(registry.SYMBOLIC))})"]


def _segments(rec) -> list[str]:
    """One line per graph and eager step of a record, in the order its mock runs them."""
    lines, graphs = [], iter(range(len(rec.graphs)))
    ran = -1
    for step in (*rec.steps, None):
        before = step.before if step is not None else float("inf")
        # Graphs of the pieces before this step (empty pieces compiled nothing).
        while ran + 1 < len(rec.graphs) and rec.graph_pieces[ran + 1] < before:
            ran = next(graphs)
            ops = sum(n.op.startswith("call") for n in rec.graphs[ran].graph.nodes)
            lines.append(f"graph {ran}: {ops} operations")
        if step is None:
            break
        lines.append(_step_line(step))
    return lines


def _step_line(step) -> str:
    if step.kind == "call":
        name = getattr(step.fn, "__qualname__", None) or type(step.fn).__qualname__
        why = f"  <- {step.where}" if step.where is not None else "  (computed from an eager value)"
        return f"step {step.var} = {name}(...){why}".replace("\n", " ")
    what = {"check": f"check {step.args[0]} == {step.args[1]!r}", "truth": f"check bool({step.args[0]}) is "
            f"{step.args[1]}", "same": f"check {step.args[0]} is {step.args[1]}"}[step.kind]
    if step.resume is not None:
        return f"{what}; if not, resume the monitor at {step.resume.where()}"
    return f"{what}; if not, the call misses this record"
