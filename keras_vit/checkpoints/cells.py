"""The checkpoint table's cells: where one Keras weight comes from in an upstream file.

A cell is a ``Source``: the upstream key(s) (``{0}``, ``{1}``: the indices the row's regex
matched) and a small pure function from those arrays to the Keras weight (transposed,
concatenated, reshaped). ``keras_vit.checkpoints.table`` fills its columns with them.
"""

import numpy as np

BLOCK = r"block_(\d+)/"  # keras-vit's encoder block prefix in a row's regex; its index fills {0}
TEXT_BLOCK = r"text_block_(\d+)/"  # a text tower's (keras_vit.models.text_tower)


class Source:
    """Upstream keys plus a transform; ``keys`` may contain ``{0}`` for the block index."""

    def __init__(self, keys, transform):
        self.keys = (keys,) if isinstance(keys, str) else tuple(keys)
        self.transform = transform

    def resolve(self, groups):
        return [k.format(*groups) for k in self.keys]

    def __call__(self, arrays, groups):
        return self.transform(*[arrays[k] for k in self.resolve(groups)])


def same(key):
    return Source(key, lambda a: a)


def linear(*keys):
    """torch ``Linear`` weights are ``(out, in)``; Keras ``Dense`` kernels ``(in, out)``.

    Several keys (query, key, value) are concatenated along the output axis."""
    return Source(keys, lambda *a: a[0].T if len(a) == 1 else np.concatenate([w.T for w in a], axis=-1))


def concat(*keys):
    return Source(keys, lambda *a: np.concatenate([b.reshape(-1) for b in a]))


def conv(key):
    """torch ``Conv2d`` weights are OIHW; Keras kernels HWIO."""
    return Source(key, lambda w: np.transpose(w, (2, 3, 1, 0)))


def batched(key):
    """An upstream embedding without the leading batch axes Keras keeps: ``(width,)`` or
    ``(tokens, width)`` -> ``(1, 1, width)`` or ``(1, tokens, width)``."""
    return Source(key, lambda a: np.asarray(a).reshape((1,) * (3 - np.ndim(a)) + tuple(np.shape(a))))


def zero_bias(key, axis=0):
    """A Dense bias of zeros for an upstream projection without one (``key``: its weight,
    whose output axis is ``axis``: 0 for torch's ``(out, in)``, -1 for a Keras kernel)."""
    return Source(key, lambda w: np.zeros(np.shape(w)[axis], np.asarray(w).dtype))


def joined(*keys):
    """Keras kernels ``(in, out)`` of separate projections (query, key, value) as one, joined
    along the output axis."""
    return Source(keys, lambda *a: np.concatenate(a, axis=-1))


def renamed(source, old, new):
    """``source`` (or None) with ``old`` replaced by ``new`` once in each of its keys."""
    return None if source is None else Source([k.replace(old, new, 1) for k in source.keys], source.transform)


def in_projection(key, part):
    """torch ``MultiheadAttention``'s fused ``in_proj`` (query, key, value stacked on the
    output axis) split as attention pooling holds it: ``part`` ``"query"`` (the first
    third) or ``"key_value"`` (the rest), as a Dense kernel (2-D weight) or bias (1-D)."""

    def split(a):
        a = np.asarray(a)
        third = a.shape[0] // 3
        piece = a[:third] if part == "query" else a[third:]
        return piece.T if piece.ndim == 2 else piece

    return Source(key, split)


class Shifted(Source):
    """A ``Source`` whose first ``count`` regex groups are indices, shifted by ``by``.

    Our paths count from 0 (``resnet/stage_{i}/unit_{j}``, like the encoder's
    ``block_{i}``); a layout that counts from 1 (the original ``.npz``'s
    ``block{i+1}/unit{j+1}``) shifts them by 1. Later groups are used as they are.

    >>> Shifted(same("block{0}/unit{1}/{2}/kernel")).resolve(("0", "2", "conv1"))
    ['block1/unit3/conv1/kernel']
    """

    def __init__(self, source, by=1, count=2):
        super().__init__(source.keys, source.transform)
        self.by, self.count = by, count

    def resolve(self, groups):
        indices = [int(g) + self.by for g in groups[: self.count]]
        return super().resolve((*indices, *groups[self.count :]))


# A torch module's two weights, as a one-column table's two rows (Keras path regex, Source):
# a norm's ``weight`` and ``bias`` are Keras' gamma and beta, a Linear's and a Conv2d's its
# kernel (transposed) and bias. ``path`` and ``key``: the module's Keras path and upstream key.


def norm_rows(path, key):
    return [(path + "/gamma", same(key + ".weight")), (path + "/beta", same(key + ".bias"))]


def linear_rows(path, key):
    return [(path + "/kernel", linear(key + ".weight")), (path + "/bias", same(key + ".bias"))]


def conv_rows(path, key):
    return [(path + "/kernel", conv(key + ".weight")), (path + "/bias", same(key + ".bias"))]


def heads_in(*keys):
    """Flax attention input kernels ``(width, heads, head_dim)`` -> ``(width, heads * head_dim)``."""
    return Source(keys, lambda *a: np.concatenate([w.reshape(w.shape[0], -1) for w in a], axis=-1))


def heads_out(key):
    """Flax attention output kernel ``(heads, head_dim, width)`` -> ``(heads * head_dim, width)``."""
    return Source(key, lambda w: w.reshape(-1, w.shape[-1]))
