"""Warm start: a second process compiling the same model with Inductor finds every graph in
Inductor's on-disk caches (FX graph cache and AOTAutograd cache) and compiles nothing new.

Each run is a fresh interpreter sharing one ``TORCHINDUCTOR_CACHE_DIR``; the child reports
torch's own cache counters.
"""
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def child(model: str) -> str:
    """A child program compiling ``model`` (source that makes ``model`` and an input ``x``)."""
    return textwrap.dedent("""
        import json, torch, magpy
        from torch._dynamo.utils import counters
        from torch._inductor import cpu_vec_isa

        probes = []   # Inductor's instruction-set probes: each starts a Python child
        probe = cpu_vec_isa.VecISA._probe_load
        cpu_vec_isa.VecISA._probe_load = lambda self, path: probes.append(str(self)) or probe(self, path)

        torch.manual_seed(0)
    """) + textwrap.dedent(model) + textwrap.dedent("""
        with torch.no_grad():
            out = model(x)
            torch.testing.assert_close(model(x), out)   # the first reuse starts the compile
            assert magpy.synchronize(600)
            torch.testing.assert_close(model(x), out)
        caches = {**counters["inductor"], **counters["aot_autograd"]}
        print(json.dumps({"graphs": magpy.stats(model).graph_count, "probes": len(probes),
                          "sets": len(cpu_vec_isa.valid_vec_isa_list()),
                          **{k: v for k, v in caches.items() if k.startswith(("fxgraph",
                          "autograd_cache"))}}))
    """)


CHILD = child("""
    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = torch.nn.Conv2d(3, 4, 3)
            self.bn = torch.nn.BatchNorm2d(4)
            self.fc = torch.nn.Linear(4 * 6 * 6, 5)

        def forward(self, x):
            y = self.bn(self.conv(x)).relu()
            if y.mean().item() > 10:   # a graph break: two graphs
                y = y * 2
            return self.fc(y.flatten(1)).softmax(-1)

    model = magpy.compile(Net().eval())
    x = torch.randn(2, 3, 8, 8)
""")

# A graph that rounds but has no BatchNorm (log-bucketed positions, as DeBERTa's).
ROUNDING_CHILD = child("""
    w = torch.randn(8, 3)

    def buckets(x):
        return (torch.ceil(torch.log(x.abs().clamp(min=1)) * 8) * torch.sign(x)) @ w

    model = magpy.compile(buckets)
    x = torch.randn(4, 8) * 100
""")


def run_child(cache_dir: Path, source: str = CHILD) -> dict:
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(cache_dir), "PYTHONPATH": str(ROOT)}
    env.pop("MAGPY_LOGS", None)
    done = subprocess.run([sys.executable, "-c", source], env=env, capture_output=True, text=True,
                          timeout=600, cwd=cache_dir)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_second_process_compiles_nothing_new(tmp_path):
    cold = run_child(tmp_path)
    assert cold["graphs"] == 2
    assert cold.get("fxgraph_cache_miss") == 2 and not cold.get("fxgraph_cache_bypass"), cold
    warm = run_child(tmp_path)
    assert warm.get("fxgraph_cache_hit") == 2 and not warm.get("fxgraph_cache_miss"), warm
    assert not warm.get("fxgraph_cache_bypass"), warm
    assert warm.get("autograd_cache_hit") == 2 and not warm.get("autograd_cache_miss"), warm
    # The base probe of each vector instruction set ran once, in the first process (magpy.backends.warm).
    assert cold["sets"] > 0 and warm["probes"] == cold["probes"] - cold["sets"], (cold, warm)


@pytest.mark.slow   # a process of its own compiling with a cold cache: 25 s
def test_a_rounding_graph_without_batch_norm_is_cached(tmp_path):
    # magpy hands Inductor a decomposition table of its own only for graphs with a BatchNorm
    # (with one, Inductor bypasses its FX graph cache).
    cold = run_child(tmp_path, ROUNDING_CHILD)
    assert cold["graphs"] == 1
    assert cold.get("fxgraph_cache_miss") == 1 and not cold.get("fxgraph_cache_bypass"), cold
    warm = run_child(tmp_path, ROUNDING_CHILD)
    assert warm.get("fxgraph_cache_hit") == 1 and not warm.get("fxgraph_cache_bypass"), warm
    assert warm.get("autograd_cache_hit") == 1, warm


def test_the_instruction_set_probe_is_skipped_only_where_every_set_passed(tmp_path, monkeypatch):
    from torch._inductor import cpu_vec_isa

    from magpy.backends import warm
    monkeypatch.setattr(cpu_vec_isa, "x86_isa_checker", lambda: ["avx2", "avx512"])
    probed = []

    def probe(valid):
        return lambda: probed.append(1) or valid

    for cache, valid, patch in [("one-failed", [cpu_vec_isa.VecAVX2()], {}),
                                ("all-passed", [cpu_vec_isa.VecAVX512(), cpu_vec_isa.VecAVX2()],
                                 {"cpp.vec_isa_ok": True})]:
        monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / cache))
        monkeypatch.setattr(cpu_vec_isa, "valid_vec_isa_list", probe(valid))
        probed.clear()
        assert warm.inductor_patch() == patch and len(probed) == 1
        assert warm.inductor_patch() == patch and len(probed) == 1   # the kept answer
        (answer,) = json.loads((tmp_path / cache / "magpy" / "vec_isa.json").read_text()).values()
        assert answer == bool(patch)
