"""Guard and mock generation (paper §4.2, Algorithm 1) as readable Python source.

``generate`` turns one recording (its RefGraph, operator recorder and result) into the
source of a guard (``codegen.guard``), its fast form, and a mock (``codegen.mock``, with
its values from ``codegen.values`` and its in-place updates from ``codegen.updates``),
together with the namespace they run in.  Which nodes are guarded and which are updated is
decided by the RefGraph; code generation only writes code.
"""
from __future__ import annotations

from dataclasses import dataclass

from magpy.capture.refgraph.graph import RefGraph
from magpy.records.codegen.guard import NAMESPACE as GUARD_NAMESPACE
from magpy.records.codegen.guard import GuardWriter
from magpy.records.codegen.mock import MISS, MockCommitError, MockWriter, StepRaised
from magpy.records.codegen.mock import NAMESPACE as MOCK_NAMESPACE
from magpy.records.codegen.source import Names, compile_source, same_value, var
from magpy.training import backward

__all__ = ["MISS", "Generated", "MockCommitError", "StepRaised", "compile_source", "generate", "same_value"]


@dataclass
class Generated:
    """Generated source (guard, fast guard, mock) and the namespace it runs in, which
    refers to the compiled graphs as ``GRAPH0``, ``GRAPH1`` ... (:meth:`link`)."""

    guard_source: str
    mock_source: str | None
    namespace: dict
    fast_source: str | None = None   # defines make_fast(*stamp) -> fast guard; None: no fast path
    diagnose_source: str = ""        # defines diagnose(args, kwargs) -> why the guard fails, in words
    lone_result: bool = False        # the return value is a new object the final state holds nowhere else

    def link(self, graphs: list) -> None:
        """Give the mock its compiled graphs (None for a piece without operations)."""
        for i, graph in enumerate(graphs):
            if graph is not None:
                self.relink(i, graph)

    def relink(self, i: int, graph) -> None:
        """Make the mock call ``graph`` for piece ``i`` from now on (magpy.backends.autopilot's choice)."""
        self.namespace[f"GRAPH{i}"] = graph


def generate(refgraph: RefGraph, recording, result, nargs: int, kwarg_names: tuple,
             broken: bool, params: list[str]) -> Generated:
    """Guard source (and, unless the run broke, mock source) for one recording run.

    ``recording`` is the run's :class:`magpy.records.segments.Capture`: its operator recorder
    (pieces, their inputs and outputs), eager steps, dynamic values and new functions.
    """
    ns = {"__builtins__": __builtins__, **GUARD_NAMESPACE, **MOCK_NAMESPACE}
    names = Names(ns)
    refs = set()
    lone = False
    body = []
    if not broken:
        writer = MockWriter(refgraph, recording, names, refs)
        body = writer.write(result)
        lone = writer.lone(result)
        for point in recording.points:
            body += writer.continuation(point)
    inputs = recording.recorder.env_inputs() if not broken else []
    env = [var(sn) for sn in inputs]
    env += [var(refgraph.nodes[i]) for i in sorted(refs) if var(refgraph.nodes[i]) not in env]
    needed = refs | {sn.id for sn in inputs}
    writer = GuardWriter(refgraph, names, needed, recording.entry_state, recording.lifted,
                         backward.buffered_grads(recording.recorder))
    guard_lines, fast_lines = writer.write(nargs, kwarg_names, env)
    diagnose = "\n".join(writer.write_diagnose(nargs, kwarg_names, params))
    mock_src = None
    if not broken:
        head = ["def mock(env):"]
        if env:
            head.append(f"    {', '.join(env)}{',' if len(env) == 1 else ''} = env")
        mock_src = "\n".join(head + body)
    fast_src = None if fast_lines is None else "\n".join(fast_lines)
    return Generated("\n".join(guard_lines), mock_src, ns, fast_src, diagnose, lone)
