"""mamba2, zamba2, bamba, granitemoehybrid, falcon_h1, qwen3_next, qwen3_5, nemotron_h, olmo_hybrid,
kimi_linear, ... (GUARD_MISS on every call, even the same inputs): transformers' ``ACT2FN`` is a
``ClassInstantier`` (an OrderedDict subclass whose ``__getitem__`` builds a *new* activation
module on each lookup).  Their linear-attention/Mamba-2 mixers do ``ACT2FN["silu"]`` inside
``forward``; magpy guards the looked-up module's identity ("ACT2FN['silu']: expected the
recorded SiLUActivation, got SiLUActivation()"), so every call misses and records again, up to
``cache_size_limit`` records, then runs eagerly for good.

Plain-Python reduction: a dict subclass whose ``__getitem__`` returns a fresh object."""
import collections

import torch

import magpy

torch.set_num_threads(1)
magpy.config.verify_fast_guard = True


class ClassInstantier(collections.OrderedDict):   # transformers.activations.ClassInstantier
    def __getitem__(self, key):
        content = super().__getitem__(key)
        cls, kwargs = content if isinstance(content, tuple) else (content, {})
        return cls(**kwargs)


ACT2FN = ClassInstantier(silu=torch.nn.SiLU)


def f(x):
    return ACT2FN["silu"](x) * 2


x = torch.randn(4)
compiled = magpy.compile(f, backend="eager")
for _ in range(3):
    torch.testing.assert_close(compiled(x), f(x))
s = magpy.stats(compiled)
print(f"monitor_runs {s.monitor_runs} mock_runs {s.mock_runs} eager_runs {s.eager_runs} "
      f"graphs {s.graph_count} (one record reused would be 1/2/0/1)")
