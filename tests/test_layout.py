"""The source layout keeps the shape DESIGN.md gives it (issue 44): ``magpy/`` reads as the
pipeline, each stage imports only from the stages before it, and no class or function grows
past the size at which it holds more than one idea.

Read from the source (``ast``), not from imports at run time, so an import inside a function
counts as much as one at the top of a module.
"""
from __future__ import annotations

import ast
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1] / "magpy"

# The stages in the order data flows through them; a stage may import from those before it.
# config, errors and logs are the ground every stage stands on.
STAGES = ("capture", "graphs", "training", "backends", "records", "api")
GROUND = ("config", "errors", "logs")
MAX_CLASS_LINES = 400
MAX_FUNCTION_LINES = 80


def _modules() -> dict[str, pathlib.Path]:
    found = {}
    for path in ROOT.rglob("*.py"):
        parts = path.relative_to(ROOT.parent).with_suffix("").parts
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


MODULES = _modules()


def _imported(name: str, path: pathlib.Path) -> set[str]:
    """The magpy modules ``name`` imports, wherever in the module the import statement is."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names if a.name.startswith("magpy"))
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:   # relative: from the package, one level up per dot after the first
                parts = package.split(".")
                base = ".".join(parts[:len(parts) - node.level + 1] + [base]).rstrip(".")
            if not base.startswith("magpy"):
                continue
            subs = {f"{base}.{a.name}" for a in node.names} & MODULES.keys()
            out.update(subs or {base})
    return out


def _stage(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "magpy"


def test_the_top_level_reads_as_the_pipeline():
    entries = {p.stem for p in ROOT.iterdir() if p.name != "__pycache__" and not p.name.startswith(".")}
    assert entries == {"__init__", *GROUND, *STAGES}, sorted(entries)


@pytest.mark.parametrize("module", sorted(m for m in MODULES if m != "magpy"))
def test_a_stage_imports_only_from_the_stages_before_it(module):
    stage = _stage(module)
    allowed = set(GROUND) | ({"magpy"} if stage in STAGES else set())
    if stage in STAGES:
        allowed |= set(STAGES[:STAGES.index(stage) + 1])
    wrong = sorted(m for m in _imported(module, MODULES[module])
                   if m != "magpy" and _stage(m) not in allowed)
    assert not wrong, f"{module} ({stage}) imports {wrong}: a later stage"


def _sizes(kind) -> list[tuple[int, str]]:
    out = []
    for name, path in MODULES.items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, kind):
                out.append((node.end_lineno - node.lineno + 1, f"{name}.{node.name}"))
    return out


def test_no_class_holds_more_than_one_idea():
    large = sorted((n, c) for n, c in _sizes(ast.ClassDef) if n > MAX_CLASS_LINES)
    assert not large, f"classes over {MAX_CLASS_LINES} lines: {large}"


def test_no_function_is_over_a_screen():
    functions = _sizes((ast.FunctionDef, ast.AsyncFunctionDef))
    large = sorted((n, f) for n, f in functions if n > MAX_FUNCTION_LINES)
    assert not large, f"functions over {MAX_FUNCTION_LINES} lines: {large}"
