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
import json
import os
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
    "text": "the text tokenizers (CLIP's BPE, SigLIP's SentencePiece)",
}

# Where the name one imports is not the name one installs.
PACKAGES = {"sklearn": "scikit-learn", "tensorflow_datasets": "tensorflow-datasets", "PIL": "pillow"}


class MissingDependencyError(ImportError):
    """A feature's package is not installed; the message names the extra that installs it."""


class UnknownBackendError(ValueError):
    """``KERAS_BACKEND`` (or Keras' ``keras.json``) names no Keras backend."""


# The package each backend of Keras imports, which its extra of the same name installs.
BACKEND_PACKAGES = {"tensorflow": "tensorflow", "jax": "jax", "torch": "torch"}


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


# Keras' backends; keras-vit is tested on the first three.
KERAS_BACKENDS = ("tensorflow", "jax", "torch", "numpy", "openvino")


def backend_name(name):
    """``KERAS_BACKEND``'s value checked before Keras is imported (Keras' own error names
    no alternative): a ValueError naming the known backends and the closest one.

    >>> backend_name("jax")
    'jax'
    >>> backend_name("tensorflw")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    keras_vit.dependencies.UnknownBackendError: KERAS_BACKEND='tensorflw' is not a Keras backend (did you mean ...
    """
    if name is None or name in KERAS_BACKENDS:
        return name
    import difflib

    close = difflib.get_close_matches(str(name), KERAS_BACKENDS, n=1)
    hint = f" (did you mean {close[0]}?)" if close else ""
    raise UnknownBackendError(
        f"KERAS_BACKEND={name!r} is not a Keras backend{hint}; expected one of {', '.join(KERAS_BACKENDS)}."
    )


def configured_backend():
    """``(backend, where it was set)``: the backend Keras will load, read as Keras reads it
    (``KERAS_BACKEND``, else ``backend`` in ``$KERAS_HOME/keras.json`` or
    ``~/.keras/keras.json``, else TensorFlow), without importing Keras."""
    if os.environ.get("KERAS_BACKEND"):
        return os.environ["KERAS_BACKEND"], "KERAS_BACKEND"
    home = os.environ.get("KERAS_HOME") or os.path.join(os.path.expanduser("~"), ".keras")
    try:
        with open(os.path.join(home, "keras.json"), encoding="utf-8") as f:
            backend = json.load(f).get("backend")
        if backend:
            return backend, os.path.join(home, "keras.json")
    except (OSError, ValueError, AttributeError):
        pass  # Keras reads no file either: its default
    return "tensorflow", "Keras' default, with KERAS_BACKEND unset"


def backend_problem():
    """None if Keras can load its backend, else the error that says why, before Keras is
    imported: ``UnknownBackendError`` for a name Keras does not know, ``MissingDependencyError``
    (naming the extra) for a backend whose package is not installed."""
    backend, where = configured_backend()
    try:
        backend_name(backend)
    except UnknownBackendError as error:
        return error if where == "KERAS_BACKEND" else UnknownBackendError(f"{where}: {error}")
    package = BACKEND_PACKAGES.get(backend)
    if package is None or _installed(package):
        return None
    others = [b for b, p in BACKEND_PACKAGES.items() if _installed(p)]
    switch = f"; or set KERAS_BACKEND to an installed one ({', '.join(others)})" if others else ""
    return MissingDependencyError(
        f"Keras' {backend} backend ({where}) needs {package}, which is not installed: {install_hint(backend)}{switch}."
    )


def _installed(package):
    if package in sys.modules:  # None there: an import refused (as a test hides a package)
        return sys.modules[package] is not None
    return importlib.util.find_spec(package) is not None
