"""t5gemma2, nemotron3_5_asr, nemotron_asr_streaming(_encoder), unlimited_ocr (BREAK, whole call
eager): torch.vmap.  transformers' masking_utils builds some attention masks with
``torch.vmap`` over a mask function (``_vmap_for_bhqkv``); inside vmap the batched tensors
(functorch wrappers made in C) reach an op: "a tensor of unknown origin (shape ()) reached an op
at torch/_functorch/apis.py:246", and the call runs eagerly (every call: no graph at all)."""
import torch

import magpy

torch.set_num_threads(1)


def mask_fn(b, q, kv):          # a causal mask function of scalar indices, as transformers writes them
    return kv <= q


def f(x):
    q = torch.arange(x.shape[1])
    kv = torch.arange(x.shape[1])
    mask = torch.vmap(torch.vmap(mask_fn, in_dims=(None, None, 0)), in_dims=(None, 0, None))(0, q, kv)
    return x.masked_fill(~mask, 0.0) * 2


x = torch.randn(4, 4)
compiled = magpy.compile(f, backend="eager")
for _ in range(3):
    assert torch.equal(compiled(x), f(x))
s = magpy.stats(compiled)
print(s.monitor_runs, s.mock_runs, s.eager_runs, s.graph_count, s.break_reasons[:1])
