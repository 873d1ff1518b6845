"""What keras-vit needs beyond Keras and numpy, and the extra that installs each.

The package itself needs Keras, numpy, safetensors and Pillow; each backend and each
feature that needs more is an extra of the distribution ``keras-vision-transformer``
(``pyproject.toml`` lists them). The code of a feature imports what it needs through
``require``, so a missing package is one clear error naming the extra to install, not a
``ModuleNotFoundError`` from deep inside.

>>> import numpy
>>> require("numpy", "data") is numpy
True
"""

import importlib
import importlib.util
import sys

DISTRIBUTION = "keras-vision-transformer"  # "keras-vit" on the package index is another project

# extra: what it is for, in the error's words.
EXTRAS = {
    "tensorflow": "the TensorFlow backend",
    "jax": "the JAX backend",
    "torch": "the PyTorch backend and reading PyTorch checkpoints (.pth, .bin)",
    "data": "the data pipelines (tf.data, tensorflow-datasets and the embedded digits)",
    "export": "exports (SavedModel, LiteRT, ONNX) and their verification",
    "inspect": "the inspect figures",
}

# Where the name one imports is not the name one installs.
PACKAGES = {"sklearn": "scikit-learn", "tensorflow_datasets": "tensorflow-datasets", "PIL": "pillow"}


class MissingDependencyError(ImportError):
    """A feature's package is not installed; the message names the extra that installs it."""


def install_hint(extra):
    """The command that installs ``extra``.

    >>> install_hint("data")
    "pip install 'keras-vision-transformer[data]'"
    """
    if extra not in EXTRAS:
        raise ValueError(f"Unknown extra {extra!r}; expected one of {sorted(EXTRAS)}.")
    return f"pip install '{DISTRIBUTION}[{extra}]'"


def require(module, extra):
    """Imports ``module``, or raises ``MissingDependencyError`` naming ``extra``, which installs it."""
    if module in sys.modules:
        return sys.modules[module]
    install_hint(extra)  # a bad extra is a bug here, found even when the import works
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as error:
        top = module.split(".")[0]
        if error.name is None or error.name.split(".")[0] != top:
            raise  # the package is there but something it needs is not: its own error says what
        raise _missing(module, extra) from None


def _missing(module, extra):
    package = PACKAGES.get(module.split(".")[0], module.split(".")[0])
    return MissingDependencyError(
        f"{package} is not installed; the extra {extra!r} ({EXTRAS[extra]}) installs it: {install_hint(extra)}"
    )


def check_installed(modules, extra):
    """Raises ``MissingDependencyError`` naming ``extra`` if any of ``modules`` is not
    installed, without importing them (for work a child process will do)."""
    install_hint(extra)
    for module in modules:
        if module not in sys.modules and importlib.util.find_spec(module.split(".")[0]) is None:
            raise _missing(module, extra)
