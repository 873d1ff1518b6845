"""Rematerialisation with the random draws replayed: the backward pass recomputes the same masks.

``keras.remat(f)`` recomputes ``f`` in the backward pass instead of keeping its
activations. A dropout inside ``f`` draws its mask from a ``keras.random.SeedGenerator``,
whose ``next()`` returns the generator's state and advances it: run again, it would draw
other masks (wrong gradients), and on JAX its update from inside the recomputed function
leaks a tracer. So the generators' states go in as arguments, each ``next()`` inside
returns ``start + [0, i]`` for its ``i``-th draw (what the generator itself returns), and
the states are advanced once, outside, by the number of draws: the same masks, in the
forward and the recomputation, as without rematerialisation, and the same states after.
"""

import contextlib

import keras
from keras import ops


def rematerialised(fn, x, generators):
    """``fn(x)`` through ``keras.remat``, the ``generators``' draws inside replayable."""
    if not generators:
        return keras.remat(fn)(x)
    draws = [0] * len(generators)

    def replayed(tokens, *starts):
        with _drawing_from(generators, starts, draws):
            return fn(tokens)

    starts = [generator.state.value for generator in generators]
    outputs = keras.remat(replayed)(x, *starts)
    for generator, start, count in zip(generators, starts, draws):
        if count:
            generator.state.assign(ops.add(start, ops.convert_to_tensor([0, count], dtype=start.dtype)))
    return outputs


@contextlib.contextmanager
def _drawing_from(generators, starts, draws):
    """Each generator's ``next()`` returns ``start + [0, i]`` for its ``i``-th draw (counted
    in ``draws``) and leaves its state alone."""

    def replay(i):
        def next_seed(ordered=True):
            seed = ops.add(starts[i], ops.convert_to_tensor([0, draws[i]], dtype=starts[i].dtype))
            draws[i] += 1
            return seed

        return next_seed

    for i, generator in enumerate(generators):
        draws[i] = 0  # from the start again in the recomputation
        generator.next = replay(i)
    try:
        yield
    finally:
        for generator in generators:
            del generator.next  # the class's own again
