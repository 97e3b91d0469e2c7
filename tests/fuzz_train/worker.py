"""One rank of one loop: both twins in this process, compared after every step.

``run_rank`` executes the loop's source twice (two namespaces), builds the eager twin with
``compile`` the identity and the other with ``magpy.compile(..., backend=...)`` (both after
``torch.manual_seed(0)``, inside ``build``), then for each step: both twins from the same
torch RNG state, the same batch (cloned), then a snapshot of each (:func:`observe`) and the
comparison (:func:`differences`); the next step goes on from eager's RNG state.  The first
difference, or an exception the compiled twin raised where the eager one did not, ends the
run.  It reports progress and its result through ``conn`` (a ``multiprocessing`` pipe),
as plain picklable data.
"""
from __future__ import annotations

import datetime
import logging
import math
import os
import time
import traceback
import warnings

import torch
import torch.distributed as dist

import magpy

# What an exception of the eager twin means: the loop asks for something this torch does not
# do (counted as skipped), else the generator wrote an invalid loop.
UNSUPPORTED = ("not supported", "NotImplementedError", "not implemented", "does not support",
               "Unsupported", "unsupported", "only supports", "is not currently supported")
SABOTAGE_STEP = 2


# ----------------------------------------------------------------------------- snapshots

def local(t):
    """A tensor's (this rank's shard's) detached copy; anything else as it is."""
    if t is None or not isinstance(t, torch.Tensor):
        return t
    if hasattr(t, "to_local"):   # DTensor (FSDP2)
        t = t.to_local()
    return t.detach().clone()


def freeze(v, depth=0):
    """A plain, comparable copy of ``v``: tensors copied, containers rebuilt, objects by type
    and attributes, callables by name."""
    if depth > 12:
        return ("deep", type(v).__name__)
    if isinstance(v, torch.Tensor):
        return local(v)
    if v is None or isinstance(v, (bool, int, float, str, complex)):
        return v
    if isinstance(v, dict):
        return {k: freeze(x, depth + 1) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return (type(v).__name__, [freeze(x, depth + 1) for x in v])
    if callable(v):
        return ("callable", getattr(v, "__qualname__", type(v).__qualname__))
    if hasattr(v, "__dict__"):
        return ("object", type(v).__qualname__, {k: freeze(x, depth + 1) for k, x in vars(v).items()
                                                  if not k.startswith("_")})
    return ("object", type(v).__qualname__, repr(v))


def observe(twin: dict, out) -> dict:
    """Everything a step changes or yields, copied."""
    model = twin["model"]
    snap = {
        "out": freeze(out),
        "params": {n: (local(p), p.requires_grad, local(p.grad)) for n, p in model.named_parameters()},
        "buffers": {n: local(b) for n, b in model.named_buffers()},
        "training": [m.training for m in model.modules()],
        "opt": freeze(twin["opt"].state_dict()),
    }
    if twin.get("sched") is not None:
        snap["sched"] = freeze(twin["sched"].state_dict())
    if twin.get("scaler") is not None:
        snap["scaler"] = freeze(twin["scaler"].state_dict())
    if twin.get("ema") is not None:
        snap["ema"] = freeze(twin["ema"].state_dict())
    snap["rng"] = torch.get_rng_state()
    return snap


# ----------------------------------------------------------------------------- comparison

class Tolerance:
    """Exact (``rtol`` None) or ``allclose``-like; ``error`` is the worst ratio of a
    difference to what the tolerance allows (> 1: out of tolerance)."""

    def __init__(self, rtol: float | None = None, atol: float = 0.0):
        self.rtol, self.atol = rtol, atol

    @property
    def exact(self) -> bool:
        return self.rtol is None

    def tensor_error(self, a: torch.Tensor, b: torch.Tensor) -> float:
        if self.exact or not (a.is_floating_point() or a.is_complex()):
            same = torch.equal(a, b) or bool(((a == b) | (a.isnan() & b.isnan())).all()) \
                if (a.is_floating_point() or a.is_complex()) else torch.equal(a, b)
            return 0.0 if same else math.inf
        a64, b64 = a.double(), b.double()
        if bool((a64.isnan() != b64.isnan()).any()):
            return math.inf
        finite = a64.isfinite() & b64.isfinite()
        if bool(((a64 != b64) & ~finite & ~a64.isnan()).any()):   # an inf against another value
            return math.inf
        if not bool(finite.any()):
            return 0.0
        d = (a64 - b64).abs()[finite] / (self.atol + self.rtol * b64.abs()[finite])
        return float(d.max())

    def float_error(self, a: float, b: float) -> float:
        if a == b or (math.isnan(a) and math.isnan(b)):
            return 0.0
        if self.exact or math.isinf(a) or math.isinf(b) or math.isnan(a) or math.isnan(b):
            return math.inf
        return abs(a - b) / (self.atol + self.rtol * abs(b))


def differences(a, b, tol: Tolerance, path: str = "", out: list | None = None) -> list:
    """``[(path, error, eager, compiled)]`` where ``a`` (eager) and ``b`` differ beyond ``tol``
    (error > 1; structural differences have error inf)."""
    out = [] if out is None else out
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)):
            out.append((path, math.inf, _show(a), _show(b)))
        elif a.dtype != b.dtype or a.shape != b.shape:
            out.append((path, math.inf, f"{a.dtype} {tuple(a.shape)}", f"{b.dtype} {tuple(b.shape)}"))
        else:
            e = tol.tensor_error(a, b)
            if e > 1:
                out.append((path, e, _show(a, b), _show(b, a)))
        return out
    if type(a) is not type(b):
        if isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool) \
                and not isinstance(b, bool) and not tol.exact:
            pass
        else:
            out.append((path, math.inf, _show(a), _show(b)))
            return out
    if isinstance(a, dict):
        for k in list(a) + [k for k in b if k not in a]:
            if k not in a or k not in b:
                out.append((f"{path}.{k}", math.inf, _show(a.get(k, "<missing>")),
                            _show(b.get(k, "<missing>"))))
            else:
                differences(a[k], b[k], tol, f"{path}.{k}", out)
        return out
    if isinstance(a, list):
        if len(a) != len(b):
            out.append((f"{path}", math.inf, f"{len(a)} items", f"{len(b)} items"))
            return out
        for i, (x, y) in enumerate(zip(a, b)):
            differences(x, y, tol, f"{path}[{i}]", out)
        return out
    if isinstance(a, tuple):
        if len(a) != len(b):
            out.append((path, math.inf, _show(a), _show(b)))
            return out
        for i, (x, y) in enumerate(zip(a, b)):
            # (a list's tag, an object's type: not an index of its own in the path)
            differences(x, y, tol, path if isinstance(x, str) and i == 0 else f"{path}[{i}]", out)
        return out
    if isinstance(a, float) or (isinstance(a, int) and isinstance(b, float)):
        e = tol.float_error(float(a), float(b))
        if e > 1:
            out.append((path, e, repr(a), repr(b)))
        return out
    if a != b:
        out.append((path, math.inf, _show(a), _show(b)))
    return out


def _show(t, other=None) -> str:
    if isinstance(t, torch.Tensor):
        flat = t.detach().reshape(-1)
        comparable = isinstance(other, torch.Tensor) and (other.shape, other.dtype) == (t.shape, t.dtype)
        if comparable and flat.numel():
            o = other.detach().reshape(-1)
            diff = (flat != o) & ~(flat.isnan() & o.isnan())
            where = int(diff.nonzero()[0]) if bool(diff.any()) else 0
            most = float((t.double() - other.double()).abs().max()) if t.is_floating_point() else None
            return f"{t.dtype} {tuple(t.shape)}, item {where} = {flat[where].item()!r}" + (
                f" (max |diff| {most:.3g})" if most is not None else "")
        return f"{t.dtype} {tuple(t.shape)} {flat[:4].tolist()}"
    text = repr(t)
    return text if len(text) < 200 else text[:200] + "..."


# ----------------------------------------------------------------------------- one rank

def _stats(compiled) -> dict:
    try:
        st = magpy.stats(compiled)
    except Exception as e:  # noqa: BLE001 - not a magpy callable (a sabotage, a torch.compile twin)
        return {"error": repr(e)}
    return {"monitor_runs": st.monitor_runs, "mock_runs": st.mock_runs, "eager_runs": st.eager_runs,
            "records": st.records, "graph_count": st.graph_count, "breaks": sorted(st.breaks),
            "break_reasons": [str(r) for r in st.break_reasons][:5],
            "recompiles": [str(r) for r in st.recompiles][:12]}


def _letter(before: dict, after: dict) -> str:
    """What the compiled callable did in one step: R a recording that added a record, C one
    that did not (a continuation), M mock runs only, E an eager run, . nothing."""
    d = {k: after.get(k, 0) - before.get(k, 0)
         for k in ("monitor_runs", "mock_runs", "eager_runs", "records")}
    if d["eager_runs"]:
        return "E"
    if d["monitor_runs"]:
        return "R" if d["records"] > 0 else "C"
    return "M" if d["mock_runs"] else "."


def _exec(source: str) -> dict:
    ns = {"__name__": "fuzz_train_loop"}
    exec(compile(source, "<fuzz_train loop>", "exec"), ns)
    return ns


def _exception(e: BaseException) -> dict:
    return {"type": type(e).__name__, "message": str(e).split("\n")[0][:300],
            "traceback": "".join(traceback.format_exception(e))[-5000:]}


def _is_unsupported(e: BaseException) -> bool:
    text = f"{type(e).__name__}: {e}"
    return isinstance(e, NotImplementedError) or any(u in text for u in UNSUPPORTED)


def _magpy_compiler(backend: str):
    if backend == "none":   # eager against eager: the generator's own check
        return _identity
    return lambda f: magpy.compile(f, backend=backend)


def _torch_compiler(backend: str):
    return lambda f: torch.compile(f, backend=backend)


def _identity(f):
    return f


def run_rank(source: str, backend: str, rank: int = 0, world: int = 1, store: str | None = None,
             conn=None, rtol: float | None = None, atol: float = 0.0, sabotage: str | None = None,
             vs_torch_compile: bool = False, verify_fast_guard: bool = True, references: tuple = ()) -> dict:
    """Run one loop's twins on this rank (a process group of ``world`` ranks when ``store``
    names a file store); the result as a dict (see :class:`tests.fuzz_train.runner.Outcome`).
    ``references``: the sources ``torch.compile`` runs in magpy's place where a step differs
    (``vs_torch_compile``; the loop's own source if none)."""
    torch.set_num_threads(1)
    warnings.simplefilter("ignore")
    logging.getLogger("magpy.progress").setLevel(logging.WARNING)   # (a slow recording's line)
    magpy.config.verify_fast_guard = verify_fast_guard
    if backend == "inductor":
        import torch._inductor.config as inductor_config
        inductor_config.fallback_random = True   # the RNG draws eager's (dropout masks comparable)
        inductor_config.compile_threads = 1      # no pool of compile workers beside this one
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    if store is not None:
        dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world,
                                timeout=datetime.timedelta(seconds=60))
    try:
        refs = (references or (source,)) if vs_torch_compile else ()
        return _run_rank(source, backend, rank, conn, Tolerance(rtol, atol), sabotage, refs)
    finally:
        if store is not None:
            dist.destroy_process_group()


def _send(conn, *msg) -> None:
    if conn is not None:
        conn.send(msg)


def _run_rank(source, backend, rank, conn, tol, sabotage, references) -> dict:
    start = time.monotonic()
    result = {"kind": "ok", "step": -1, "rank": rank, "signature": "", "detail": "", "letters": "",
              "stats": {}, "warnings": []}
    try:
        ns_e = _exec(source)
        eager = ns_e["build"](_identity)
    except Exception as e:  # noqa: BLE001 - the eager twin could not be built
        result.update(kind="skipped" if _is_unsupported(e) else "invalid", step=-1,
                      signature=f"eager build: {type(e).__name__}: {_norm(str(e))}",
                      detail=_exception(e)["traceback"])
        return result
    ns_c = _exec(source)
    try:
        twin = ns_c["build"](_magpy_compiler(backend))
    except Exception as e:  # noqa: BLE001 - magpy.compile raised where eager built the loop
        result.update(kind="crash", signature=f"crash: build: {type(e).__name__}: {_norm(str(e))}",
                      detail=_exception(e)["traceback"])
        return result
    steps = ns_e["STEPS"]
    torch.manual_seed(1)
    letters = []
    caught_all = []
    gap = 0.0   # how far magpy's parameters are from eager's, within tolerance
    for i in range(steps):
        _send(conn, "step", i)
        x, y = ns_e["batch"](i, rank)
        xv, yv = ns_e["val_batch"]()
        rng = torch.get_rng_state()
        try:
            out_e = eager["step"](i, x.clone(), y.clone(), xv.clone(), yv.clone())
        except Exception as e:  # noqa: BLE001 - the loop fails eagerly
            result.update(kind="skipped" if _is_unsupported(e) else "invalid", step=i,
                          signature=f"eager step: {type(e).__name__}: {_norm(str(e))}",
                          detail=_exception(e)["traceback"])
            break
        snap_e = observe(eager, out_e)
        torch.set_rng_state(rng)
        before = _stats(twin["compiled"])
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                if sabotage == "raise" and i == SABOTAGE_STEP:
                    raise RuntimeError("sabotage: the compiled twin raised")
                if sabotage == "hang" and i == SABOTAGE_STEP:
                    time.sleep(10_000)
                out_c = twin["step"](i, x.clone(), y.clone(), xv.clone(), yv.clone())
                error = None
            except Exception as e:  # noqa: BLE001 - an exception magpy raised where eager did not
                error = e
        caught_all += [f"{w.category.__name__}: {str(w.message).splitlines()[0][:160]}" for w in caught
                       if "magpy" in w.category.__module__ or str(w.message).startswith("magpy")]
        after = _stats(twin["compiled"])
        letters.append(_letter(before, after))
        if error is not None:
            torch.set_rng_state(snap_e["rng"])
            result.update(kind="crash", step=i, detail=_exception(error)["traceback"],
                          signature=f"crash: {type(error).__name__}: {_norm(str(error))}")
            break
        if sabotage and i == SABOTAGE_STEP:
            _sabotage(sabotage, twin, tol)
        snap_c = observe(twin, out_c)
        torch.set_rng_state(snap_e["rng"])   # the next step goes on from eager's state
        diffs = differences(snap_e, snap_c, tol)
        if not diffs:
            gap = _parameter_gap(eager["model"], twin["model"]) if references and not tol.exact else 0.0
        else:
            result.update(kind="wrong", step=i, signature="wrong: " + ", ".join(_parts(diffs)),
                          detail=_diff_text(diffs), worst=max(d[1] for d in diffs))
            if references and not tol.exact and math.isfinite(result["worst"]):
                result["torch_compile"] = _references(source, backend, rank, i, diffs, tol, references,
                                                      max(gap, _NUDGE))
                if result["torch_compile"]["error"] >= 0.5 * result["worst"]:
                    result["kind"] = "drift"
            break
    result["letters"] = "".join(letters)
    result["stats"] = _stats(twin["compiled"])
    result["warnings"] = sorted(set(caught_all))[:6]
    result["seconds"] = time.monotonic() - start
    return result


def _sabotage(kind: str, twin: dict, tol: Tolerance) -> None:
    """Change the compiled twin behind the comparison's back (the checker's self-test)."""
    model = twin["model"]
    p = next(p for p in model.parameters() if p.requires_grad)
    with torch.no_grad():
        if kind == "param":
            flat = p.view(-1) if not hasattr(p, "to_local") else p.to_local().view(-1)
            flat[0] = torch.nextafter(flat[0], flat[0] + 1) if tol.exact else flat[0] + 1e-2
        elif kind == "grad-zeros":   # None where eager has None: zeros instead
            for q in model.parameters():
                if q.grad is None:
                    q.grad = torch.zeros_like(q)
                    break
            else:
                p.grad = None
        elif kind == "opt-state":
            twin["opt"].param_groups[0]["lr"] *= 1.0000001 if tol.exact else 1.01
        elif kind == "rng":
            torch.rand(1)
        elif kind == "buffer":
            b = next(iter(model.buffers()), None)
            if b is not None:
                b.add_(1)
            else:
                p.add_(1)


# How much finer than the loop's tolerance a reference's distance from eager is measured
# (``differences`` reports only what exceeds the tolerance it is given).
_FINER = 1000.0
# The eager loop's own sensitivity: its parameters nudged before the first step by noise as
# large as magpy's parameters were off eager's at the step before the one that differed (at
# least this), in a few draws.
_NUDGE = 1e-7
_DRAWS = 3


def _references(source: str, backend: str, rank: int, step: int, diffs: list, tol: Tolerance,
                references: tuple, gap: float) -> dict:
    """The reference that got furthest from eager by ``step`` on the paths where magpy
    differed: ``torch.compile(..., backend)`` in magpy's place in each of ``references``
    (sources), and the eager loop with its parameters nudged by noise of ``gap`` (how far
    magpy's were, within tolerance, a step before): a loop so sensitive that such a change
    moves it as far (a ReLU or a bf16 rounding that flips: seed 50173's conv net, 2.4e-4 to
    5.8e-3 off eager's gradient at step 3 from parameters 1e-5 apart, eager against eager)."""
    runs = [(f"torch.compile ({i})", ref, _torch_compiler(backend), None) for i, ref in enumerate(references)]
    runs += [(f"eager, parameters nudged by {gap:.1e} (draw {k})", source, _identity, (gap, k))
             for k in range(_DRAWS)]
    return max((dict(_distance(*run[1:], rank, step, diffs, tol), reference=run[0]) for run in runs),
               key=lambda r: r["error"])


def _distance(source: str, compiler, nudge, rank: int, step: int, diffs: list, tol: Tolerance) -> dict:
    """Run the loop with ``compiler`` (``nudge``: its parameters nudged first, ``(size,
    draw)``) beside eager up to ``step`` and measure how far it got from eager by then (its
    largest distance at any step, in the loop's tolerance, within it too: rounding walks, and
    one run may cross the tolerance a step before another), on the paths where magpy differed."""
    try:
        ns_e, ns_t = _exec(source), _exec(source)
        eager, twin = ns_e["build"](_identity), ns_t["build"](compiler)
        if nudge is not None:
            _nudge(twin["model"], *nudge)
        torch.manual_seed(1)
        paths = {d[0] for d in diffs}
        mine, count = [], 0
        finer = Tolerance(tol.rtol / _FINER, tol.atol / _FINER)
        for i in range(step + 1):
            x, y = ns_e["batch"](i, rank)
            xv, yv = ns_e["val_batch"]()
            rng = torch.get_rng_state()
            out_e = eager["step"](i, x.clone(), y.clone(), xv.clone(), yv.clone())
            snap_e = observe(eager, out_e)
            torch.set_rng_state(rng)
            out_t = twin["step"](i, x.clone(), y.clone(), xv.clone(), yv.clone())
            snap_t = observe(twin, out_t)
            torch.set_rng_state(snap_e["rng"])
            got = [(p, e / _FINER, a, b) for p, e, a, b in differences(snap_e, snap_t, finer)]
            count = sum(1 for d in got if d[1] > 1)
            mine += [d for d in got if d[0] in paths]
        mine.sort(key=lambda d: -d[1])
        return {"error": max((d[1] for d in mine), default=0.0), "diffs": count,
                "detail": _diff_text(mine[:4], who="reference")}
    except Exception as e:  # noqa: BLE001 - the reference could not run the loop
        return {"error": 0.0, "failed": f"{type(e).__name__}: {_norm(str(e))}"}


def _nudge(model, size: float, draw: int) -> None:
    """Add noise of standard deviation ``size`` to each plain floating parameter (draw ``draw``)."""
    g = torch.Generator().manual_seed(draw)
    with torch.no_grad():
        for p in model.parameters():
            if type(p.data) is torch.Tensor and p.is_floating_point():
                p.add_(size * torch.randn(p.shape, generator=g, dtype=p.dtype))


def _parameter_gap(a, b) -> float:
    """The largest difference between the plain parameters of models ``a`` and ``b``."""
    gaps = [float((p - q).abs().max()) for p, q in zip(a.parameters(), b.parameters())
            if type(p.data) is torch.Tensor and type(q.data) is torch.Tensor and p.numel()]
    return max(gaps, default=0.0)


def _parts(diffs: list) -> list[str]:
    """The kinds of state that differ: params, grads, opt.state, sched, rng, ..."""
    kinds = []
    for path, *_ in diffs:
        head = path.lstrip(".").split(".")[0].split("[")[0]
        if head == "params":
            tail = path.rsplit("[", 1)[-1].rstrip("]") if path.endswith("]") else ""
            head = {"0": "params", "1": "requires_grad", "2": "grads"}.get(tail, "params")
        elif head == "opt":
            head = "opt." + (path.split(".")[2].split("[")[0] if path.count(".") > 1 else "")
        if head not in kinds:
            kinds.append(head)
    return kinds


def _diff_text(diffs: list, limit: int = 8, who: str = "magpy") -> str:
    lines = [f"  {path or '<top>'}: eager {a} | {who} {b}" + (f" (error {e:.3g})" if math.isfinite(e) else "")
             for path, e, a, b in diffs[:limit]]
    if len(diffs) > limit:
        lines.append(f"  ... and {len(diffs) - limit} more")
    return "\n".join(lines)


def _norm(text: str) -> str:
    import re
    text = text.split("\n")[0]
    return re.sub(r"0x[0-9a-f]+|\d+(\.\d+)?(e-?\d+)?", "#", text)[:160]
