"""A record as data, and the record again in another process.

What a record is made of travels three ways: its generated source (guard, fast guard, mock,
shape check, diagnosis) as text; the constants that source names, each a reference to the
program's object (magpy.api.persist.refs), a plain value, or a recipe for one of magpy's own
checking objects (``codegen.source.RECIPES``: a tensor guard's metadata, the global state a
guard checks); its operator graphs as data (magpy.api.persist.graphs), compiled again by the
backend when loaded (from the backend's artifacts the file holds: magpy.api.persist.kernels).

A record that cannot travel (a constant found by no reference, a continuation's resume
point, a graph input of symbolic sizes under a compiling backend) raises
:class:`~magpy.api.persist.values.Unsaveable`; the others travel without it, and a call it
would have covered records again in the loading process.
"""
from __future__ import annotations

import dataclasses
import re

from magpy.api.persist.graphs import decode_graph, encode_graph, example_inputs
from magpy.api.persist.refs import Referrer, Resolver
from magpy.api.persist.values import Unsaveable, decode, encode, is_plain
from magpy.errors import GraphBreak
from magpy.records.codegen.guard import NAMESPACE as GUARD_NAMESPACE
from magpy.records.codegen.mock import NAMESPACE as MOCK_NAMESPACE
from magpy.records.codegen.source import MAKERS, RECIPES
from magpy.records.eager_steps import Step
from magpy.records.record import SAVED_FIELDS, Record, restore

_STANDARD = {**GUARD_NAMESPACE, **MOCK_NAMESPACE}
_LINKED = re.compile(r"GRAPH\d+|SHAPES")   # put in place when the record is made (record.restore)


def encode_record(rec: Record, referrer: Referrer, backend: str) -> dict:
    """``rec`` as data (module docstring); :class:`Unsaveable` if it cannot travel."""
    if rec.continuations or any(step.resume is not None for step in rec.steps):
        raise Unsaveable("the record resumes the monitor where a check fails (continuations)")
    if rec.shape_source is not None and backend != "eager":
        raise Unsaveable("the record's graphs have symbolic sizes")
    ns = rec.guard.__globals__
    return {"sources": {"guard": rec.guard_source, "fast": rec.fast_source, "mock": rec.mock_source,
                        "shapes": rec.shape_source, "diagnose": getattr(rec.diagnose, "source", "")},
            "constants": _constants(ns, referrer),
            "fields": {name: encode(getattr(rec, name)) for name in SAVED_FIELDS},
            "graphs": [encode_graph(gm, referrer) for gm in rec.graphs],
            "graph_break": _break(rec.graph_break),
            "breaks": [_break(b) for b in rec.breaks],
            "steps": [_step(s, referrer) for s in rec.steps]}


def decode_record(data: dict, find: Resolver, backend) -> Record:
    """The record :func:`encode_record` wrote, its constants found among this process's
    objects by ``find`` and its graphs compiled by ``backend``;
    :class:`~magpy.api.persist.refs.Mismatch` where a constant is not found."""
    ns = {"__builtins__": __builtins__, **_STANDARD}
    for name, kind, value in data["constants"]:
        if kind == "recipe":
            recipe = decode(value)
            ns[name] = MAKERS[recipe[0]](*recipe[1:])
        else:
            ns[name] = find(value)
    graphs = [decode_graph(g, find) for g in data["graphs"]]
    fields = {name: decode(v) for name, v in data["fields"].items()}
    return restore(data["sources"], fields, ns, graphs, [example_inputs(gm) for gm in graphs], backend,
                   breaks=tuple(map(_unbreak, data["breaks"])), graph_break=_unbreak(data["graph_break"]),
                   steps=tuple(_unstep(s, find) for s in data["steps"]))


def _constants(ns: dict, referrer: Referrer) -> list:
    """``[name, "recipe" or "ref", data]`` for each constant the record's source names."""
    recipes = ns.get(RECIPES, {})
    out = []
    for name, value in ns.items():
        if name in ("__builtins__", RECIPES) or _LINKED.fullmatch(name) or \
                (name in _STANDARD and _STANDARD[name] is value) or getattr(value, "__globals__", None) is ns:
            continue   # (the namespace's own, the record's linked graphs, functions its source defines)
        if name in recipes:
            out.append([name, "recipe", encode(recipes[name])])
        else:
            try:
                out.append([name, "ref", referrer.refer(value)])
            except Unsaveable as e:
                raise Unsaveable(f"constant {name} of its guard or mock: {e}") from None
    return out


def _break(b: GraphBreak | None):
    return None if b is None else encode(dataclasses.astuple(b))


def _unbreak(d) -> GraphBreak | None:
    return None if d is None else GraphBreak(*decode(d))


def _step(step: Step, referrer: Referrer) -> dict:
    """What a loaded record keeps of an eager step (its code is in the mock): what explain
    and a raising step's traceback show."""
    try:
        fn = referrer.refer(step.fn) if step.fn is not None else None
    except Unsaveable:
        fn = None
    args = tuple(a if is_plain(a) else repr(a) for a in step.args) if step.kind != "call" else ()
    return {"kind": step.kind, "before": step.before, "var": step.var, "fn": fn, "args": encode(args),
            "where": _break(step.where), "undoable": step.undoable, "at": encode(step.at),
            "modes": encode(step.modes)}


def _unstep(d: dict, find: Resolver) -> Step:
    return Step(d["kind"], d["before"], d["var"], None if d["fn"] is None else find(d["fn"]),
                decode(d["args"]), None, _unbreak(d["where"]), d["undoable"], decode(d["at"]),
                modes=decode(d["modes"]))
