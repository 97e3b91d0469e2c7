"""Random small programs over the features real models use, and call plans that change
the way real calls change.

Invariants that keep every program valid, deterministic and finite whatever statements the
minimiser drops: ``h`` is always a float tensor of ``x``'s shape ``(B, 4)``; ``acc`` is a
Python float, ``k`` a Python int, ``L`` a list whose items add to ``h``, ``d`` a dict; every
loop is bounded by a small constant; random numbers come from torch's global generator only
(the calls reseed it as seeded programs do).  Eager may raise (an uncaught ZeroDivisionError,
the program's own ``raise``): magpy must then raise the same.
"""
from __future__ import annotations

import random

from tests.fuzz.program import PROLOGUE, Node, Program

C = ("0.5", "2.0", "-1.0", "0.1", "1.5", "3")            # constants
PY_COND = ("n > 0", "s < 0", "name == 'neg'", "k % 2 == 0", "acc > 1.0", "m.flag", "N > 1",
           "len(L) > 2", "'a' in G", "G.get('k', 0) > 0", "n == 0", "s == 1.0", "not name",
           "m.count > 2", "LST[0] > 0", "Z < 0")
T_COND = ("h.sum() > 0", "x.mean() < 0", "bool((h > 0).any())", "h.max().item() > 0.5",
          "float(x.sum()) > 0", "int(h.sum()) != 0", "(h * s).sum() > 0", "m.buf.sum() > 0",
          "T.sum() > 0", "h[0, 0] > 0")
RANGE = ("2", "3", "abs(n)", "k % 3", "len(L)", "max(n, 0)", "int(abs(s)) + 1", "x.shape[0]")

TENSOR = (
    "h = h * {c} + x", "h = torch.relu(h) - {c}", "h = h @ W", "h = m.lin(h)", "h = h * s",
    "h = h + n", "h = h / (abs(s) + 1)", "h = h * m.scale", "h = h + T", "h = h + m.buf",
    "h = torch.tanh(h * m.w)", "h = h.softmax({dim})", "h = h.sum({dim}, keepdim=True) * 0.1 + h",
    "h = h.clamp(min={c})", "h = h.mean() + h", "h = helper(h, {c})", "h = helper(h, s)",
    "h = scale_fn(h)", "h = h * x.shape[0]", "h = h + len(L)", "h = h + acc", "h = h * k",
    "h = torch.where(h > 0, h, x)", "h = h + L[-1]", "h = h + d.get('b', 0)",
    "a, b = h.chunk(2, dim=1)\nh = torch.cat([b, a], 1)", "h = h.contiguous().view(x.shape[0], -1)",
    "h = h.softmax(n % 2)", "h = h * N", "h = h + LST[0]", "h = h - Z", "h = torch.stack([h, x]).mean(0)",
)
SCALAR = (
    "acc = acc + {c}", "acc = acc * s", "acc += float(h.sum())", "acc = acc + h.mean().item()",
    "k = k + int(h.sum() > 0)", "k += n", "k = k * 2 - n", "k = len(name) + k",
    "acc = acc + bool(h.min() < 0)",
    "k = k + h.shape[0]", "acc = round(acc, 2)", "k = int(x.abs().sum())", "acc = acc + x[0, 0].item()",
    "tp = (h, k)\nh, k = tp[0] * 2, tp[1] + 1",
)
CONTAINER = (
    "L.append(h)", "L.append(k)", "L.extend([acc, h * 2])", "L[0] = h * 2", "d['b'] = h",
    "d[name] = acc", "d.update(c=k)", "acc += len(d)", "k += sum(1 for r in x if r.sum() > 0)",
    "L = [t * 2 for t in L]", "d = {{key: v for key, v in d.items() if key != 'a'}}", "L.insert(0, acc)",
    "if len(L) > 1:\n    L.pop()",
)
GLOBAL = (
    "N = N + 1", "N += k", "G['k'] = G.get('k', 0) + 1", "G['last'] = float(h.sum())", "LST.append(k)",
    "LST[0] = LST[0] + 1", "Z = h.sum().item()", "T.add_(1)", "T[0] = acc", "T.mul_(0.5)", "T += 0.1",
    "G.pop('a', None)", "N = n", "T = T + 1", "Z = s",
)
MODULE = (
    "m.count += 1", "m.scale = m.scale * 0.9", "m.flag = not m.flag", "m.last = float(h.mean())",
    "m.hist.append(k)", "m.scale = s", "with torch.no_grad():\n    m.buf.add_(h.mean())", "m.buf.mul_(0.9)",
)
INPLACE = (
    "h.add_(1)", "h.mul_({c})", "h[0] = {c}", "h[:, 0] += acc", "h.clamp_(-5, 5)",
    "h.masked_fill_(h > 1, 1.0)", "x.add_(0.5)", "h[-1] = h[0] * 2", "h[k % h.shape[0]] = 0",
)
EFFECT = (
    "print('k', k, file=LOG)", "print(f'{{acc:.3f}}', file=LOG)", "print(name, tuple(h.shape), file=LOG)",
    "LOG.write(f'{{float(h.sum()):.4f}}\\n')",
    "h = h + torch.randn_like(h) * 0.1", "h = torch.nn.functional.dropout(h, 0.5, training=True)",
    "h = h + torch.rand(4)", "k += int(torch.randint(0, 3, ()).item())",
)
LOOP_VAR = ("h = h + i", "acc += i * s", "h[i % h.shape[0]] += 1", "L.append(i)", "k += i")
ROW_VAR = ("acc = acc + float(row.sum())", "h = h + row", "k += 1", "h = torch.tanh(h + row * 0.5)",
           "L.append(row)")
RAISE = ('raise RuntimeError("stop")', 'raise ValueError("bad")', "raise KeyError('q')")
GROUPS = (TENSOR, TENSOR, SCALAR, CONTAINER, GLOBAL, MODULE, INPLACE, EFFECT)


class Gen:
    """One program's random choices."""

    def __init__(self, seed: int, ints=None):
        self.ints = ints or N_VALUES
        self.r = random.Random(seed)
        self.seed = seed
        self.loop_depth = 0
        self.whiles = 0

    def pick(self, seq):
        return self.r.choice(seq)

    def fill(self, template: str) -> str:
        return template.format(c=self.pick(C), dim=self.pick(("0", "1", "-1")))

    def simple(self, extra=()) -> Node:
        group = self.pick(GROUPS + tuple(extra))
        return Node(self.fill(self.pick(group)))

    def block(self, depth: int, size: int, extra=()) -> list:
        return [self.stmt(depth, extra) for _ in range(size)]

    def stmt(self, depth: int, extra=()) -> Node:
        if depth >= 2 or self.r.random() < 0.6:
            return self.simple(extra)
        kind = self.pick(COMPOUND)
        return kind(self, depth + 1, extra)

    # compound statements, each builds from block()

    def if_(self, depth, extra):
        cond = self.pick(PY_COND if self.r.random() < 0.5 else T_COND)
        parts = [(f"if {cond}:", self.block(depth, self.r.randint(1, 3), extra))]
        if self.r.random() < 0.5:
            parts.append(("else:", self.block(depth, self.r.randint(1, 2), extra)))
        return Node(parts=parts)

    def ternary(self, depth, extra):
        return Node(f"h = h * {self.pick(C)} if {self.pick(T_COND + PY_COND)} else h - 1")

    def for_range(self, depth, extra):
        self.loop_depth += 1
        var = "i" if self.loop_depth == 1 else "j"
        body = self.block(depth, self.r.randint(1, 3), extra + ((LOOP_VAR,) if var == "i" else ()))
        self.loop_depth -= 1
        if self.r.random() < 0.3:
            body.insert(self.r.randint(0, len(body)), Node(parts=[
                (f"if {var} == 1:", [Node(self.pick(("break", "continue")))])]))
        return Node(parts=[(f"for {var} in range({self.pick(RANGE)}):", body)])

    def for_rows(self, depth, extra):
        body = self.block(depth, self.r.randint(1, 2), extra + (ROW_VAR,))
        if self.r.random() < 0.3:
            body.insert(0, Node(parts=[("if row.sum() > 0:", [Node(self.pick(("continue", "break")))])]))
        return Node(parts=[("for row in x:", body)])

    def while_(self, depth, extra):
        cond = self.pick(("h.abs().sum() > 1.0", "acc < 3.0", "m.count < 3", "True"))
        self.whiles += 1
        j = f"w{self.whiles}"   # each loop its own counter: an inner loop never resets an outer one's
        body = self.block(depth, self.r.randint(1, 2), extra) + [Node(f"{j} += 1", keep=True)]
        return Node(f"{j} = 0", [(f"while {j} < 3 and {cond}:", body)])

    def with_(self, depth, extra):
        ctx = self.pick(("torch.no_grad()", "torch.no_grad()", "torch.enable_grad()"))
        return Node(parts=[(f"with {ctx}:", self.block(depth, self.r.randint(1, 3), extra))])

    def try_(self, depth, extra):
        probe = self.pick((
            ("v = L[{i}]\nh = h + v", "IndexError", "v = h"),
            ("h = h + d[name]", "KeyError", "d[name] = acc"),
            ("acc = acc / k", "ZeroDivisionError", "acc = 0.0"),
            ("acc = 1.0 / int(h.sum())", "ZeroDivisionError", "acc = -1.0"),
            ("v = LST[n]\nk += v", "IndexError", "k -= 1"),
            ("h = h + G['k'] * d['c']", "KeyError", "k += 2"),
            ("if {cond}:\n    raise ValueError('x')", "ValueError", "k += 1"),
        ))
        text, exc, handler = probe
        text = text.format(i=self.pick(("n", "3", "k", "-1", "1")), cond=self.pick(T_COND + PY_COND))
        body = [Node(text)] + self.block(depth, self.r.randint(0, 1), extra)
        parts = [("try:", body), (f"except {exc}:", [Node(handler)])]
        if self.r.random() < 0.2:
            parts.append(("finally:", [Node("k += 10")]))
        return Node(parts=parts)

    def closure(self, depth, extra):
        if self.r.random() < 0.5:
            return Node(f"def g(t):\n    return t * {self.pick(C)} + acc\nh = g(h)")
        return Node("def bump():\n    nonlocal k\n    k += 1\nbump()")

    def early_return(self, depth, extra):
        return Node(parts=[(f"if {self.pick(PY_COND + T_COND)}:", [Node(f"return {self.ret()}")])])

    def raise_(self, depth, extra):
        return Node(parts=[(f"if {self.pick(PY_COND + T_COND)}:", [Node(self.pick(RAISE))])])

    def ret(self) -> str:
        return self.pick(("h", "(h, acc, k)", "h.sum() + acc", "{'h': h, 'k': k}", "[h, L[-1]]", "acc",
                          "k", "None", "x", "h * 1"))

    def program(self) -> Program:
        body = [Node(p) for p in PROLOGUE] + self.block(0, self.r.randint(4, 12))
        body.append(Node(f"return {self.ret()}"))
        return Program(self.seed, self.r.random() < 0.35, body, CallPlan(self.r, self.ints).calls())


COMPOUND = (Gen.if_, Gen.if_, Gen.ternary, Gen.for_range, Gen.for_rows, Gen.while_, Gen.with_, Gen.with_,
            Gen.try_, Gen.try_, Gen.closure, Gen.early_return, Gen.raise_)

S_VALUES = ("0.5", "-1.5", "0.0", "1.0", "2.0", "-0.25", "0.5")
N_VALUES = ("-2", "-1", "0", "1", "2", "3", "1")
# Profiles: the Python ints the calls pass and store.  "nonneg" steers clear of issue 33's
# cause E (a negative int that changes between calls), which would hide what else fails.
PROFILES = {"default": N_VALUES, "nonneg": ("0", "1", "2", "3", "1")}
NAMES = ("'pos'", "'neg'", "''", "'abs'")
MUTATIONS = (
    "N = {i}", "G['k'] = {i}", "G.pop('a', None)", "G['a'] = {i}", "LST[0] = {i}", "LST.append({i})",
    "M.scale = {f}", "M.flag = not M.flag", "M.count = {i}", "T.fill_({f})", "X.mul_(-1)", "M.hist.clear()",
    "Z = {f}", "M.eval()", "M.train()", "M.buf.zero_()", "LOG.truncate(0); LOG.seek(0)", "T = torch.ones(4)",
    "torch.manual_seed({i})",
)


class CallPlan:
    """6-10 calls: the first, then the same objects again, then new values, new sizes, new
    Python scalars and strings, and external state mutated between calls."""

    def __init__(self, r: random.Random, ints=N_VALUES):
        self.r, self.ints = r, ints
        self.b = r.choice((2, 3, 4))
        self.s, self.n, self.name = "0.5", "1", "'pos'"

    def new_x(self, b=None) -> str:
        self.b = b or self.b
        return f"X = torch.randn({self.b}, 4, generator=GEN)"

    def args(self) -> str:
        return f"ARGS = (X, {self.s}, {self.n}, {self.name})"

    def calls(self) -> list[str]:
        r = self.r
        calls = [f"{self.new_x()}; {self.args()}", self.args()]
        for _ in range(r.randint(4, 8)):
            stmts = []
            for _ in range(r.randint(1, 2)):
                kind = r.choice(("same", "values", "size", "s", "n", "name", "mutate", "mutate", "seed"))
                stmts.append(self.change(kind))
            calls.append("; ".join(s for s in stmts if s) + ("; " if any(stmts) else "") + self.args())
        return calls

    def change(self, kind: str) -> str:
        r = self.r
        if kind == "values":
            return self.new_x()
        if kind == "size":
            return self.new_x(r.choice((1, 2, 3, 4, 5)))
        if kind == "s":
            self.s = r.choice(S_VALUES)
        elif kind == "n":
            self.n = r.choice(self.ints)
        elif kind == "name":
            self.name = r.choice(NAMES)
        elif kind == "mutate":
            return r.choice(MUTATIONS).format(i=r.choice(self.ints), f=r.choice(S_VALUES))
        elif kind == "seed":
            return f"torch.manual_seed({r.randint(0, 3)})"
        return ""


def generate(seed: int, profile: str = "default") -> Program:
    """The program of ``seed`` (the same program for the same seed and profile, always)."""
    return Gen(seed, PROFILES[profile]).program()
