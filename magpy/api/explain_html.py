"""``magpy.explain(fn, *args).html(path)``: one self-contained HTML page of an Explanation.

The page holds the call as a timeline of graphs, eager steps and checks (in the order the
mock runs them, each break with the user's line), each graph's operations by kind and code,
the guard's checks in words, and the generated guard, fast guard and mock source with a
little highlighting.  Everything is inline (no scripts, fonts or stylesheets from elsewhere),
so the file opens offline and can be attached to a bug report.
"""
from __future__ import annotations

import html
import keyword
import re

_CSS = """
body{font-family:system-ui,sans-serif;margin:2em auto;max-width:72em;color:#1b1b1f;padding:0 1em}
h1{font-size:1.5em}h2{font-size:1.2em;margin-top:2em;border-bottom:1px solid #ddd}
.timeline{display:flex;flex-wrap:wrap;gap:.4em;align-items:stretch;list-style:none;padding:0}
.timeline li{border-radius:6px;padding:.5em .8em;max-width:26em;font-size:.9em}
.graph{background:#dbeafe;border:1px solid #3b82f6}.step{background:#fef3c7;border:1px solid #d97706}
.check{background:#f3e8ff;border:1px solid #9333ea}.eager{background:#fee2e2;border:1px solid #dc2626}
.timeline li code{display:block;margin-top:.3em;white-space:pre-wrap}
table{border-collapse:collapse}td,th{border:1px solid #ddd;padding:.2em .6em;text-align:left}
pre{background:#f6f8fa;padding:1em;overflow-x:auto;font-size:.85em;line-height:1.35}
.kw{color:#a626a4;font-weight:bold}.str{color:#50a14f}.com{color:#8a8a8a;font-style:italic}.num{color:#986801}
"""

_TOKENS = re.compile(r"(?P<com>#[^\n]*)|(?P<str>'(?:\\.|[^'\\\n])*'|\"(?:\\.|[^\"\\\n])*\")"
                     r"|(?P<num>\b\d+(?:\.\d+)?\b)|(?P<word>\b[A-Za-z_]\w*\b)")


def highlight(source: str) -> str:
    """``source`` (Python) escaped for HTML, comments, strings, numbers and keywords in spans."""
    out, end = [], 0
    for m in _TOKENS.finditer(source):
        out.append(html.escape(source[end:m.start()]))
        kind, text = m.lastgroup, m.group()
        if kind == "word":
            kind = "kw" if keyword.iskeyword(text) else None
        out.append(f'<span class="{kind}">{html.escape(text)}</span>' if kind else html.escape(text))
        end = m.end()
    out.append(html.escape(source[end:]))
    return "".join(out)


def _op_counts(gm) -> list[tuple[str, int]]:
    counts: dict[str, int] = {}
    for n in gm.graph.nodes:
        if n.op.startswith("call"):
            name = n.target if isinstance(n.target, str) else getattr(n.target, "__name__", str(n.target))
            counts[name] = counts.get(name, 0) + 1
    return sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))


# The kind of each line of Explanation.segments, by its first word.
_SEGMENT_KINDS = {"graph": "graph", "step": "step", "check": "check"}


def _timeline(ex) -> list[tuple[str, str, str]]:
    """(css class, title, detail) per part of the call, in the order the mock runs them."""
    segments = ex.segments if len(ex.segments) > 1 else [f"graph {i}: {sum(n for _, n in _op_counts(gm))} "
                                                         "operations" for i, gm in enumerate(ex.graphs)]
    parts = []
    for line in segments:
        kind = _SEGMENT_KINDS.get(line.split(" ", 1)[0], "step")
        title, _, detail = line.partition("  <- ")   # a step: what it calls, then why and where
        parts.append((kind, title, detail))
    if ex.eager and ex.break_reasons:
        brk = ex.break_reasons[-1]
        parts.append(("eager", "the rest of the call runs eagerly", f"{brk.reason}\n{_where(brk)}"))
    return parts


def _where(brk) -> str:
    line = f"{brk.filename}:{brk.lineno}"
    return f"{line}\n{brk.source}" if brk.source else line


def _section(title: str, body: str) -> str:
    return f"<h2>{html.escape(title)}</h2>\n{body}\n"


def _lines(items) -> str:
    return "<ul>" + "".join(f"<li><code>{html.escape(str(i))}</code></li>" for i in items) + "</ul>"


def _source(title: str, src: str | None) -> str:
    return "" if not src else _section(title, f"<pre><code>{highlight(src)}</code></pre>")


def render(ex, title: str = "magpy.explain") -> str:
    """The HTML page of Explanation ``ex``."""
    items = "".join(f'<li class="{k}"><b>{html.escape(t)}</b>'
                    + (f"<code>{html.escape(d)}</code>" if d else "") + "</li>" for k, t, d in _timeline(ex))
    body = [f"<h1>{html.escape(title)}</h1>", f"<p>{html.escape(ex.summary()[0])}</p>",
            _section("Timeline of the call", f'<ol class="timeline" id="timeline">{items}</ol>')]
    if ex.inputs or ex.dynamic:
        body.append(_section("Guards in words", _lines(ex.inputs) + (
            "<p>Dynamic sizes:</p>" + _lines(ex.dynamic) if ex.dynamic else "")))
    if ex.control_flow:
        body.append(_section("Control flow", _lines(ex.control_flow)))
    if ex.autopilot:
        body.append(_section("Compiles and the autopilot's choices", _lines(ex.autopilot)))
    if ex.recompiles:
        body.append(_section("Recompile history (why each recording after the first was made)",
                             _lines(f"recording {i + 2}: {why}" for i, why in enumerate(ex.recompiles))))
    for i, gm in enumerate(ex.graphs):
        rows = "".join(f"<tr><td><code>{html.escape(k)}</code></td><td>{n}</td></tr>"
                       for k, n in _op_counts(gm))
        body.append(_section(f"Graph {i}", f"<table><tr><th>operation</th><th>count</th></tr>{rows}</table>"
                             f"<details><summary>code</summary><pre><code>{highlight(gm.code.strip())}"
                             "</code></pre></details>"))
    body += [_source("Guard", ex.guard_source), _source("Shape check (SHAPES)", ex.shape_check_source),
             _source("Fast guard", ex.fast_guard_source), _source("Mock", ex.mock_source)]
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>{html.escape(title)}</title><style>{_CSS}</style></head>\n<body>\n"
            + "\n".join(body) + "\n</body></html>\n")
