"""Test-wide settings: every compiled call cross-checks its fast guard against the full one,
graphs compile while recording (not in the background), and every recording run must leave a record that the
identical call would hit
(``tests.harness.compile_harness.RehitCheck``; ``--no-magpy-rehit`` or the ``magpy_rerecords`` mark
turn that off).

First of all, torchvision's operator schemas (``benchmarks.torchvision_ops``): with the CUDA
torchvision wheel installed beside the CPU torch (as CI installs it), importing torchvision,
transformers' model classes or diffusers fails in any process that has not defined them."""
from benchmarks.torchvision_ops import define_torchvision_schemas

define_torchvision_schemas()  # before any test module imports transformers, diffusers or torchvision

import pytest  # noqa: E402

import magpy  # noqa: E402
from tests.harness.compile_harness import RehitCheck  # noqa: E402


def pytest_addoption(parser):
    parser.addoption("--no-magpy-rehit", action="store_true",
                     help="do not fail tests whose recording runs leave records the identical call misses")


def pytest_configure(config):
    config.addinivalue_line("markers", "magpy_rerecords: the test's calls change what their guards check "
                                       "in ways magpy does not track (skip the re-record check)")


@pytest.fixture(autouse=True)
def _verify_fast_guard():
    magpy.config.verify_fast_guard = True
    yield
    magpy.config.verify_fast_guard = False


@pytest.fixture(autouse=True)
def _foreground_compile():
    # A test's later calls run what its record's graphs compiled to, from the first reuse on
    # (the default compiles in the background and runs the eager twins until it is done,
    # which would leave most tests checking only the twins).  tests/backends/test_background.py runs
    # with the default; subprocess tests get it too.
    magpy.config.background_compile = False
    yield
    magpy.config.background_compile = True


@pytest.fixture(autouse=True)
def _rehit(request):
    if request.config.getoption("--no-magpy-rehit") or request.node.get_closest_marker("magpy_rerecords"):
        yield
        return
    with RehitCheck() as check:
        yield
    assert not check.problems, "\n\n".join(check.problems)
