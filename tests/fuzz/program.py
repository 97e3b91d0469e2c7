"""A fuzz program: the world it runs in, its body as a statement tree, and its call plan.

Everything is source text, so a failing program prints (and saves) as a standalone,
reproducible script, and the minimiser can drop statements and calls and render again.

The world (:data:`WORLD`) is the external state every program may read and write: globals
(``N``, ``Z``, ``G``, ``LST``, ``T``, ``W``, ``LOG``), helper functions and a closure, and an
``nn.Module`` ``M`` (a Linear, a parameter, a buffer and plain attributes).  A program is
either a function ``f(x, s, n, name)`` over the world or the module's ``forward`` (the body
names the module ``m`` in both).  :data:`STATE` lists what the runner compares after a call.
"""
from __future__ import annotations

import dataclasses

# Built in each world's own namespace, seeded, before the program is defined.  ``GEN`` builds
# the call arguments without touching torch's global generator (whose state is compared).
WORLD = '''\
import io
import torch
torch.manual_seed(0)
GEN = torch.Generator().manual_seed(1)
LOG = io.StringIO()
N = 0
Z = 0.0
G = {"a": 1, "k": 0}
LST = [0, 1]
T = torch.zeros(4)
W = torch.randn(4, 4, generator=GEN) * 0.5


def helper(t, c):
    if c > 0:
        return t * c
    return t - c


def make_scaler(c):
    def scale(t):
        return t * c + Z
    return scale


scale_fn = make_scaler(1.5)


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)
        self.w = torch.nn.Parameter(torch.randn(4, generator=GEN))
        self.register_buffer("buf", torch.zeros(4))
        self.count = 0
        self.scale = 1.0
        self.flag = True
        self.hist = []
'''

STATE = ("N", "Z", "G", "LST", "T", "W", "LOG", "M", "X")

# The first statements of every body (the minimiser may drop them like any other).
PROLOGUE = [
    "global N, T, Z",
    "h = x * 1.0",
    "acc = 0.0",
    "k = 0",
    "L = [h]",
    "d = {'a': 1}",
]


@dataclasses.dataclass
class Node:
    """A statement: ``text`` (one or more lines), then ``parts``: a list of (header line,
    body) for a compound statement (if/else, for, while, with, try)."""

    text: str = ""
    parts: list = dataclasses.field(default_factory=list)
    keep: bool = False     # the minimiser leaves it (a loop counter's step: without it, no end)

    def render(self, indent: str) -> list[str]:
        out = [indent + line for line in self.text.split("\n")] if self.text else []
        for header, body in self.parts:
            out.append(indent + header)
            out.extend(render_body(body, indent + "    "))
        return out


def render_body(body: list, indent: str) -> list[str]:
    lines = [line for node in body for line in node.render(indent)]
    return lines or [indent + "pass"]


@dataclasses.dataclass
class Program:
    """One generated program and the calls to make of it."""

    seed: int
    module: bool                  # True: the body is M's forward; False: a function f
    body: list                    # of Node
    calls: list                   # of str: statements run in the world before each call, setting ARGS

    def function_source(self) -> str:
        """The program itself (function or class), as its world defines it."""
        prologue = [Node("m = self" if self.module else "m = M")]
        if self.module:
            head = "class Prog(Net):\n    def forward(self, x, s, n, name):"
            return head + "\n" + "\n".join(render_body(prologue + self.body, " " * 8)) + "\n\n\nM = Prog()\n"
        head = "M = Net()\n\n\ndef f(x, s, n, name):"
        return head + "\n" + "\n".join(render_body(prologue + self.body, " " * 4)) + "\n"

    def source(self) -> str:
        """World and program: what each side executes."""
        return WORLD + "\n\n" + self.function_source()

    @property
    def target(self) -> str:
        """The name of what is compiled."""
        return "M" if self.module else "f"

    def nodes(self):
        """Every statement of the body with its parent list, depth first."""
        def walk(body):
            for node in body:
                yield body, node
                for _, sub in node.parts:
                    yield from walk(sub)
        return walk(self.body)
