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

compiled = magpy.compile(Net(), backend="eager")
for batch in (8, 8, 4):                        # a new batch size: a second recording
    compiled(torch.randn(batch, 16))
ex = magpy.explain(compiled, torch.randn(8, 16))
print(ex)
page = ex.html(title="magpy.explain(compiled, x)")
root = pathlib.Path(__file__).resolve().parent.parent.parent
# (paths relative to the repository: the report names this file, not where it was checked out)
(root / "docs" / "assets" / "explain-report.html").write_text(page.replace(f"{root}/", ""))
