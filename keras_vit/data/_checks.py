"""Argument checks shared by the data modules, so every bad value fails before any work.

Each message says what was expected and what was given.
"""

import numbers


def positive_int(value, name):
    """Returns ``value`` as an int, or raises ValueError naming ``name`` and the value given."""
    # bool is an int subclass; True as a batch size is a bug, not a 1.
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value <= 0:
        raise ValueError(f"{name} must be a positive integer; got {name}={value!r}.")
    return int(value)


def image_size_pair(image_size):
    """Returns ``(height, width)`` from an int or a pair of positive ints, else raises ValueError."""
    if isinstance(image_size, (tuple, list)):
        if len(image_size) != 2:
            raise ValueError(
                "image_size must be a positive integer or a (height, width) pair of positive "
                f"integers; got image_size={image_size!r}."
            )
        try:
            return tuple(positive_int(v, "image_size") for v in image_size)
        except ValueError:
            pass  # re-raised below with the whole value, not just the bad element
        raise ValueError(
            "image_size must be a positive integer or a (height, width) pair of positive "
            f"integers; got image_size={image_size!r}."
        )
    try:
        size = positive_int(image_size, "image_size")
    except ValueError:
        raise ValueError(
            "image_size must be a positive integer or a (height, width) pair of positive "
            f"integers; got image_size={image_size!r}."
        ) from None
    return (size, size)


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
        raise ValueError(
            f"{name} must be a (min, max) pair with {low} < min <= max <= {high}; "
            f"got {name}={value!r}."
        )
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
