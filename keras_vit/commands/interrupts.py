"""Ctrl-C and SIGTERM: a command ends with one line on stderr and exit status 128 + the
signal's number (130, 143), after the writes under way have removed their temporary files.

SIGTERM (what ``kill``, a job scheduler or ``docker stop`` sends) is raised in the main
thread as ``Stopped``, a ``KeyboardInterrupt``, as Ctrl-C raises one: every staged write's
cleanup (``keras_vit.atomic``) runs on the way out, and a child process (an export's
converter) is stopped by the code that started it.
"""

import contextlib
import signal
import sys
import threading


class Stopped(KeyboardInterrupt):
    """SIGTERM, raised where the main thread is."""


def _stop(number, frame):
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a second one must not cut the cleanup short
    raise Stopped()


@contextlib.contextmanager
def _sigterm_raises():
    """SIGTERM raises ``Stopped`` inside the block; the previous handler is back after it
    (a program or test that calls ``main`` keeps its own)."""
    if threading.current_thread() is not threading.main_thread():
        yield  # only the main thread may set handlers (and receives signals)
        return
    previous = signal.signal(signal.SIGTERM, _stop)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def run_stoppable(run, argv):
    """``run(argv)``'s exit status; Ctrl-C or SIGTERM: one line and 130 or 143.

    >>> import os
    >>> run_stoppable(lambda argv: os.kill(os.getpid(), signal.SIGTERM), ["export"])
    143
    """
    try:
        with _sigterm_raises():
            return run(argv)
    except KeyboardInterrupt as stop:
        number = signal.SIGTERM if isinstance(stop, Stopped) else signal.SIGINT
        name = "SIGTERM" if number == signal.SIGTERM else "Ctrl-C (SIGINT)"
        command = " ".join(["keras-vit", *[a for a in argv if not a.startswith("-")][:1]])
        print(f"{command}: stopped by {name}; the files it was writing are removed, those it had finished are kept",
              file=sys.stderr)  # fmt: skip
        return 128 + number
