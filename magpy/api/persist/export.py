"""Deployment without Python: the record of a call that is one graph, as an AOTInductor
package (``.pt2``) that ``torch._inductor.aoti_load_package`` runs, from Python or from C++
(``torch::inductor::AOTIModelPackageLoader``).

The record that covers the example call must be one pure graph: one graph, no eager step,
nothing updated in place or stored, so that its mock is ``out = GRAPH(inputs); return ...``.
Its inputs are the call's tensors or the program's (parameters, buffers: constants of the
package, as the record read them); the package is made by ``torch.export`` of a module that
runs the record's mock on the recorded fx graph, then Inductor's ahead-of-time compile.
"""
from __future__ import annotations

import contextlib

import torch
from torch.utils import _pytree as pytree

from magpy.errors import SaveError


def export(cache, example_args: tuple, example_kwargs: dict, path) -> str:
    """Write the AOTInductor package of the record of ``cache`` (a compiled callable's) that
    covers the example call; the package's path."""
    rec, env = _one_graph_record(cache, example_args, example_kwargs)
    module = _RecordModule(rec, env, example_args, example_kwargs)
    with _running_the_graph(rec):
        program = torch.export.export(module, tuple(example_args), dict(example_kwargs), strict=False)
    return torch._inductor.aoti_compile_and_package(program, package_path=str(path))


def _one_graph_record(cache, args: tuple, kwargs: dict):
    for rec in cache.records:
        env = rec.match(args, kwargs)
        if env is None:
            continue
        if rec.mock is None or len(rec.graphs) != 1 or rec.steps or rec.changed or rec.mutated:
            raise SaveError("magpy.export exports a call whose record is one graph that changes nothing; "
                            f"this call's runs {len(rec.graphs)} graph(s) with {len(rec.steps)} eager step(s)"
                            + (" and changes the program's state" if rec.changed or rec.mutated else ""))
        return rec, env
    raise SaveError("magpy.export: no record of the compiled callable covers the example call (call it with "
                    "those inputs first)")


class _RecordModule(torch.nn.Module):
    """The record's mock over the call's tensors, the program's tensors it read held as
    buffers (constants of the package)."""

    def __init__(self, rec, env: tuple, args: tuple, kwargs: dict):
        super().__init__()
        self.mock = rec.mock
        leaves = [id(x) for x in pytree.tree_leaves((args, kwargs))]
        self.places = []   # per env value: ("input", leaf index) or ("held", name) or ("value", v)
        for i, v in enumerate(env):
            if id(v) in leaves:
                self.places.append(("input", leaves.index(id(v))))
            elif isinstance(v, torch.Tensor):
                self.register_buffer(f"held{i}", v.detach())
                self.places.append(("held", f"held{i}"))
            else:
                self.places.append(("value", v))

    def forward(self, *args, **kwargs):
        leaves = pytree.tree_leaves((args, kwargs))
        env = tuple(leaves[p] if kind == "input" else getattr(self, p) if kind == "held" else p
                    for kind, p in self.places)
        return self.mock(env)


@contextlib.contextmanager
def _running_the_graph(rec):
    """The mock calls the recorded fx graph, not its compiled version, while it is exported."""
    ns = rec.mock.__globals__
    name = f"GRAPH{rec.graph_pieces[0]}"
    compiled = ns[name]
    ns[name] = rec.graphs[0]
    try:
        yield
    finally:
        ns[name] = compiled
