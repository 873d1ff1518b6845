"""Ctrl-C and SIGTERM held back over a few lines of code, then delivered.

Python runs a signal's handler between two bytecodes of the main thread, wherever it is:
inside ``subprocess.Popen``, after the child started and before ``Popen`` returned, a stop
would leave the caller without the child's handle, and the child would run on, orphaned,
writing its files. ``held_signals`` records a stop that lands in its block and hands it to
the handler that was there before as the block ends, where the caller holds what it started.
"""

import contextlib
import os
import signal
import threading

HELD = (signal.SIGINT, signal.SIGTERM)


def _deliver(number, frame, handler):
    if callable(handler):
        handler(number, frame)  # Python's Ctrl-C handler, keras_vit.commands.interrupts', a caller's
    elif handler in (signal.SIG_DFL, None):
        os.kill(os.getpid(), number)  # the default action, now that the default is back
    # SIG_IGN: the signal was to be ignored anyway


@contextlib.contextmanager
def held_signals():
    """Ctrl-C and SIGTERM that arrive inside the block are delivered as it ends.

    >>> import os, signal
    >>> caught = []
    >>> previous = signal.signal(signal.SIGTERM, lambda number, frame: caught.append(number))
    >>> with held_signals():
    ...     os.kill(os.getpid(), signal.SIGTERM)
    ...     held = list(caught)
    >>> held, caught == [signal.SIGTERM]
    ([], True)
    >>> _ = signal.signal(signal.SIGTERM, previous)
    """
    if threading.current_thread() is not threading.main_thread():
        yield  # handlers run in the main thread only, and only it may set them
        return
    caught = []
    previous = {number: signal.signal(number, lambda n, frame: caught.append((n, frame))) for number in HELD}
    try:
        yield
    finally:
        for number, handler in previous.items():
            signal.signal(number, signal.SIG_DFL if handler is None else handler)
        if caught:
            number, frame = caught[0]  # the first stop; a second one would only repeat it
            _deliver(number, frame, previous[number])
