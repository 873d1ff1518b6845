"""Quiet commands: the backends' start-up noise held back in keras-vit's command line.

TensorFlow writes its start-up lines (oneDNN, "Could not find cuda drivers", CPU
instructions) from C++ straight to the process's stderr while it is imported, before any
log level applies; later come "failed call to cuInit" and the XLA service's lines, and
``tf.function``'s retracing warnings. A newcomer reads them as failures. TensorFlow is
imported by Keras (its backend, or lazily on the others: ``set_random_seed``, tf.data),
by tensorflow-datasets and by keras-vit, so ``hold_back()`` catches the import itself,
whoever asks for it: stderr goes to a temporary file meanwhile (kept in ``held``, and
written out if the import fails), and so does its device discovery ("failed call to
cuInit" on a machine without a GPU). ``TF_CPP_MIN_LOG_LEVEL=1`` (Keras' own default)
keeps the later INFO lines (the XLA service's) out, TensorFlow's C++ warnings in (a
corrupt image skipped by a pipeline), and TensorFlow's and absl's Python loggers go to
ERROR (retracing warnings).

keras-vit's commands hold it back: the ``keras-vit`` program, ``python -m keras_vit`` and
the recipes (which set ``KERAS_VIT_QUIET=1``): their ``main`` calls ``hold_back()``, and the
package's own imports, which come first, are held while they run. ``--verbose`` or
``KERAS_VIT_VERBOSE=1`` shows everything; Keras' progress bars are untouched, and ``import
keras_vit`` in your own program changes nothing.
"""

import contextlib
import logging
import os
import sys
import tempfile

NOISY = ("tensorflow",)  # what writes to stderr from C++ as it is imported
held = []  # what those imports wrote, in order

_TRUE = ("1", "true", "yes", "on")


def verbose():
    """True when the user asked for everything: ``KERAS_VIT_VERBOSE=1`` or ``--verbose``."""
    return os.environ.get("KERAS_VIT_VERBOSE", "").lower() in _TRUE or "--verbose" in sys.argv[1:]


def is_command():
    """True in keras-vit's command line: the ``keras-vit`` program, ``python -m keras_vit``,
    or a script that set ``KERAS_VIT_QUIET=1`` before importing keras_vit (the recipes)."""
    if os.environ.get("KERAS_VIT_QUIET", "").lower() in _TRUE:
        return True
    if sys.argv and os.path.basename(sys.argv[0]) in ("keras-vit", "keras-vit.exe"):
        return True
    # ``python -m keras_vit``: while the package is imported, argv[0] is still "-m".
    argv = getattr(sys, "orig_argv", [])
    return any(a == "-m" and b.split(".")[0] == "keras_vit" for a, b in zip(argv, argv[1:]))


def add_flag(parser):
    """A command's ``--verbose`` (``verbose()`` reads it from ``sys.argv``, before any import)."""
    parser.add_argument("--verbose", action="store_true", help="show the backends' start-up lines and warnings")


@contextlib.contextmanager
def _stderr_held():
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as caught:
        os.dup2(caught.fileno(), 2)
        try:
            yield
        except BaseException:
            os.dup2(saved, 2)
            caught.seek(0)
            sys.stderr.write(caught.read().decode(errors="replace"))  # nothing hidden when it fails
            raise
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        caught.seek(0)
        held.append(caught.read().decode(errors="replace"))


class _HeldBackLoader:
    """Runs the real loader with stderr held; anything else is the real loader's."""

    def __init__(self, loader):
        self._loader = loader

    def __getattr__(self, name):
        return getattr(self._loader, name)

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module):
        with _stderr_held():
            self._loader.exec_module(module)
            if module.__name__ == "tensorflow":
                module.config.list_physical_devices()  # the platforms' start-up lines (cuInit)
        for name in ("tensorflow", "absl"):  # retracing warnings and the like
            logging.getLogger(name).setLevel(logging.ERROR)


class _Finder:
    """Finds a noisy module as the other finders do, and hands it the held-back loader."""

    def find_spec(self, name, path, target=None):
        if name not in NOISY:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None:
                if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                    spec.loader = _HeldBackLoader(spec.loader)
                return spec
        return None


def _holding():
    """Whether this process holds the lines back (a keras-vit command, not ``verbose()``);
    if so, TensorFlow's C++ INFO lines after start-up are left out too."""
    if not is_command() or verbose():
        return False
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")
    return True


def hold_back():
    """In a keras-vit command (and not ``verbose()``), holds the noisy backends' import-time
    lines back for the rest of the process; elsewhere does nothing. Returns whether it did.
    The command line calls it first thing (``keras_vit.commands.main``)."""
    if not _holding():
        return False
    if not any(isinstance(f, _Finder) for f in sys.meta_path):
        sys.meta_path.insert(0, _Finder())
    return True


@contextlib.contextmanager
def held_while_importing():
    """The noisy backends' import-time lines held back while the block imports them, in a
    keras-vit command only: the package's own imports, which the ``keras-vit`` program makes
    before its ``main`` runs. Leaves the process as it found it (``sys.meta_path``)."""
    finder = _Finder() if _holding() else None
    if finder is not None:
        sys.meta_path.insert(0, finder)
    try:
        yield
    finally:
        if finder is not None:
            sys.meta_path.remove(finder)
