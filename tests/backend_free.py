"""The tests of what no backend computes: ``@pytest.mark.backend_free`` runs a test once, in
the ``KERAS_BACKEND=torch`` process, and leaves it out of the others.

Argument parsing and its messages, recipe and config checks, spec rules, layout detection
from a file's keys, download and cache logic, the docs and the packaging metadata are the
same Python whichever backend Keras runs: three processes running them find nothing that
one does not. Torch's process is the one that ends first in ``scripts/test.sh``. A module
marks all its tests (``pytestmark``); ``@pytest.mark.backend_free(False)`` takes one of
them back to every backend.

The marker keeps itself honest: while a marked test runs (its fixtures too), every torch
function it calls is refused (``torch.overrides.TorchFunctionMode``: building a Keras layer
or model, a variable, a tensor op, a random draw are all torch calls on this backend), so
a marked test that computes fails, naming the call; so does one that starts a Python
child (which computes out of the recorder's sight), unless the mark says why its children
compute nothing on the backend (``backend_free(processes="the child downloads a file")``).
``KERAS_VIT_BACKEND_FREE_SURVEY=FILE`` instead records every test and appends to FILE the
node id of each one that passed calling no torch function and starting no process: the
candidates for the marker.
``-p backend_free`` (pyproject.toml's ``addopts``) loads this module.
"""

import os

import pytest

ON = "torch"
SURVEY = "KERAS_VIT_BACKEND_FREE_SURVEY"


def pytest_configure(config):
    config.addinivalue_line(
        "markers", f"backend_free: computes on no backend; runs once, on {ON} (see tests/backend_free.py)"
    )


def marked(item):
    """Whether ``item`` is backend-free: marked, and not taken out of its module's mark by
    ``@pytest.mark.backend_free(False)`` (a test that computes, in a module that does not)."""
    marker = item.get_closest_marker("backend_free")
    return marker is not None and marker.args[:1] != (False,)


def _backend():
    return os.environ.get("KERAS_BACKEND", "tensorflow")


def pytest_collection_modifyitems(config, items):
    if _backend() == ON:
        return
    kept, left_out = [], []
    for item in items:
        (left_out if marked(item) else kept).append(item)
    if left_out:
        config.hook.pytest_deselected(items=left_out)
        items[:] = kept


class BackendUsed(AssertionError):
    """A ``backend_free`` test called the backend."""


def _recorder(refuse):
    from torch.overrides import TorchFunctionMode

    class Recorder(TorchFunctionMode):
        def __init__(self):
            super().__init__()
            self.calls = []

        def __torch_function__(self, func, types, args=(), kwargs=None):
            name = getattr(func, "__qualname__", None) or repr(func)
            self.calls.append(name)
            if refuse:
                raise BackendUsed(f"a backend_free test called torch's {name}: it computes on the backend")
            return func(*args, **(kwargs or {}))

    return Recorder()


def _guarded(item):
    return _backend() == ON and (marked(item) or os.environ.get(SURVEY))


def _runs_python(command):
    program = os.path.basename(command.split()[0]) if command.strip() else ""
    return program.startswith("python") or program in ("keras-vit", "pytest", "bash", "sh")


def _watch(item, phase):
    """Runs one phase of ``item`` (a hook's ``yield``) under the recorder, and fails a marked
    test that called torch even where the test caught the error. A child process it starts
    is recorded too (a Python child computes on its own backend, out of the recorder's
    sight): the marker refuses it."""
    import subprocess

    refuse = marked(item)
    children_allowed = bool(refuse and item.get_closest_marker("backend_free").kwargs.get("processes"))
    recorder = _recorder(refuse)
    started = []
    popen_init = subprocess.Popen.__init__

    def recorded_popen(self, args, *rest, **options):
        command = args if isinstance(args, str) else " ".join(map(str, args))
        if not _runs_python(command):  # a tool (platform's uname -p on an import): no backend in it
            return popen_init(self, args, *rest, **options)
        started.append(command)
        if refuse and not children_allowed:
            raise BackendUsed(f"a backend_free test started a process ({started[-1][:80]}): its child computes")
        return popen_init(self, args, *rest, **options)

    subprocess.Popen.__init__ = recorded_popen
    try:
        with recorder:
            result = yield
    finally:
        subprocess.Popen.__init__ = popen_init
    calls = recorder.calls + [f"process {cmd[:80]}" for cmd in started if not children_allowed]
    item.stash.setdefault(_CALLS, []).extend(calls)
    if calls and refuse:
        raise BackendUsed(f"a backend_free test called torch or a process ({phase}): {', '.join(calls[:5])}")
    if phase == "call":
        item.stash[_RAN] = True  # passed: a survey may name it
    return result


_CALLS = pytest.StashKey[list]()
_RAN = pytest.StashKey[bool]()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item):
    if not _guarded(item):
        return (yield)
    return (yield from _watch(item, "setup"))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    if not _guarded(item):
        return (yield)
    return (yield from _watch(item, "call"))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item, nextitem):
    if not _guarded(item):
        return (yield)
    result = yield from _watch(item, "teardown")
    survey = os.environ.get(SURVEY)
    if survey and item.stash.get(_RAN, False) and not item.stash.get(_CALLS, None):
        with open(survey, "a") as f:
            f.write(item.nodeid + "\n")
    return result
