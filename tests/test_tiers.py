"""The fast tier follows a full run's durations and reaches every test file."""

import importlib.util
import os

import pytest
import tiers

pytestmark = pytest.mark.backend_free  # Python alone: runs once (tests/backend_free.py)

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _slow_tests_script():
    spec = importlib.util.spec_from_file_location("slow_tests", os.path.join(REPO, "scripts", "slow_tests.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_fast_tier_takes_each_files_quickest_test_then_the_quickest_within_the_budget(tmp_path):
    log = tmp_path / "run.log"
    log.write_text(
        "[jax] 3.00s call     tests/test_a.py::test_1\n"
        "[jax] 1.00s call     tests/test_a.py::test_2[x]\n"
        "[torch] 2.00s call     tests/test_a.py::test_2[x]\n"
        "[jax] 5.00s call     tests/test_b.py::test_3\n"
        "[jax-2] 0.20s setup    tests/test_b.py::test_4\n"
        "[jax] 0.30s call     tests/test_b.py::test_4\n"
        "[jax] 9.00s call     tests/test_c.py::test_5\n"  # a file's only test: fast, whatever it costs
        "unrelated line 1.0s call\n"
    )
    script = _slow_tests_script()
    times = script.durations([str(log)])
    assert times["jax"]["tests/test_b.py::test_4"] == 0.5  # setup and call add up
    fast, slow = script.split(times, budget=14.0)
    assert sorted(fast) == ["tests/test_a.py::test_1", "tests/test_a.py::test_2[x]", "tests/test_b.py::test_4",
                            "tests/test_c.py::test_5"]  # fmt: skip
    assert slow == ["tests/test_b.py::test_3"]
    output = tmp_path / "slow.txt"
    assert script.main([str(log), "--budget", "14", "--output", str(output)]) == 0
    assert tiers.slow_names(str(output)) == {"tests/test_b.py::test_3"}


def test_listed_tests_are_marked_slow_with_or_without_their_parameters(tmp_path):
    listed = tmp_path / "slow.txt"
    listed.write_text("# comment\ntests/test_a.py::test_1\n\ntests/test_b.py::test_2[x]\n")
    assert tiers.slow_names(str(listed)) == {"tests/test_a.py::test_1", "tests/test_b.py::test_2[x]"}
    assert tiers.slow_names(str(tmp_path / "missing.txt")) == set()

    class Item:
        def __init__(self, nodeid):
            self.nodeid, self.marks = nodeid, []

        def add_marker(self, mark):
            self.marks.append(mark.name)

    items = [
        Item(n) for n in ("tests/test_a.py::test_1[p]", "tests/test_b.py::test_2[y]", "tests/test_b.py::test_2[x]")
    ]
    original = tiers.LIST
    tiers.LIST = str(listed)
    try:
        tiers.pytest_collection_modifyitems(None, items)
    finally:
        tiers.LIST = original
    assert [item.marks for item in items] == [["slow"], [], ["slow"]]
