"""The documentation site: its examples run, its configuration table is magpy.config's, the
messages magpy issues name entries that exist, and ``mkdocs build --strict`` passes
(tests/api/docs_pages.py says what is checked against what)."""
import contextlib
import dataclasses
import io
import re
import subprocess
import sys

import pytest

import magpy
import magpy.errors
from magpy.config import config
from tests.api import docs_pages


def test_configuration_table_is_generated_from_config():
    page = docs_pages.CONFIG_PAGE.read_text()
    assert page == docs_pages.generated_page(page), "run: python -m tests.api.docs_pages"
    for f in dataclasses.fields(config):
        assert f"| `{f.name}` | " in page and f"| `{f.default!r}` |" in page


@pytest.mark.parametrize("page,line,source", docs_pages.runnable_blocks(),
                         ids=[f"{p}:{n}" for p, n, _ in docs_pages.runnable_blocks()])
def test_runnable_example(page, line, source):
    """Each example marked runnable runs as it is; what it sets in magpy.config is undone."""
    saved = dataclasses.replace(config)
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            exec(compile(source, f"{page}:{line}", "exec"), {"__name__": "__docs__"})
    finally:
        for f in dataclasses.fields(config):
            setattr(config, f.name, getattr(saved, f.name))
        magpy.reset()


def _magpy_classes():
    return [c for c in vars(magpy.errors).values()
            if isinstance(c, type) and issubclass(c, (magpy.MagpyError, magpy.MagpyWarning))]


def test_every_error_and_warning_names_an_existing_entry():
    anchors = docs_pages.heading_anchors(docs_pages.DOCS / "troubleshooting.md")
    classes = _magpy_classes()
    assert {c.__name__ for c in classes} == set(magpy.errors.HELP)
    for cls in classes:
        link = magpy.errors.help_link(cls)
        assert link.startswith("see docs/troubleshooting.md#")
        assert link.split("#")[1] in anchors, (cls, link)


def test_messages_carry_their_entry():
    with pytest.raises(magpy.BackendError) as e:
        magpy.compile(lambda x: x, backend="no-such-backend")
    assert e.value.__notes__ == ["see docs/troubleshooting.md#backend-error"]
    assert "see docs" not in str(e.value)   # (str(error) is reused in messages: unchanged)
    with pytest.warns(magpy.CacheLimitWarning, match=r"\(see docs/troubleshooting.md#cache-size-limit\)$"):
        import warnings
        warnings.warn(magpy.CacheLimitWarning("magpy: f: 8 records"))


def test_readme_links_resolve():
    """The README is the front door: every file it links to exists."""
    readme = (docs_pages.ROOT / "README.md").read_text()
    targets = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", readme)
    assert targets and all((docs_pages.ROOT / t).exists() for t in targets if "://" not in t), targets


def test_mkdocs_build_strict(tmp_path):
    command = [sys.executable, "-m", "mkdocs", "build", "--strict", "-q", "-d", str(tmp_path / "site")]
    done = subprocess.run(command, cwd=docs_pages.ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    assert (tmp_path / "site" / "troubleshooting" / "index.html").exists()
