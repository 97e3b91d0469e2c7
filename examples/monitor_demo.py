"""Watch a real model run under magpy's monitor.

Runs a small transformers BERT (random weights, no downloads) natively and under the
monitor, checks the outputs are bit-identical, and prints what the monitor observed:
instructions executed, frames entered, and the tensor operations called natively.

    python examples/monitor_demo.py
"""
import collections

import torch
from transformers import BertConfig, BertModel

import magpy.capture.monitor as monitor


class Summary(monitor.Observer):
    def __init__(self):
        self.instructions = 0
        self.entered = collections.Counter()
        self.native = collections.Counter()

    def on_instruction(self, frame, instruction, inputs, outputs):
        self.instructions += 1

    def on_call(self, frame, callee, args, kwargs, result, entered):
        name = getattr(callee, "__qualname__", type(callee).__name__)
        (self.entered if entered else self.native)[name] += 1


def main():
    torch.manual_seed(0)
    config = BertConfig(vocab_size=1000, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                        intermediate_size=128, attn_implementation="eager")
    model = BertModel(config).eval()
    input_ids = torch.randint(0, 1000, (1, 16))

    with torch.no_grad():
        expected = model(input_ids)
        summary = Summary()
        got = monitor.Monitor([summary]).run(model, input_ids)

    same = torch.equal(expected.last_hidden_state, got.last_hidden_state)
    print(f"outputs bit-identical to eager: {same}")
    print(f"instructions executed under the monitor: {summary.instructions}")
    print(f"Python frames entered: {sum(summary.entered.values())}")
    print("most-called functions entered:", ", ".join(f"{n} x{c}" for n, c in summary.entered.most_common(5)))
    print("most-called native callees:", ", ".join(f"{n} x{c}" for n, c in summary.native.most_common(5)))


if __name__ == "__main__":
    main()
