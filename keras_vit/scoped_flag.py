"""A per-thread flag that is on inside a ``with`` block: the backend seams' tracing scopes
(``tensorflow_graph.portable``, ``torch_eager.kernels_in_graph``)."""

import contextlib
import threading


class ScopedFlag:
    """False, except inside ``with flag.on():`` in the same thread; a nested block
    leaves it as it found it.

    Example:
    >>> flag = ScopedFlag()
    >>> with flag.on():
    ...     print(bool(flag))
    True
    >>> bool(flag)
    False
    """

    def __init__(self):
        self._local = threading.local()

    def __bool__(self):
        return getattr(self._local, "on", False)

    @contextlib.contextmanager
    def on(self):
        outer = bool(self)
        self._local.on = True
        try:
            yield
        finally:
            self._local.on = outer
