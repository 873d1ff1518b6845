"""What the layers ask of PyTorch, and the only place they ask it.

``is_tracing``: whether ``torch.compile`` or ``torch.export`` is tracing, where the layers
keep Keras' full ``Layer.__call__`` (see ``layers.inline``). Nothing else in the layers
imports PyTorch.
"""

import functools


@functools.cache
def _torch():
    import torch

    return torch


def is_tracing():
    """True while ``torch.compile`` or ``torch.export`` traces (``torch.compiler.is_compiling``,
    public API, true in both and constant while tracing).

    >>> import keras
    >>> is_tracing() if keras.config.backend() == "torch" else False
    False
    """
    return _torch().compiler.is_compiling()
