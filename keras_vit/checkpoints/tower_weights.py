"""A tower's weights from an upstream file's arrays, by the rows of its table
(``table.HF_CLIP_TEXT``): each Keras weight from its source, every problem named before
anything is assigned."""

import re

import keras
import numpy as np


def _find(rows, path):
    """The ``(Source, regex groups)`` of the row that matches ``path``, or None."""
    for pattern, source in rows:
        match = re.fullmatch(pattern, path)
        if match:
            return source, match.groups()
    return None


def assign_rows(model, rows, arrays, prefix=""):
    """Assigns every weight of ``model`` from ``arrays`` (key to array) by ``rows`` (``(Keras
    path regex, Source)`` pairs), each key read under ``prefix`` (``"model."`` where a
    wrapper adds it); returns the keys it read. A weight with no row, a key missing or a
    shape that differs is a ``ValueError`` naming each one, and then nothing is assigned."""
    plan, errors, used = [], [], set()
    for variable in model.weights:
        found = _find(rows, variable.path)
        if found is None:
            errors.append(f"{variable.path}: no row for this weight")
            continue
        source, groups = found
        keys = [prefix + key for key in source.resolve(groups)]
        missing = [key for key in keys if key not in arrays]
        if missing:
            errors.append(f"{variable.path}: missing key {missing[0]!r}")
            continue
        value = np.asarray(source.transform(*(arrays[key] for key in keys)))
        if value.shape != tuple(variable.shape):
            errors.append(f"{variable.path}: {keys[0]!r} gives shape {value.shape}, expected {tuple(variable.shape)}")
            continue
        plan.append((variable, value))
        used.update(keys)
    if errors:
        raise ValueError(f"the arrays do not fit model {model.name!r}; nothing was loaded:\n  " + "\n  ".join(errors))
    for variable, value in plan:
        variable.assign(keras.ops.convert_to_tensor(value, variable.dtype))
    return used
