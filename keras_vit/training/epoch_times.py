"""Each epoch's wall time in a run, for the summary a recipe prints."""

import statistics
import time

import keras


class EpochTimes(keras.callbacks.Callback):
    """Records in ``seconds`` the time from one epoch's end to the next's (the first from
    the start of training): its steps, validation and every callback before this one in
    the list, so put it last."""

    def __init__(self):
        super().__init__()
        self.seconds = []

    def on_train_begin(self, logs=None):
        self._last = time.perf_counter()

    def on_epoch_end(self, epoch, logs=None):
        now = time.perf_counter()
        self.seconds.append(now - self._last)
        self._last = now


def per_epoch(seconds):
    """The median epoch after the first (which compiles), its range, and the first.

    >>> per_epoch([9.0, 2.0, 3.0, 2.5])
    '2.50 s (2.00-3.00), first 9.0 s'
    >>> per_epoch([4.0])
    '4.0 s'
    """
    if len(seconds) < 2:
        return f"{seconds[0]:.1f} s" if seconds else ""
    rest = seconds[1:]
    return f"{statistics.median(rest):.2f} s ({min(rest):.2f}-{max(rest):.2f}), first {seconds[0]:.1f} s"
