"""Argument checks shared by the package, so every bad value fails before any work.

Each message says what was expected and what was given.
"""

import numbers


def positive_int(value, name):
    """Returns ``value`` as an int, or raises ValueError naming ``name`` and the value given."""
    # bool is an int subclass; True as a batch size is a bug, not a 1.
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value <= 0:
        raise ValueError(f"{name} must be a positive integer; got {name}={value!r}.")
    return int(value)


def non_negative_int(value, name):
    """Returns ``value`` as an int, or raises ValueError naming ``name`` and the value given."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 0:
        raise ValueError(f"{name} must be a non-negative integer; got {name}={value!r}.")
    return int(value)


def pair(value, name="image_size"):
    """``(a, b)`` from a positive int or a pair of them, else a ValueError naming ``name``.

    >>> pair(224), pair((48, 80))
    ((224, 224), (48, 80))
    """
    values = tuple(value) if isinstance(value, (tuple, list)) else (value, value)
    try:
        if len(values) != 2:
            raise ValueError
        return tuple(positive_int(v, name) for v in values)
    except ValueError:
        raise ValueError(
            f"{name} must be a positive integer or a pair of positive integers, got {value!r} ({name}={value!r})."
        ) from None


def fraction_range(value, name, low=0.0, high=1.0):
    """Checks a ``(min, max)`` pair with ``low < min <= max <= high``; returns floats."""
    ok = isinstance(value, (tuple, list)) and len(value) == 2
    if ok:
        try:
            lo, hi = float(value[0]), float(value[1])
        except (TypeError, ValueError):
            ok = False
        else:
            ok = low < lo <= hi <= high
    if not ok:
        raise ValueError(f"{name} must be a (min, max) pair with {low} < min <= max <= {high}; got {name}={value!r}.")
    return (lo, hi)


def split_fractions(validation_fraction, test_fraction):
    """Checks the held-out fractions of a split: each in [0, 1), together below 1."""
    for name, value in (("validation_fraction", validation_fraction), ("test_fraction", test_fraction)):
        if isinstance(value, bool) or not isinstance(value, numbers.Real) or not 0.0 <= value < 1.0:
            raise ValueError(f"{name} must be a number in [0, 1); got {name}={value!r}.")
    if validation_fraction + test_fraction >= 1.0:
        raise ValueError(
            "validation_fraction + test_fraction must leave some training data (sum < 1); got "
            f"validation_fraction={validation_fraction!r}, test_fraction={test_fraction!r}."
        )


def flag(name):
    """The command-line flag of a field: ``--batch-size`` for ``batch_size``."""
    return "--" + name.replace("_", "-")
