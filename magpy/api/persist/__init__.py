"""Saving a compiled program and loading it in another process (``magpy.save``,
``magpy.load``): its records (guards and mocks as source, operator graphs, the decisions of
their recordings) and the backend's compiled code, so that a call the saved records cover
runs compiled code with no monitor run and, the backend's artifacts found in the file, no
compile (docs/saving.md).

A record travels as data (magpy.api.persist.records): the objects it names as references found
again among the loading process's own (magpy.api.persist.refs), its graphs node by node
(magpy.api.persist.graphs); the backend's artifacts as files (magpy.api.persist.kernels); the whole
in one checked file (magpy.api.persist.archive).  Loading runs the generated code the file
holds, as unpickling does: load only files you trust.
"""
from __future__ import annotations

import dataclasses
import warnings

from magpy.api import compiled as api
from magpy.api.persist import archive, kernels
from magpy.api.persist.records import decode_record, encode_record
from magpy.api.persist.refs import Mismatch, Referrer, Resolver, fingerprint
from magpy.api.persist.values import Unsaveable
from magpy.backends import background
from magpy.capture.monitor.tracebacks import user_stacklevel
from magpy.config import config
from magpy.errors import LoadError, NotSavedWarning, SaveError


@dataclasses.dataclass(frozen=True)
class Saved:
    """What :func:`save` wrote: the file, how many records, and each record left out with why."""

    path: str
    records: int
    left_out: tuple[str, ...]


def save(compiled, path) -> Saved:
    """Write ``compiled`` (a callable ``magpy.compile`` returned) to the file ``path``: every
    record it holds that can travel, and the backend's compiled code (docs/saving.md)."""
    cache = api.cache_of(compiled, "magpy.save")
    name = cache.backend[0]
    if name not in _SAVED_BACKENDS:
        raise SaveError(f"magpy.save saves programs compiled with backend 'eager', 'aot_eager' or "
                        f"'inductor', not {name!r}: compile with one of those")
    background.synchronize()   # (a graph's compile under way in the background: its code in the caches)
    referrer = Referrer(cache.roots)
    records, left_out = [], []
    for i, rec in enumerate(cache.records):
        try:
            records.append(encode_record(rec, referrer, name))
        except Unsaveable as e:
            left_out.append(f"record {i}: {e}")
    if not records:
        why = "; ".join(left_out) or "it has recorded no call yet (call it first)"
        raise SaveError(f"magpy.save has no record of {cache.name()} to save: {why}")
    payload = {"records": records, "artifacts": kernels.collect() if name == "inductor" else None}
    header = {"made_with": archive.made_with(name, cache.fullgraph, [fingerprint(r) for r in cache.roots])}
    archive.write(path, header, payload)
    if left_out:
        warnings.warn(f"magpy.save left {len(left_out)} of {len(cache.records)} records of {cache.name()} "
                      "out (the calls they cover record again when loaded): " + "; ".join(left_out),
                      NotSavedWarning, stacklevel=user_stacklevel())
    return Saved(str(path), len(records), tuple(left_out))


def load(path, fn, *, on_mismatch: str = "raise"):
    """``fn`` (the function or module the program in ``path`` was saved from, as this process
    has it) compiled, with the saved records: a call they cover runs their compiled graphs at
    once.  A file made with another torch, Python, magpy, machine or program raises
    :class:`~magpy.errors.LoadError`, or with ``on_mismatch="record"`` warns and returns
    ``fn`` compiled afresh (records as usual); a damaged file always raises."""
    if on_mismatch not in ("raise", "record"):
        raise ValueError(f"on_mismatch is 'raise' or 'record', not {on_mismatch!r}")
    header, body = archive.read(path)
    made = header["made_with"]
    compiled = api.compile(fn, backend=made["backend"], fullgraph=made["fullgraph"])
    cache = api.cache_of(compiled, "magpy.load")
    here = archive.made_with(made["backend"], made["fullgraph"], [fingerprint(r) for r in cache.roots])
    why = archive.differences(made, here)
    if made["program"] != here["program"]:
        why.append(f"program: saved from {_words(made['program'])}, given {_words(here['program'])}")
    records = None
    if not why:
        payload = archive.payload(body)
        if payload["artifacts"] is not None:
            _install(payload["artifacts"])
        try:
            find = Resolver(cache.roots)
            records = [decode_record(d, find, cache.backend) for d in payload["records"]]
        except Mismatch as e:
            why.append(str(e))
    if why:
        message = f"{path} does not fit this process: " + "; ".join(why)
        if on_mismatch == "raise":
            raise LoadError(message)
        warnings.warn(f"magpy.load: {message}; compiling afresh (on_mismatch='record')", NotSavedWarning,
                      stacklevel=user_stacklevel())
        return compiled
    cache.adopt(records)
    return compiled


def export(compiled, example_args: tuple, path, example_kwargs: dict | None = None) -> str:
    """Write an AOTInductor package (``.pt2``) of the call ``compiled(*example_args,
    **example_kwargs)``, whose record must be one graph that changes nothing: it runs without
    magpy (``torch._inductor.aoti_load_package`` from Python, ``AOTIModelPackageLoader`` from
    C++), for inputs of the example's sizes, with the program's parameters and buffers as
    they are now.  Returns the package's path (docs/saving.md)."""
    from magpy.api.persist.export import export as export_record
    cache = api.cache_of(compiled, "magpy.export")
    return export_record(cache, tuple(example_args), dict(example_kwargs or {}), path)


_SAVED_BACKENDS = ("eager", "aot_eager", "inductor")


def _install(artifacts: dict) -> None:
    """Put the backend's artifacts in place before the records' graphs compile: in the
    background worker ahead of them where compiles run there (the calls meanwhile run the
    graphs' eager twins), else now."""
    if config.background_compile and background.can_defer():
        background.submit(lambda: kernels.install(artifacts))
    else:
        kernels.install(artifacts)


def _words(program: list) -> str:
    return ", ".join(fp.split(" ")[1] if fp.startswith("a ") else fp for fp in program)


__all__ = ["Saved", "export", "load", "save"]
