"""Class names: the label sets that ship with the package, and decoding a classifier's scores.

A model's ``class_names`` are a label set's name (``"imagenet1k"``, ``"imagenet21k"``),
stored as that name so a ``.keras`` file stays small, or the names themselves (a
fine-tuned model keeps its dataset's folder or tfds label names). The label sets are
``<name>.tsv`` files beside this module, one ``synset<TAB>names`` line per class in the
order of the checkpoints' classifiers (written by ``scripts/make_label_sets.py``).
"""

import functools
import os

# Label set -> number of classes, to recognise a classifier's label set by its width.
LABEL_SETS = {"imagenet1k": 1000, "imagenet21k": 21843}


@functools.cache
def _rows(name):
    if name not in LABEL_SETS:
        raise ValueError(f"Unknown label set {name!r}; expected one of {sorted(LABEL_SETS)}.")
    with open(os.path.join(os.path.dirname(__file__), f"{name}.tsv"), encoding="utf-8") as f:
        return tuple(tuple(line.rstrip("\n").split("\t", 1)) for line in f)


def label_set(name):
    """The class names of a label set that ships with keras-vit, in classifier order.

    >>> names = label_set("imagenet1k")
    >>> len(names), names[281]
    (1000, 'tabby, tabby cat')
    """
    return tuple(names for _, names in _rows(name))


def synsets(name):
    """The WordNet synset id of each class of a label set (``"n02123045"`` for the tabby cat).

    >>> synsets("imagenet21k")[:2]
    ('n00004475', 'n00005787')
    """
    return tuple(synset for synset, _ in _rows(name))


def resolve_class_names(class_names, num_classes=None):
    """A tuple of names from a label set's name or a sequence of names, checked against
    ``num_classes`` (None: unchecked). ``None`` stays None.

    >>> resolve_class_names(["cat", "dog"], num_classes=2)
    ('cat', 'dog')
    """
    if class_names is None:
        return None
    if isinstance(class_names, str):
        names = label_set(class_names)
    else:
        names = tuple(str(n) for n in class_names)
    if num_classes is not None and len(names) != num_classes:
        raise ValueError(f"Expected {num_classes} class names, one per classifier output; got {len(names)}.")
    return names


def label_set_name(names):
    """The label set's name if ``names`` are exactly one that ships, else ``names``: a
    model's file then stores ``"imagenet21k"`` instead of 21843 names.

    >>> label_set_name(label_set("imagenet1k")), label_set_name(("cat", "dog"))
    ('imagenet1k', ('cat', 'dog'))
    """
    for name, size in LABEL_SETS.items():
        if len(names) == size and tuple(names) == label_set(name):
            return name
    return names


def decode_predictions(probabilities, top=5, class_names=None):
    """The ``top`` classes of each image as ``(index, name, score)``, best first.

    Args:
        probabilities: ``(batch, classes)`` scores (a model's softmax output; one image's
            ``(classes,)`` is taken as a batch of one). Any backend's tensor or a numpy array.
        top: how many classes per image.
        class_names: a model (its ``class_names``), a label set's name or a sequence of
            names (default: the label set whose size matches, e.g. ImageNet-1k for 1000).

    Returns:
        One list per image of ``(index, name, score)`` tuples of Python values.

    Examples:
        >>> import numpy as np
        >>> scores = np.full((1, 1000), 0.0005, "float32")
        >>> scores[0, 281] = 0.5
        >>> decode_predictions(scores, top=2)[0][0]
        (281, 'tabby, tabby cat', 0.5)
    """
    import keras
    import numpy as np

    scores = np.asarray(keras.ops.convert_to_numpy(probabilities), dtype=np.float64)
    if scores.ndim == 1:
        scores = scores[None]
    if scores.ndim != 2:
        raise ValueError(f"Expected scores of shape (batch, classes); got shape {scores.shape}.")
    num_classes = scores.shape[1]
    class_names = getattr(class_names, "class_names", class_names)  # a model
    if class_names is None:
        known = [name for name, size in LABEL_SETS.items() if size == num_classes]
        if not known:
            raise ValueError(
                f"No label set that ships with keras-vit has {num_classes} classes "
                f"({', '.join(f'{k}: {v}' for k, v in LABEL_SETS.items())}); pass class_names=."
            )
        class_names = known[0]
    names = resolve_class_names(class_names, num_classes)
    top = min(int(top), num_classes)
    best = np.argsort(-scores, axis=1, kind="stable")[:, :top]
    return [[(int(i), names[i], float(row[i])) for i in indices] for row, indices in zip(scores, best)]
