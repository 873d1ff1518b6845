"""Shared test fixtures and collection hooks; the constants and helpers the tests share are in
helpers.py. The Keras backend comes from KERAS_BACKEND (one process each)."""

import gc
import os
import sys

import numpy as np
import pytest

# XLA (JAX, and TensorFlow's jit_compile) compiles the tests' tiny models and eager ops
# thousands of times, and compiling is most of a test's time. Two settings make each compile
# cheaper: XLA:CPU's older fusion emitters, and no LLVM optimisation (level 0 instead of 2:
# the compiled code runs slower, which only the few tests that train for hundreds of steps
# feel). Neither changes the HLO, and every parity bound holds with both. Set here, before
# any framework is imported, so that the child processes inherit them; a flag XLA_FLAGS
# already sets is left as it is.
# KERAS_VIT_USERS_COMPILER=1 leaves XLA as users run it (scripts/test.sh runs the parity
# tests so once).
_XLA_TEST_FLAGS = {"xla_cpu_use_fusion_emitters": "false", "xla_backend_optimization_level": "0"}
for _flag, _value in _XLA_TEST_FLAGS.items():
    if os.environ.get("KERAS_VIT_USERS_COMPILER") != "1" and _flag not in os.environ.get("XLA_FLAGS", ""):
        os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} --{_flag}={_value}".strip()

sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture(scope="session")
def timm():
    """timm, imported beside an inert torchvision stand-in (see torchvision_stub.py)."""
    import torchvision_stub

    torchvision_stub.install()
    import timm as timm_module

    return timm_module


# The export package's docstring examples write their files in a TensorFlow process (PyTorch's
# for .pt2) whichever backend calls them, and tests/test_export.py calls that process from
# every backend: the examples run once, on the backend that writes what they show.
_EXPORTING_MODULES = ("__init__", "api", "convert", "litert", "onnx", "runtime", "serving")
_DOCTESTS_ONCE_ON = {
    **{f"keras_vit/export/{module}.py": "tensorflow" for module in _EXPORTING_MODULES},
    "keras_vit/export/torch_program.py": "torch",
    "keras_vit/torch_graph.py": "torch",
}


def pytest_collection_finish(session):
    # Keras collects the garbage after each variable a layer lets go of (quantize lets go
    # of every float kernel), and a full collection walks every object the process holds:
    # by now the frameworks' modules, hundreds of thousands of objects that live as long as
    # the process. Frozen, a collection walks only what the tests made.
    gc.collect()
    gc.freeze()


def pytest_collection_modifyitems(config, items):
    from helpers import once_on

    for item in items:
        if isinstance(item, pytest.DoctestItem):
            backend = _DOCTESTS_ONCE_ON.get(item.path.relative_to(config.rootpath).as_posix())
            if backend is not None:
                item.add_marker(once_on(backend, f"its files are written by {backend} from every backend"))


@pytest.fixture(autouse=True)
def _seeded():
    """Every random source seeded before each test: Keras' initialisers and dropout, numpy's
    and Python's global generators, torch and TensorFlow (a flaky test keeps good changes out)."""
    import keras

    keras.utils.set_random_seed(0)


@pytest.fixture
def rng():
    return np.random.default_rng(0)


@pytest.fixture
def mirror(tmp_path, monkeypatch):
    """A mirror on 127.0.0.1 that keeps the publishers' paths, and a fresh cache."""
    from http_server import FileServer, download_env, hub_env

    with FileServer(tmp_path / "served") as server:
        download_env(monkeypatch, tmp_path / "home", mirror=server.url)
        hub_env(monkeypatch, server, tmp_path / "hf-cache")  # and the hub's files, through huggingface_hub
        yield server
