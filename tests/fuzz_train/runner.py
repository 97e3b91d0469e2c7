"""Run one training loop in fresh worker processes, with a time limit, and classify it.

Each loop runs in its own process per rank (forked from a ``forkserver`` that has imported
torch and magpy once, so a fresh worker costs milliseconds, not an import): a loop with a
process group gets a gloo one over a file store in a temporary folder, of world size 1, or
of ``ranks`` for DDP and FSDP2 loops when ``ranks`` is 2 (each rank draws its own data).
The workers report each step they start and then their result (:mod:`tests.fuzz_train.worker`);
a loop that runs past its time limit is killed and is a hang, a worker that dies without a
result (a segfault, an abort) a crash.

Outcomes (:data:`KINDS`): ``ok``; ``wrong`` (a step's loss, parameters, gradients, optimizer,
scheduler, scaler, EMA or buffer state or the RNG state differs from eager's beyond the
tolerance: bit for bit under backend "eager"); ``crash`` (the compiled twin raised where the
eager one did not, or the worker died); ``hang``; ``drift`` (non-eager backends, with
``vs_torch_compile``: out of tolerance, but a reference got as far from eager by that
step: ``torch.compile`` with the same backend, compiling what magpy compiles or the model
alone (Dynamo may leave eager what magpy compiles), or eager itself with its parameters
nudged as far as magpy's were a step before, a loop that sensitive to rounding;
``worker._references``); ``skipped`` (eager PyTorch does not support the loop: the
eager twin raised ``NotImplementedError`` or "not supported"); ``invalid`` (the eager twin
raised something else: the generator's fault).  ``unsteady`` is a flag, not a kind: the
compiled callable recorded (monitor runs) more than 4 times per 12 steps.
"""
from __future__ import annotations

import contextlib
import dataclasses
import multiprocessing
import multiprocessing.connection
import os
import sys
import tempfile
import threading
import time
import types

from tests.fuzz_train.generator import Loop

KINDS = ("ok", "wrong", "crash", "hang", "drift", "skipped", "invalid")
FAILURES = ("wrong", "crash", "hang")
TIME_LIMIT = {"eager": 60.0, "aot_eager": 240.0, "inductor": 600.0}
# Tolerances of the non-eager backends: (rtol, atol); bf16 compute (autocast, FSDP's bf16
# parameters) rounds differently when the backend fuses, so it gets a looser one.
TOLERANCE = (1e-4, 1e-5)
TOLERANCE_BF16 = (2e-2, 2e-3)
UNSTEADY = 4   # monitor runs per 12 steps above which a loop is unsteady

_CTX = multiprocessing.get_context("forkserver")
_CTX.set_forkserver_preload(["tests.fuzz_train.worker"])
_START = threading.Lock()


@contextlib.contextmanager
def _no_main_module():
    """Start workers without re-running the caller's ``__main__`` in them (multiprocessing
    imports it in each child: a script without a main guard, stdin, pytest's): the workers
    need only this package."""
    with _START:
        main = sys.modules["__main__"]
        sys.modules["__main__"] = types.ModuleType("__main__")
        try:
            yield
        finally:
            sys.modules["__main__"] = main


@dataclasses.dataclass
class Outcome:
    """How one loop went (the worst of its ranks)."""

    kind: str
    signature: str = ""
    step: int = -1
    rank: int = 0
    detail: str = ""
    letters: str = ""          # per step: R record, C continuation, M mock, E eager (see worker._letter)
    stats: dict = dataclasses.field(default_factory=dict)
    warnings: list = dataclasses.field(default_factory=list)
    seconds: float = 0.0
    torch_compile: dict | None = None
    steps: int = 12

    @property
    def unsteady(self) -> bool:
        runs = self.stats.get("monitor_runs", 0) if isinstance(self.stats, dict) else 0
        return self.kind in ("ok", "drift") and runs > UNSTEADY * max(self.steps, 12) / 12

    def describe(self, detail_lines: int | None = None) -> str:
        """A readable summary: what differed at which step, and magpy's stats (with
        ``detail_lines``, only the last so many lines of the detail: a traceback's end)."""
        head = self.signature or self.kind
        if self.step >= 0:
            head += f" (step {self.step}" + (f", rank {self.rank}" if self.rank else "") + ")"
        lines = [head]
        if self.detail:
            detail = self.detail.rstrip("\n").splitlines()
            lines += detail if detail_lines is None or self.kind == "wrong" else detail[-detail_lines:]
        if self.torch_compile:
            lines.append(f"the furthest reference by that step: {self.torch_compile}")
        if self.stats:
            s = self.stats
            lines.append(f"magpy.stats: monitor_runs={s.get('monitor_runs')} mock_runs={s.get('mock_runs')} "
                         f"eager_runs={s.get('eager_runs')} records={s.get('records')} "
                         f"graphs={s.get('graph_count')} steps {self.letters!r}")
            if s.get("breaks"):
                lines.append(f"  breaks: {s['breaks']}")
            if s.get("break_reasons"):
                lines.append(f"  break_reasons: {s['break_reasons']}")
        if self.warnings:
            lines.append(f"  warnings: {self.warnings}")
        return "\n".join(lines)


def _entry(conn, kwargs: dict) -> None:
    """A worker process: run one rank and send its result."""
    from tests.fuzz_train import worker
    try:
        result = worker.run_rank(conn=conn, **kwargs)
    except BaseException as e:  # noqa: BLE001 - the worker itself failed (e.g. the process group)
        result = {"kind": "crash", "signature": f"crash: worker: {type(e).__name__}: {worker._norm(str(e))}",
                  "detail": worker._exception(e)["traceback"], "step": -1, "rank": kwargs.get("rank", 0)}
    try:
        conn.send(("result", result))
    finally:
        conn.close()


def tolerance(loop: Loop, backend: str) -> tuple:
    """(rtol, atol) of ``backend`` for ``loop``; (None, 0.0): bit for bit."""
    if backend == "eager":
        return None, 0.0
    return TOLERANCE_BF16 if loop.amp != "none" or loop.fsdp_bf16 else TOLERANCE


def run(loop: Loop, backend: str = "eager", ranks: int = 1, time_limit: float | None = None,
        sabotage: str | None = None, vs_torch_compile: bool = False, source: str | None = None) -> Outcome:
    """Run ``loop`` (or ``source``, a loop's source edited by hand) in fresh workers; its outcome."""
    world = ranks if loop.ranks_needed else 1
    limit = TIME_LIMIT.get(backend, 240.0) if time_limit is None else time_limit
    rtol, atol = tolerance(loop, backend)
    with tempfile.TemporaryDirectory(prefix="fuzz_train_") as folder:
        store = os.path.join(folder, "store") if loop.process_group else None
        kwargs = dict(source=source or loop.source(), backend=backend, world=world, store=store, rtol=rtol,
                      atol=atol, sabotage=sabotage, vs_torch_compile=vs_torch_compile,
                      references=_references(loop) if source is None else ())
        outcome = _run_ranks(kwargs, world, limit)
    outcome.steps = loop.steps
    return outcome


def _references(loop: Loop) -> tuple[str, ...]:
    """The sources ``torch.compile`` runs as references: the loop as it is, and with the model
    compiled alone (the operations Inductor fuses for magpy, where Dynamo breaks the step)."""
    if loop.compiled == "model":
        return (loop.source(),)
    return loop.source(), dataclasses.replace(loop, compiled="model").source()


def _run_ranks(kwargs: dict, world: int, limit: float) -> Outcome:
    procs, conns, progress, results = [], {}, {}, {}
    for rank in range(world):
        parent, child = _CTX.Pipe(duplex=False)
        p = _CTX.Process(target=_entry, args=(child, dict(kwargs, rank=rank)), daemon=True)
        with _no_main_module():
            p.start()
        child.close()
        procs.append(p)
        conns[parent] = rank
        progress[rank] = -1
    deadline = time.monotonic() + limit
    try:
        while conns:
            left = deadline - time.monotonic()
            if left <= 0:
                return Outcome("hang", f"hang: over {limit:.0f} s", step=max(progress.values()),
                               detail=f"steps reached per rank: {progress}")
            for conn in multiprocessing.connection.wait(list(conns), timeout=left):
                rank = conns[conn]
                try:
                    msg = conn.recv()
                except EOFError:
                    del conns[conn]
                    if rank not in results:
                        procs[rank].join(5)
                        return Outcome("crash", f"crash: worker died (exit code {procs[rank].exitcode})",
                                       step=progress[rank], rank=rank)
                    continue
                if msg[0] == "step":
                    progress[rank] = msg[1]
                else:
                    results[rank] = msg[1]
                    if msg[1].get("kind") != "ok":   # the other ranks may wait for it forever
                        return _outcome(msg[1])
    finally:
        for p in procs:
            if p.is_alive():
                p.kill()
            p.join(5)
    return _outcome(results[0])


def _outcome(r: dict) -> Outcome:
    fields = {f.name for f in dataclasses.fields(Outcome)}
    return Outcome(**{k: v for k, v in r.items() if k in fields})
