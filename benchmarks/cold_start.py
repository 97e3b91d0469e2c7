"""Cold start: a fresh process, from nothing to the first compiled result, for each way to
ship a compiled program (magpy.save / magpy.load against torch.compile's options).

    python -m benchmarks.cold_start [--models resnet101,densenet121,bert,deberta_v2,align,bert_log]
                                    [--size bench|test] [--threads N] [--json PATH]

Every row is its own Python process (one at a time), timed from the top of this module:
``import`` (torch, magpy, the model's library), building the model, then under
``torch.no_grad()`` the first result and the first *compiled* result, both counted from the
model built (what the issue's bar compares: "within 0.5 s of eager's first result beyond
importing torch and the model").  Rows, each with its own ``TORCHINDUCTOR_CACHE_DIR``:

- ``eager``: the first call.
- ``torch.compile cold``: an empty cache; the first call compiles.  It then writes torch's
  "mega-cache" (``torch.compiler.save_cache_artifacts``) for the mega-cache row.
- ``torch.compile warm``: the cold row's cache directory again.
- ``torch.compile + mega-cache``: an empty cache, ``load_cache_artifacts`` of the cold row's
  artifacts first (Dynamo still traces; Inductor's entries are found).
- ``torch aot_compile`` / ``aot load``: torch 2.13's experimental one-graph precompile
  (``fullgraph=True``, for the example inputs: ``_aot_compile``, ``_save_aot_compiled_module``
  / ``_load_aot_compiled_module``), where it applies (a program with graph breaks: an error).
- ``magpy cold``: an empty cache; the first call records (eager's result), the compile runs in
  the background from the second call (``magpy.synchronize()``, then a third call runs the
  compiled graphs).  It then writes ``magpy.save``'s file.
- ``magpy warm``: the cold row's cache directory again.
- ``magpy.load``: an empty cache and the file: the first call runs the saved record's mock
  (its graphs' eager twins while Inductor's artifacts load in the background), the compiled
  graphs after ``magpy.synchronize()``; ``magpy.load fg``: the same with background
  compiles off (``load`` returns once the graphs are compiled from the artifacts).

``monitor`` counts magpy's monitor runs in the row's process (0: the saved records covered
every call).
"""
from __future__ import annotations

import time

_T0 = time.perf_counter()   # (before anything heavy is imported)

import argparse  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
from pathlib import Path  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_MODELS = ("resnet101", "densenet121", "bert", "deberta_v2", "align", "bert_log")
# row -> (its process's kind, the cache directory it uses, the file it reads or writes)
ROWS = {
    "eager": ("eager", "eager", None),
    "torch.compile cold": ("tc", "tc", "tc.bin"),
    "torch.compile warm": ("tc", "tc", None),
    "torch.compile + mega-cache": ("tc-mega", "tc-mega", "tc.bin"),
    "torch aot_compile": ("aot", "aot", "aot.bin"),
    "torch aot load": ("aot-load", "aot-load", "aot.bin"),
    "magpy cold": ("magpy", "magpy", "program.magpy"),
    "magpy warm": ("magpy", "magpy", None),
    "magpy.load": ("magpy-load", "magpy-load", "program.magpy"),
    "magpy.load fg": ("magpy-load-fg", "magpy-load-fg", "program.magpy"),
}


def child(kind: str, model: str, size: str, path: str | None, threads: int | None) -> dict:
    """Run in the row's fresh process: its times (module docstring)."""
    import torch

    import magpy
    from benchmarks.models import MODELS

    if threads:
        torch.set_num_threads(threads)
    imported = time.perf_counter()
    torch.manual_seed(0)
    net, args, kwargs = MODELS[model](size)
    built = time.perf_counter()
    run = _prepare(kind, net, args, kwargs, path)
    with torch.no_grad():
        first = _timed(run, args, kwargs)
        done = _until_compiled(run, args, kwargs) if kind.startswith("magpy") else first
    _finish(kind, run, path)
    stats = magpy.stats(run) if kind.startswith("magpy") else None
    return {"import_s": imported - _T0, "build_s": built - imported, "first_s": first - built,
            "compiled_s": done - built, "monitor": stats.monitor_runs if stats else None}


def _prepare(kind: str, net, args, kwargs, path):
    """The callable a row times, with what the row loads loaded (after the model is built:
    loading is part of the time to the first result)."""
    import torch

    import magpy
    if kind == "eager":
        return net
    if kind == "tc":
        return torch.compile(net)
    if kind == "tc-mega":
        torch.compiler.load_cache_artifacts(Path(path).read_bytes())
        return torch.compile(net)
    if kind in ("aot", "aot-load"):
        from torch._dynamo.aot_compile import ModelInput
        compiled = torch.compile(net, fullgraph=True)
        if kind == "aot":
            example = ModelInput(args=tuple(args), kwargs=kwargs, contexts=[torch.no_grad()])
            with torch.no_grad():
                compiled._aot_compile([example])
        else:
            compiled._load_aot_compiled_module(Path(path).read_bytes())
        return compiled
    if kind == "magpy":
        return magpy.compile(net)
    magpy.config.background_compile = kind == "magpy-load"
    return magpy.load(path, net)


def _timed(run, args, kwargs) -> float:
    run(*args, **kwargs)
    return time.perf_counter()


def _until_compiled(run, args, kwargs) -> float:
    import magpy
    run(*args, **kwargs)
    magpy.synchronize()
    return _timed(run, args, kwargs)


def _finish(kind: str, run, path) -> None:
    """What a cold row leaves for the rows that load (after the timing)."""
    import torch

    import magpy
    if path is None:
        return
    if kind == "tc":
        Path(path).write_bytes(torch.compiler.save_cache_artifacts()[0])
    elif kind == "aot":
        Path(path).write_bytes(run._save_aot_compiled_module())
    elif kind == "magpy":
        magpy.save(run, path)


def spawn(row: str, model: str, size: str, threads: int | None, work: str) -> dict:
    kind, cache, name = ROWS[row]
    writes = row.endswith("cold") or row == "torch aot_compile"
    path = os.path.join(work, name) if name and (writes or os.path.exists(os.path.join(work, name))) else None
    if name and not writes and path is None:
        return {"error": "no file: the row that writes it failed"}
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": os.path.join(work, f"cache-{cache}"),
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    cmd = [sys.executable, "-m", "benchmarks.cold_start", "--child", kind, model, "--size", size]
    cmd += ["--path", path] if path else []
    cmd += ["--threads", str(threads)] if threads else []
    done = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True)
    if done.returncode:
        lines = done.stderr.strip().splitlines()
        return {"error": lines[-1][:160] if lines else f"exit {done.returncode}"}
    return json.loads(done.stdout.strip().splitlines()[-1])


def line(model: str, row: str, r: dict, eager: dict | None) -> str:
    if "error" in r:
        return f"| {model} | {row} | error: {r['error']} |||||"
    behind = f"{r['compiled_s'] - eager['first_s']:+.2f}" if eager and "error" not in eager else ""
    monitor = "" if r["monitor"] is None else str(r["monitor"])
    return (f"| {model} | {row} | {r['import_s']:.1f} | {r['first_s']:.2f} | {r['compiled_s']:.2f} | "
            f"{behind} | {monitor} |")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default=",".join(DEFAULT_MODELS))
    parser.add_argument("--rows", default=",".join(ROWS))
    parser.add_argument("--size", default="bench", choices=("bench", "test"))
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--json", default=None, help="also write the results here")
    parser.add_argument("--child", nargs=2, metavar=("KIND", "MODEL"), help=argparse.SUPPRESS)
    parser.add_argument("--path", default=None, help=argparse.SUPPRESS)
    opts = parser.parse_args(argv)
    if opts.child:
        print(json.dumps(child(*opts.child, opts.size, opts.path, opts.threads)))
        return 0
    results = []
    print("| model | row | import s | first result s | first compiled result s | vs eager's first s | "
          "monitor |\n|---|---|---|---|---|---|---|", flush=True)
    for model in opts.models.split(","):
        with tempfile.TemporaryDirectory(prefix="cold_start_") as work:
            eager = None
            for row in opts.rows.split(","):
                r = spawn(row, model, opts.size, opts.threads, work)
                eager = r if row == "eager" else eager
                results.append({"model": model, "row": row, **r})
                print(line(model, row, r, eager), flush=True)
                if opts.json:
                    Path(opts.json).write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
