"""The test tiers: ``pytest -m "not slow"`` is the fast tier a contributor runs before every
commit; the whole suite (``bash scripts/test.sh``) runs in CI.

A test is slow when ``tests/slow_tests.txt`` lists it: that file is written by
``scripts/slow_tests.py`` from the durations of a full run, so the tiers follow the
measured times rather than anyone's guess. A listed name without its parameters
(``tests/test_x.py::test_y``) marks every parametrisation. A test that takes a costly
module fixture is marked ``@pytest.mark.slow`` where it is written: the fixture's time
falls on whichever of its tests runs first, so the durations cannot tell.
"""

import os

import pytest

LIST = os.path.join(os.path.dirname(os.path.abspath(__file__)), "slow_tests.txt")


def slow_names(path=None):
    """The node ids in ``path`` (default ``LIST``), one a line; blank lines and ``#`` comments skipped."""
    path = path or LIST
    if not os.path.exists(path):
        return set()
    with open(path) as f:
        return {line.strip() for line in f if line.strip() and not line.startswith("#")}


def pytest_configure(config):
    config.addinivalue_line("markers", "slow: left out of the fast tier (-m 'not slow'); see tests/tiers.py")


def pytest_collection_modifyitems(config, items):
    slow = slow_names()
    for item in items:
        if item.nodeid in slow or item.nodeid.split("[")[0] in slow:
            item.add_marker(pytest.mark.slow)
