"""Quiet commands: the backends' own lines held back while a keras-vit command runs.

TensorFlow, XLA, absl's C++ logging and Gloo write from C++ straight to the process's
file descriptors, where no Python setting reaches: TensorFlow's start-up lines
(oneDNN, "Could not find cuda drivers", CPU instructions), its converter's (``W0000 ...
Ignored output_format``, ``fully_quantize: 0 ...``), a oneDNN ``E0000`` line, Gloo's
``[Gloo] Rank 0 is connected ...``. A newcomer reads them as failures.

``held()`` sends descriptors 2 and 1 (Gloo writes to standard output) to a temporary file
while a command runs (and so do the processes it starts, unless given streams of their
own: ``terminal``), and points ``sys.stderr`` and ``sys.stdout`` at where they went before:
keras-vit's own output, errors and warnings, Keras' progress and a traceback go out as
ever. When the command fails with a traceback (a bug) the held lines are written out
first, after all; bad input stays one line of its own. TensorFlow's, absl's and JAX's
Python loggers are at ERROR meanwhile (retracing warnings, platform probes).

The command line holds them back (``keras_vit.commands.main``); ``--verbose`` or
``KERAS_VIT_VERBOSE=1`` shows everything. ``import keras_vit`` in your own program
changes nothing.
"""

import contextlib
import logging
import os
import sys
import tempfile

LOGGERS = ("tensorflow", "absl", "jax")  # the backends' Python loggers, at ERROR while held
_TRUE = ("1", "true", "yes", "on")
_terminal = []  # while held: {1: where stdout went before, 2: stderr's} (innermost last)


def verbose(argv=()):
    """True when the user asked for everything: ``KERAS_VIT_VERBOSE=1`` or ``--verbose`` in ``argv``.

    >>> verbose(["presets", "--verbose"]), verbose(["presets"])
    (True, False)
    """
    return os.environ.get("KERAS_VIT_VERBOSE", "").lower() in _TRUE or "--verbose" in argv


def add_flag(parser):
    """A command's ``--verbose`` (``commands.main`` reads it from the line, before the command runs)."""
    parser.add_argument("--verbose", action="store_true", help="show the backends' own lines and warnings")


class Held:
    """What ``held()`` caught: ``text()`` so far; ``show()`` writes it out (once)."""

    def __init__(self, caught=None):
        self._caught = caught
        self._shown = False

    def text(self):
        if self._caught is None:
            return ""
        fd = self._caught.fileno()  # read without moving the offset descriptor 2 writes at
        return os.pread(fd, os.fstat(fd).st_size, 0).decode(errors="replace")

    def show(self):
        """The held lines onto ``sys.stderr``: the command failed, and they may say why."""
        if self._shown or self._caught is None:
            return
        self._shown = True
        text = self.text()
        if text:
            sys.stderr.write(text if text.endswith("\n") else text + "\n")
            sys.stderr.flush()


@contextlib.contextmanager
def held(loud=False):
    """Descriptors 1 and 2 into a temporary file for the block (the module's docstring);
    yields a ``Held``. ``loud`` (``verbose()``): nothing held."""
    if loud:
        yield Held()
        return
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")  # TensorFlow's C++ INFO lines: not even held
    levels = {name: logging.getLogger(name).level for name in LOGGERS}
    for name in LOGGERS:
        logging.getLogger(name).setLevel(logging.ERROR)
    streams = {1: "stdout", 2: "stderr"}
    python = {fd: getattr(sys, name) for fd, name in streams.items()}
    for stream in python.values():
        stream.flush()
    saved = {fd: os.dup(fd) for fd in streams}
    # Python's streams follow the terminal, unless someone else has replaced one (a test's capture).
    ours = [fd for fd, stream in python.items() if _descriptor(stream) == fd]
    with tempfile.TemporaryFile() as caught:
        for fd in streams:
            os.dup2(caught.fileno(), fd)
        for fd in ours:
            setattr(sys, streams[fd], _reopened(python[fd], saved[fd]))
        hold = Held(caught)
        _terminal.append(saved)
        try:
            yield hold
        except SystemExit:  # --help and bad input (one line of its own) leave this way
            raise
        except BaseException:  # a bug: the held lines may say why
            hold.show()
            raise
        finally:
            _terminal.pop()
            for fd in ours:
                getattr(sys, streams[fd]).flush()
                setattr(sys, streams[fd], python[fd])
            for fd in streams:
                os.dup2(saved[fd], fd)
                os.close(saved[fd])
            for name, level in levels.items():
                logging.getLogger(name).setLevel(level)


def terminal(fd):
    """A child process's ``stdout=`` (``fd`` 1) or ``stderr=`` (2): where it went before
    ``held()`` (a keras-vit command started as a child holds its own lines back), else
    None (inherited)."""
    return _terminal[-1][fd] if _terminal else None


def _reopened(stream, fd):
    """``stream`` (``sys.stdout`` or ``sys.stderr``) again, on descriptor ``fd``."""
    return open(fd, "w", encoding=stream.encoding, errors=stream.errors, closefd=False,
                buffering=1 if stream.line_buffering else -1)  # fmt: skip


def _descriptor(stream):
    try:
        return stream.fileno()
    except (AttributeError, OSError, ValueError):  # io.StringIO and the like
        return None
