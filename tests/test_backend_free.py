"""The ``backend_free`` marker (``tests/backend_free.py``): a marked test runs once, in the
torch process, and fails there if it computes on the backend or starts a Python child
without saying why; elsewhere it is left out."""

import keras
import pytest

pytest_plugins = ["pytester"]

INNER = """
import subprocess
import sys

import pytest

pytestmark = pytest.mark.backend_free


def test_pure():
    assert sorted([2, 1]) == [1, 2]


def test_computes():
    import torch

    torch.ones(2)


def test_computes_and_swallows_the_error():
    import torch

    try:
        torch.ones(2)
    except Exception:
        pass


def test_starts_a_child():
    subprocess.run([sys.executable, "-c", "pass"], check=True)


@pytest.mark.backend_free(processes="the child computes nothing")
def test_starts_a_child_that_says_why():
    subprocess.run([sys.executable, "-c", "pass"], check=True)


@pytest.mark.backend_free(False)
def test_taken_back_to_every_backend():
    import torch

    torch.ones(2)
"""


def test_a_marked_test_runs_once_and_fails_where_it_computes(pytester, monkeypatch):
    if keras.backend.backend() != "torch":
        pytest.skip("run once, on torch: the marker's own logic, whichever backend Keras runs")
    pytester.makepyfile(test_inner=INNER)
    monkeypatch.setenv("KERAS_BACKEND", "torch")
    result = pytester.runpytest_inprocess("-p", "backend_free", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=3, failed=3)
    failures = {report.nodeid.split("::")[1]: str(report.longrepr) for report in result.reprec.getfailures()}
    assert sorted(failures) == ["test_computes", "test_computes_and_swallows_the_error", "test_starts_a_child"]
    assert (
        "called torch or a process (call): _VariableFunctionsClass.ones"
        in failures["test_computes_and_swallows_the_error"]
    )
    assert "started a process" in failures["test_starts_a_child"]
    for backend in ("jax", "tensorflow"):
        monkeypatch.setenv("KERAS_BACKEND", backend)
        result = pytester.runpytest_inprocess("-p", "backend_free", "-p", "no:cacheprovider")
        result.assert_outcomes(passed=1, deselected=5)
