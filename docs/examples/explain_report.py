"""The example report on the site (docs/explain-report.md): python docs/examples/explain_report.py"""
import pathlib

import torch

import magpy


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.layer1 = torch.nn.Linear(16, 32)
        self.layer2 = torch.nn.Linear(32, 4)
        self.norms = []
    def forward(self, x):
        h = torch.relu(self.layer1(x))
        if h.mean() > 0:                       # a tensor if: torch.cond
            h = h * 2
        self.norms.append(h.norm().tolist())   # eager step
        print("layer 1 done")                  # eager step (I/O)
        return self.layer2(h)

ex = magpy.explain(Net(), torch.randn(8, 16))
print(ex)
ex.html(pathlib.Path(__file__).parent.parent / "assets" / "explain-report.html",
        title="magpy.explain(Net(), x)")
