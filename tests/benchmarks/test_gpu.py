"""benchmarks/gpu.py's plumbing on the CPU (eager only: the compiles are the GPU run's to pay)."""
from __future__ import annotations

import json

from benchmarks import gpu


def test_gpu_table_dry_run(tmp_path):
    status = gpu.main(["--device", "cpu", "--quick", "--sections", "mlp,blockdrop", "--variants", "eager",
                       "--calls", "2", "--out", str(tmp_path)])
    data = json.loads((tmp_path / "gpu.json").read_text())
    assert status == 0 and data["complete"] and data["device"] == "cpu"
    rows = {(r["section"], r["variant"]): r for r in data["rows"]}
    assert set(rows) == {("mlp", "eager"), ("blockdrop", "eager")}
    assert all(r["steady_ms"] > 0 and r["error"] is None for r in rows.values())
    assert rows["blockdrop", "eager"]["calls"] == 2
    markdown = (tmp_path / "gpu.md").read_text()
    assert "| mlp | eager |" in markdown and "| blockdrop | eager |" in markdown


def test_gpu_table_records_a_failing_section_and_goes_on(tmp_path, monkeypatch):
    def broken(size):
        raise RuntimeError("no such model here")
    monkeypatch.setitem(gpu.BUILDERS, "mlp", broken)
    status = gpu.main(["--device", "cpu", "--quick", "--sections", "mlp,blockdrop", "--variants", "eager",
                       "--calls", "2", "--out", str(tmp_path)])
    rows = json.loads((tmp_path / "gpu.json").read_text())["rows"]
    assert status == 1
    assert rows[0]["section"] == "mlp" and "no such model here" in rows[0]["error"]
    assert [r["section"] for r in rows[1:]] == ["blockdrop"] and rows[1]["error"] is None
