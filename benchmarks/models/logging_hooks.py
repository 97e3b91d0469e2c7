"""``bert_log``: the zoo's BERT with a per-layer activation-logging forward hook.

A common way to debug activation scale: a forward hook on every encoder layer computes
``float(hidden.norm())`` of the layer's output hidden states and appends it to a Python
list on a small logger object.  The ``float()`` makes every layer a graph break (the value
leaves the tensor world and lands in a Python list), so a compiler has to run the model as
several segments, or eagerly.

The wrapper's ``forward`` clears the log at the start of every call (the appends stay in
the hook), so after a call ``logger.history`` holds exactly that call's norms, one per
encoder layer, in layer order: the list does not grow over a benchmark's hundreds of calls,
and ``log_snapshot()`` after a call can be compared between eager and compiled runs
(``benchmarks/run.py`` does).

The BERT inside is ``hf.bert(size)``: the same config, weights (``torch.manual_seed(0)``)
and inputs as the zoo's ``bert`` builder; the output is the same
``BaseModelOutputWithPoolingAndCrossAttentions``.
"""
from __future__ import annotations

import torch
import torch.nn as nn

from . import hf

__all__ = ["NormLogger", "BertWithLogging", "bert_log"]


class NormLogger:
    """Keeps ``float(hidden.norm())`` of each hooked layer's output in ``history``."""

    def __init__(self) -> None:
        self.history: list[float] = []

    def hook(self, module: nn.Module, args: tuple, output) -> None:
        """A forward hook: ``module.register_forward_hook(logger.hook)``."""
        hidden = output[0] if isinstance(output, tuple) else output
        self.history.append(float(hidden.norm()))

    def clear(self) -> None:
        self.history.clear()


class BertWithLogging(nn.Module):
    """A ``BertModel`` whose encoder layers log their output norms to ``self.logger``."""

    def __init__(self, bert: nn.Module) -> None:
        super().__init__()
        self.bert = bert
        self.logger = NormLogger()
        self.hook_handles = [layer.register_forward_hook(self.logger.hook)
                             for layer in bert.encoder.layer]

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None):
        self.logger.clear()  # one call's norms: the list stays bounded across calls
        return self.bert(input_ids=input_ids, attention_mask=attention_mask)

    def log_snapshot(self) -> list[float]:
        """A copy of the last call's norms (one per encoder layer)."""
        return list(self.logger.history)


def bert_log(size: str = "test"):
    """``(BertWithLogging, inputs)``: ``hf.bert(size)`` with a logging hook on every layer."""
    model, inputs = hf.bert(size)
    return BertWithLogging(model).eval(), inputs
