"""Charts of benchmark JSON for the documentation site (matplotlib: ``pip install -e ".[docs]"``).

    python -m benchmarks.plots [--run PATH] [--transformers PATH] [--control-flow PATH] [--out DIR]

Reads the JSON that ``python -m benchmarks.run --json PATH`` and
``python -m benchmarks.control_flow --json PATH`` write (by default the figures the site
quotes, ``docs/data/*.json``, taken from those scripts' published runs) and writes SVG charts
to ``docs/assets/charts/``:

- ``speedup.svg``: speedup over eager per model, magpy and torch.compile (``--run``);
- ``compile_time.svg``: seconds until the compiled graphs run, per model (``--run``);
- ``transformers_speedup.svg``: the same speedup for the transformers suite (``--transformers``);
- ``control_flow.svg``: total seconds over all calls, compiles included, per variant and model
  (``--control-flow``).

A chart whose input is missing is skipped with a message.  The charts carry the JSON's
``source`` line (what ran, when, where), so a regenerated chart says what it shows.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DATA = REPO / "docs" / "data"
OUT = REPO / "docs" / "assets" / "charts"
COLORS = {"eager": "#9ca3af", "torch.compile": "#f59e0b", "magpy": "#2563eb", "magpy-foreground": "#93c5fd",
          "torch.compile-ro": "#fcd34d"}
COMPILERS = ("torch.compile", "magpy")


def _pyplot():
    import matplotlib
    matplotlib.use("Agg")   # files only: no display
    import matplotlib.pyplot as plt
    # The same SVG for the same data; text as text (smaller, searchable).
    plt.rcParams.update({"svg.hashsalt": "magpy", "svg.fonttype": "none", "font.size": 9})
    return plt


def _by_model(rows: list[dict], key: str) -> tuple[list[str], dict[str, list]]:
    """The models in first-seen order, and per compiler its ``key`` value for each (None if absent)."""
    models = list(dict.fromkeys(r["model"] for r in rows))
    values = {v: [next((r.get(key) for r in rows if r["model"] == m and r["variant"] == v), None)
                  for m in models] for v in COMPILERS}
    return models, values


def _bars(ax, labels: list[str], series: dict[str, list], horizontal: bool = False) -> None:
    width = 0.8 / len(series)
    for i, (name, values) in enumerate(series.items()):
        positions = [k + (i - (len(series) - 1) / 2) * width for k in range(len(labels))]
        heights = [v if v is not None else 0 for v in values]
        bar = ax.barh if horizontal else ax.bar
        bar(positions, heights, width, label=name, color=COLORS.get(name))
    ticks = ax.set_yticks if horizontal else ax.set_xticks
    ticks(range(len(labels)), labels, **({} if horizontal else {"rotation": 30, "ha": "right"}))
    ax.legend(frameon=False)


def _save(plt, fig, path: Path, source: str) -> Path:
    fig.text(0.01, 0.005, source, fontsize=6, color="#555", ha="left", va="bottom", wrap=True)
    fig.tight_layout(rect=(0, 0.04, 1, 1))
    fig.savefig(path, metadata={"Date": None})
    plt.close(fig)
    return path


def speedup_chart(data: dict, path: Path, title: str) -> Path:
    """Speedup over eager (eager's median / the compiler's) per model, one bar per compiler."""
    plt = _pyplot()
    models, speedups = _by_model(data["rows"], "speedup")
    horizontal = len(models) > 12
    fig, ax = plt.subplots(figsize=(7, max(3.5, 0.22 * len(models))) if horizontal else (7, 3.8))
    _bars(ax, models, speedups, horizontal)
    (ax.axvline if horizontal else ax.axhline)(1.0, color="#555", lw=0.8, ls="--")
    (ax.set_xlabel if horizontal else ax.set_ylabel)("speedup over eager (higher is faster)")
    if horizontal:
        ax.invert_yaxis()
    ax.set_title(title)
    return _save(plt, fig, path, data.get("source", ""))


def compile_time_chart(data: dict, path: Path) -> Path:
    """Seconds until each compiler's graphs run, per model."""
    plt = _pyplot()
    models, seconds = _by_model(data["rows"], "compile_s")
    fig, ax = plt.subplots(figsize=(7, 3.8))
    _bars(ax, models, seconds)
    ax.set_ylabel("seconds until compiled (lower is sooner)")
    ax.set_title("Time until the compiled graphs run")
    return _save(plt, fig, path, data.get("source", ""))


def control_flow_chart(data: dict, path: Path) -> Path:
    """Total seconds over the benchmark's calls, compiles included, per model and variant."""
    plt = _pyplot()
    models = list(data["models"])
    fig, axes = plt.subplots(1, len(models), figsize=(3.6 * len(models), 3.4), squeeze=False)
    for ax, model in zip(axes[0], models):
        rows = data["models"][model]
        ax.bar([r["variant"] for r in rows], [r["total"] or 0 for r in rows],
               color=[COLORS.get(r["variant"], "#6b7280") for r in rows])
        ax.set_yscale("log")
        ax.set_title(f"{model}: {data.get('calls', '?')} calls")
        ax.set_ylabel("total s, compiles included (log)")
        ax.tick_params(axis="x", rotation=30)
        for k, r in enumerate(rows):
            if r["total"]:
                ax.annotate(f"{r['total']:.2f}", (k, r["total"]), ha="center", va="bottom", fontsize=7)
    return _save(plt, fig, path, data.get("source", ""))


def _load(path: str | Path) -> dict | None:
    path = Path(path)
    if not path.exists():
        print(f"skipped: {path} does not exist", file=sys.stderr)
        return None
    return json.loads(path.read_text())


def main(argv=None) -> list[Path]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", default=DATA / "run.json", help="benchmarks.run JSON (the zoo models)")
    parser.add_argument("--transformers", default=DATA / "run_transformers.json",
                        help="benchmarks.run --suite transformers JSON")
    parser.add_argument("--control-flow", default=DATA / "control_flow.json",
                        help="benchmarks.control_flow JSON")
    parser.add_argument("--out", default=OUT, help="where the SVG files go")
    opts = parser.parse_args(argv)
    out = Path(opts.out)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    run, transformers, control = _load(opts.run), _load(opts.transformers), _load(opts.control_flow)
    if run is not None:
        written.append(speedup_chart(run, out / "speedup.svg", "Speedup over eager per model (Inductor)"))
        written.append(compile_time_chart(run, out / "compile_time.svg"))
    if transformers is not None:
        written.append(speedup_chart(transformers, out / "transformers_speedup.svg",
                                     "transformers suite: speedup over eager (Inductor)"))
    if control is not None:
        written.append(control_flow_chart(control, out / "control_flow.svg"))
    for path in written:
        print(f"wrote {path}")
    return written


if __name__ == "__main__":
    main()
