"""Logs: ``logging.getLogger("magpy")`` and the ``MAGPY_LOGS`` switch.

``MAGPY_LOGS`` is a comma list of topics (or ``all``); each turns on INFO records of the
logger ``magpy.<topic>``, printed to stderr:

==============  ==========================================================================
topic           what is logged
==============  ==========================================================================
``recompiles``  each recording after the first, with why every record's guard failed, in
                words (``x: tensor 'x' size mismatch at index 0. expected 8, actual 9``)
``breaks``      each dynamic operation: an eager step, or the end of recording, and where
``graphs``      each compiled graph: operations, backend, compile time
``guards``      each new record's guard source
``perf``        each recording: monitor run and total time; each compiled graph's trial
                against eager (``magpy.backends.autopilot``): the version kept, and both times
``dynamic``     each lifted size the program made the record specialise, and where
                (``s0 specialised by BINARY_OP at model.py:12``), and each operation
                torch could not run on symbolic sizes
==============  ==========================================================================

Whatever the switch says, a recording that takes more than two seconds logs one line at
INFO (``magpy.progress``), so a long first compile is not silent.  Records propagate to the
root logger as usual (a topic that is off drops its INFO records even when the root logger
is at INFO); ``configure`` is applied once, at import, from the environment.
"""
from __future__ import annotations

import logging
import os
import sys

TOPICS = ("recompiles", "breaks", "graphs", "guards", "perf", "dynamic")
SLOW_RECORDING_S = 2.0

_root = logging.getLogger("magpy")


def logger(topic: str) -> logging.Logger:
    """The logger of ``topic`` (``magpy.<topic>``)."""
    return logging.getLogger(f"magpy.{topic}")


def configure(spec: str | None) -> set[str]:
    """Turn on the topics of ``spec`` (``MAGPY_LOGS``'s form) and the progress line; an
    unknown topic is an error naming the known ones.  Returns the topics on."""
    topics = {t.strip() for t in (spec or "").split(",") if t.strip()}
    if "all" in topics:
        topics = set(TOPICS)
    unknown = topics - set(TOPICS)
    if unknown:
        raise ValueError(f"MAGPY_LOGS: unknown topic(s) {sorted(unknown)}; known: {', '.join(TOPICS)}, all")
    for topic in TOPICS:
        # Off means off even under a root logger at INFO (a guard is thousands of lines).
        logger(topic).setLevel(logging.INFO if topic in topics else logging.WARNING)
    logger("progress").setLevel(logging.INFO)
    if not any(getattr(h, "_magpy", False) for h in _root.handlers):
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("[%(name)s] %(message)s"))
        handler._magpy = True
        _root.addHandler(handler)
    return topics


def on(topic: str) -> bool:
    return logger(topic).isEnabledFor(logging.INFO)


configure(os.environ.get("MAGPY_LOGS"))
