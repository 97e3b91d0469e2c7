"""``magpy.explain(fn, *args).html(path)``: one self-contained page (magpy/api/explain_html.py)."""
import re

import torch

import magpy
from magpy.api.explain_html import highlight


def _program(x, log):
    h = torch.relu(x) * 2
    if h.mean() > 0:                 # a torch.cond
        h = h + 1
    log.append(h.sum().tolist())     # an eager step
    return torch.tanh(h)


def test_html_report_of_a_call_in_pieces(tmp_path):
    ex = magpy.explain(_program, torch.randn(4, 3), [])
    path = tmp_path / "report.html"
    page = ex.html(path, title="explain <_program>")
    assert path.read_text(encoding="utf-8") == page
    assert page.startswith("<!DOCTYPE html>") and "<title>explain &lt;_program&gt;</title>" in page
    timeline = re.search(r'<ol class="timeline" id="timeline">(.*?)</ol>', page).group(1)
    kinds = re.findall(r'<li class="(\w+)">', timeline)
    assert kinds == ["graph", "step", "graph"]
    assert "log.append(h.sum().tolist())" in timeline            # the user's line of the step
    assert "Graph 0" in page and "<code>cond</code>" in page      # operations by kind
    assert "x: Tensor float32 [4, 3]" in page                     # the guard in words
    for title in ("Guard", "Fast guard", "Mock"):
        assert f"<h2>{title}</h2>" in page
    # Self-contained: nothing loaded from elsewhere.
    assert not re.search(r'<(script|link|img)\b|src=|@import|url\(', page)


def test_html_report_of_one_graph_lists_it_on_the_timeline():
    ex = magpy.explain(lambda x: torch.relu(x) + 1, torch.randn(2))
    timeline = re.search(r'<ol class="timeline" id="timeline">(.*?)</ol>', ex.html()).group(1)
    assert re.findall(r'<li class="(\w+)">', timeline) == ["graph"]


def test_highlight_escapes_and_marks_tokens():
    out = highlight("if a < 'b&c':  # x > 1\n    return 2")
    assert out == ('<span class="kw">if</span> a &lt; <span class="str">&#x27;b&amp;c&#x27;</span>:  '
                   '<span class="com"># x &gt; 1</span>\n    '
                   '<span class="kw">return</span> <span class="num">2</span>')


def test_recompile_history_of_a_compiled_callable():
    # A compiled callable's recordings after its first, with why (the newest record's guard
    # diagnosis then): in magpy.stats, in the summary and in the report.
    def scale(x, mode):
        return x * 2 if mode == "double" else x + 1

    compiled = magpy.compile(scale, backend="eager")
    x = torch.randn(3)
    for mode in ("double", "double", "add", "add", "double"):
        assert torch.equal(compiled(x, mode), scale(x, mode))
    history = magpy.stats(compiled).recompiles
    assert len(history) == 1 and "mode" in history[0], history
    ex = magpy.explain(compiled, x, "double")
    assert ex.recompiles == history
    assert f"  2: {history[0]}" in str(ex).splitlines()
    page = ex.html()
    assert "Recompile history" in page and f"recording 2: {history[0]}".replace("'", "&#x27;") in page
