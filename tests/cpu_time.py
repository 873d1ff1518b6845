"""Where the suite's CPU time goes: ``KERAS_VIT_CPU_LOG=FILE`` makes each test process append
one line per test to FILE (its node id, the backend, wall seconds, the process's own CPU
seconds and its finished children's), and ``scripts/cpu_time.py FILE`` sums them by file, by
backend and by test. CPU, not wall: ``scripts/test.sh`` runs several processes on two cores,
where a test's wall time says as much about its neighbours as about itself.

Loaded by ``addopts`` (``-p cpu_time``); without the variable it does nothing.
"""

import json
import os
import resource
import time

import pytest


def _cpu(who):
    usage = resource.getrusage(who)
    return usage.ru_utime + usage.ru_stime


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    path = os.environ.get("KERAS_VIT_CPU_LOG")
    if not path:
        yield
        return
    start = time.perf_counter(), _cpu(resource.RUSAGE_SELF), _cpu(resource.RUSAGE_CHILDREN)
    yield
    wall = time.perf_counter() - start[0]
    own = _cpu(resource.RUSAGE_SELF) - start[1]
    children = _cpu(resource.RUSAGE_CHILDREN) - start[2]
    record = {
        "node": item.nodeid,
        "backend": os.environ.get("KERAS_BACKEND", "?"),
        "wall": round(wall, 3),
        "cpu": round(own, 3),
        "children": round(children, 3),
    }
    with open(path, "a") as f:  # one short line per write: the processes' lines do not interleave
        f.write(json.dumps(record) + "\n")
