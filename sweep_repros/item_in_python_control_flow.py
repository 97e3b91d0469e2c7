"""The Tensor.item graph breaks (BREAK, the call runs in 2 graphs; documented behaviour: a number
read with ``.item()`` and then used by Python control flow is an eager step):

* xlm, flaubert: ``assert lengths.max().item() <= slen`` (modeling_xlm.py:793).  magpy already
  records ``assert <tensor>`` as a check in the graph (``opgraph._assertion``); the same assertion
  written on an ``.item()`` (a Python comparison of the float, then the assert) is an eager step.
* longformer, led: ``is_global_attn = is_index_global_attn.flatten().any().item()`` then
  ``if is_global_attn:`` in every layer (modeling_longformer.py:1175): the truth picks the code path.
"""
import torch

import magpy

torch.set_num_threads(1)


def assert_on_item(x, lengths):          # xlm / flaubert
    assert lengths.max().item() <= x.size(1)
    return x * 2


def assert_on_tensor(x, lengths):        # the same check without .item(): recorded in the graph
    assert lengths.max() <= x.size(1)
    return x * 2


def branch_on_item(x, mask):             # longformer / led
    is_global = mask.flatten().any().item()
    if is_global:
        return x * 2
    return x - 1


x, lengths, mask = torch.randn(2, 8), torch.tensor([8, 5]), torch.tensor([[0, 1], [0, 0]])
cases = ((assert_on_item, (x, lengths)), (assert_on_tensor, (x, lengths)), (branch_on_item, (x, mask)))
for fn, args in cases:
    compiled = magpy.compile(fn, backend="eager")
    for _ in range(3):
        torch.testing.assert_close(compiled(*args), fn(*args))
    s = magpy.stats(compiled)
    print(f"{fn.__name__:16s} stats {s.monitor_runs}/{s.mock_runs}/{s.eager_runs}/{s.graph_count} "
          f"breaks {dict(s.breaks)}")
    magpy.reset()
