"""``python -m benchmarks.plots``: benchmark JSON to the site's charts (benchmarks/plots.py)."""
import json

import pytest

pytest.importorskip("matplotlib")

from benchmarks import control_flow, plots  # noqa: E402


def test_charts_of_the_published_figures(tmp_path):
    written = plots.main(["--out", str(tmp_path)])
    assert sorted(p.name for p in written) == ["compile_time.svg", "control_flow.svg", "speedup.svg",
                                               "transformers_speedup.svg"]
    speedup = (tmp_path / "speedup.svg").read_text()
    assert speedup.startswith("<?xml") and "resnet101" in speedup and "torch.compile" in speedup
    # The site shows these very files: regenerating them changes nothing.
    for path in written:
        assert path.read_bytes() == (plots.OUT / path.name).read_bytes(), "run: python -m benchmarks.plots"


def test_control_flow_json_is_what_the_plot_reads(tmp_path):
    rows = [{"variant": v, "total": t, "median": 1.0, "steady": None, "compilations": "-", "error": None,
             "mismatches": [], "times": [t], "outputs": []} for v, t in (("eager", 0.4), ("magpy", 1.4))]
    path = tmp_path / "cf.json"
    control_flow.write_json(str(path), {"cpu": "test"}, {}, {"blockdrop": rows}, 50)
    data = json.loads(path.read_text())
    assert data["models"]["blockdrop"][1] == {"variant": "magpy", "total": 1.4, "median": 1.0, "steady": None,
                                              "compilations": "-", "error": None, "correct": "yes"}
    out = plots.main(["--run", str(tmp_path / "none.json"), "--transformers", str(tmp_path / "none.json"),
                      "--control-flow", str(path), "--out", str(tmp_path / "charts")])
    assert [p.name for p in out] == ["control_flow.svg"]
