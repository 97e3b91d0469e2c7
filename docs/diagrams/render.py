"""Render the site's diagrams (``docs/diagrams/*.mmd``, Mermaid source) to SVG files beside them.

    python docs/diagrams/render.py [--mermaid PATH/TO/mermaid.min.js]

The pages show the SVG files as images, so the site needs no JavaScript to draw them and
works offline.  Rendering needs Mermaid's browser bundle (without ``--mermaid``: ``npm pack
mermaid@11`` into a temporary folder) and Debian's chromium (``/usr/bin/chromium``), which
runs Mermaid on a local page and gives back the drawn SVG.  Labels are drawn as SVG text
where Mermaid can; HTML left in labels is made well-formed XML (``<br/>``), as a browser
shows an SVG file only if it parses as XML.
"""
from __future__ import annotations

import argparse
import html
import json
import pathlib
import re
import subprocess
import tarfile
import tempfile

HERE = pathlib.Path(__file__).resolve().parent
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync"]
PAGE = """<!DOCTYPE html><html><head><meta charset="utf-8"><script src="mermaid.min.js"></script></head>
<body><script>
mermaid.initialize({startOnLoad: false, theme: "neutral", htmlLabels: false, flowchart: {htmlLabels: false}});
const sources = %s;
(async () => {
  for (const [name, text] of Object.entries(sources)) {
    const {svg} = await mermaid.render("diagram-" + name, text);
    const out = document.createElement("template");
    out.id = "out-" + name;
    out.setAttribute("data-svg", svg);
    document.body.appendChild(out);
  }
  document.body.setAttribute("data-done", "1");
})();
</script></body></html>"""


def mermaid_bundle(work: pathlib.Path) -> pathlib.Path:
    """Mermaid's browser bundle from the npm registry (``npm pack``), unpacked in ``work``."""
    subprocess.run(["npm", "pack", "mermaid@11", "--silent"], cwd=work, check=True, capture_output=True)
    tgz = next(work.glob("mermaid-*.tgz"))
    with tarfile.open(tgz) as tar:
        member = tar.getmember("package/dist/mermaid.min.js")
        (work / "mermaid.min.js").write_bytes(tar.extractfile(member).read())
    return work / "mermaid.min.js"


def render(bundle: pathlib.Path, work: pathlib.Path) -> dict[str, str]:
    """The SVG of each ``*.mmd`` diagram, by name."""
    sources = {p.stem: p.read_text() for p in sorted(HERE.glob("*.mmd"))}
    (work / "mermaid.min.js").write_bytes(bundle.read_bytes())
    (work / "render.html").write_text(PAGE % json.dumps(sources))
    command = ["/usr/bin/chromium", *CHROMIUM_FLAGS, f"--user-data-dir={work / 'profile'}",
               "--allow-file-access-from-files", "--virtual-time-budget=20000", "--dump-dom",
               (work / "render.html").as_uri()]
    dom = subprocess.run(command, capture_output=True, text=True, timeout=120).stdout
    found = dict(re.findall(r'<template id="out-(\w+)" data-svg="(.*?)">', dom, re.S))
    missing = set(sources) - set(found)
    if missing:
        raise RuntimeError(f"mermaid drew no SVG for {sorted(missing)}")
    return {name: html.unescape(svg).replace("<br>", "<br/>") for name, svg in found.items()}


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mermaid", type=pathlib.Path, help="mermaid.min.js (default: npm pack mermaid@11)")
    opts = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        work = pathlib.Path(tmp)
        bundle = opts.mermaid or mermaid_bundle(work)
        for name, svg in render(bundle, work).items():
            (HERE / f"{name}.svg").write_text(svg + "\n")
            print(f"wrote {HERE / name}.svg")


if __name__ == "__main__":
    main()
