"""``logging`` calls inside a compiled call: effects the mock makes again
(magpy.capture.callees.warnings_logging).

``logger.warning(...)`` in forward is no break: the mock hands the logger a record made at
the program's line, as eager's ``Logger._log`` does, on every call, and only if the logger
is enabled for the level then.  Each program keeps its own logger with a handler that
collects what it receives: message, level, file, line and function must be eager's, call
after call (torch.compile breaks the graph at every logging call).
"""
import itertools
import logging

import torch
import transformers
from torch import nn

from tests.harness.compile_harness import (
    MOCK,
    after,
    again,
    check_compiled,
    fresh_magpy,  # noqa: F401 - autouse fixture
    standard,
)

_names = itertools.count()


class Collect(logging.Handler):
    def __init__(self):
        super().__init__()
        self.seen = []

    def emit(self, record):
        self.seen.append((record.getMessage(), record.levelname, record.pathname, record.lineno,
                          record.funcName))


def _logger():
    logger = logging.getLogger(f"magpy.tests.logging.{next(_names)}")
    logger.propagate = False
    logger.setLevel(logging.INFO)
    logger.addHandler(Collect())
    return logger


def _seen(m):
    return list(m.logger.handlers[0].seen)


def helper_logs(logger, n):
    logger.warning("helper sees %d rows", n, stacklevel=2)   # reported at its caller's line


class Logs(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.logger = _logger()

    def forward(self, x):
        self.logger.info("forward on %d rows", x.shape[0])
        h = self.lin(x)
        self.logger.debug("not shown at INFO")
        self.logger.log(logging.ERROR, "layer %s done", "lin", extra={"tag": 1})
        helper_logs(self.logger, x.shape[0])
        return h.relu()


def _x(s):
    return (torch.randn(3, 4),)


def _quiet(m):
    m.logger.setLevel(logging.CRITICAL)


def _verbose(m):
    m.logger.setLevel(logging.DEBUG)


def _build():
    m = Logs()
    return m, m


def test_logger_calls_are_made_again_by_every_replay():
    trace = check_compiled(_build, standard(_x) + [
        after(_quiet, expect=MOCK), again(), after(_verbose, expect=MOCK), again(),
    ], observe=_seen, expect_graphs=1, expect_records=1)
    seen = _seen(trace.compiled)
    assert len(seen) == 3 * 3 + 4 * 2, seen          # INFO: 3 records per call; DEBUG: 4
    assert seen[0][2] == __file__ and seen[0][4] == "forward"
    assert seen[2][4] == "forward"                     # stacklevel=2: the helper's caller


def _tensor_arg(m, x):
    m.logger.info("input %s", x)       # formatting reads the tensor's data
    return x * 2


def test_a_tensor_argument_keeps_eagers_record():
    def build():
        m = Logs()
        return (lambda x: _tensor_arg(m, x)), m

    check_compiled(build, [standard(_x)[0], again(expect=None)], observe=_seen, fullgraph=False)


def _once(m, x):
    m.logger.warning_once("said once")
    return x * 2


def test_transformers_warning_once_logs_once():
    assert transformers.utils.logging is not None   # (it adds Logger.warning_once)

    def build():
        m = Logs()
        return (lambda x: _once(m, x)), m

    def forget(m):   # (both copies log the message again on their next call)
        logging.Logger.warning_once.cache_clear()

    trace = check_compiled(build, standard(_x) + [after(forget, expect=MOCK), again()], observe=_seen,
                           expect_graphs=1, expect_records=1)
    assert len(_seen(trace.compiled_state)) == 2
