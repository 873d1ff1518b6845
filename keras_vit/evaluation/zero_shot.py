"""Zero-shot evaluation of an image-text model (``keras_vit.models.ImageTextModel``), as
open_clip's users measure theirs with clip_benchmark: the accuracy of labelled images
scored against their class names, and the recall of images and captions retrieving each
other. Only the embeddings' cosines rank, so the pair's scale and bias change nothing here.
"""

import csv
import os
import runpy

import keras
import numpy as np

# open_clip's template sets by name (its ``zero_shot_metadata``: OpenAI's 80 ImageNet
# prompts and the 7 of OpenAI's prompt-engineering notebook), read from its package.
TEMPLATE_SETS = {"openai_imagenet": "OPENAI_IMAGENET_TEMPLATES", "simple_imagenet": "SIMPLE_IMAGENET_TEMPLATES"}


def template_set(templates):
    """``templates`` as a list of strings with one ``{}``: a list as it is, or the name of one
    of open_clip's sets (``TEMPLATE_SETS``, read from the installed ``open_clip_torch``
    package's file without importing it); None stays None (the pair's default)."""
    if templates is None or not isinstance(templates, str) or "{}" in templates:
        return templates
    if templates not in TEMPLATE_SETS:
        raise ValueError(
            f"templates must be a list of strings with one '{{}}', or one of {sorted(TEMPLATE_SETS)}; "
            f"got {templates!r}."
        )
    import importlib.util

    spec = importlib.util.find_spec("open_clip")
    if spec is None:
        raise ValueError(
            f"The template set {templates!r} is open_clip's: install open_clip_torch (pip install open_clip_torch), "
            "or pass the templates as a list."
        )
    # The metadata file defines its tuples alone: run by itself, without the package's torch.
    metadata = runpy.run_path(os.path.join(os.path.dirname(spec.origin), "zero_shot_metadata.py"))
    return [template("{}") for template in metadata[TEMPLATE_SETS[templates]]]


def _embedded(encode, items, batch_size):
    """``(N, width)`` float32 embeddings of ``items`` by ``encode`` (a model's
    ``encode_images`` or ``encode_texts``), a batch at a time: images as a list of what
    ``classify`` takes or a uint8 ``(N, H, W, 3)`` array, texts as a list of strings."""
    items = items if isinstance(items, np.ndarray) else list(items)
    parts = [keras.ops.convert_to_numpy(encode(items[i : i + batch_size])) for i in range(0, len(items), batch_size)]
    return np.concatenate(parts).astype("float32")


def zero_shot_accuracy(model, data, class_names=None, templates=None, top_k=(1, 5), batch_size=32):
    """The zero-shot accuracy of ``model`` on labelled images: each image scored against
    every class's ``label_embeddings``, as ``classify`` scores them.

    Args:
        model: an ``ImageTextModel``.
        data: a folder of images, one subfolder per class (every image of it), or
            ``(images, labels)``: a list of what ``classify`` takes (or a uint8 array) and
            their class indices.
        class_names: the text of each class, in index order (default: the subfolders'
            names); a list, or a text file with one a line.
        templates: a list of strings with one ``{}``, or an open_clip set's name
            (``"openai_imagenet"``, ``"simple_imagenet"``); default the pair's.
        top_k: the accuracies to measure: ``acc<k>``, the share of images whose class is
            among the ``k`` best-scored (a ``k`` above the class count counts as it).
        batch_size: images per forward pass.

    Returns:
        ``{"acc1": ..., "acc5": ..., "mean_per_class_recall": ...}`` (clip_benchmark's
        names: the last is the top-1 accuracy of each class, averaged over the classes).
    """
    from keras_vit.data.folder import labelled_files

    if isinstance(data, (str, os.PathLike)):
        images, labels, names = labelled_files(data)
    else:
        images, labels = data
        names = None
    labels = np.asarray(labels, dtype="int64")
    class_names = class_names_from(class_names, names)
    if len(images) != len(labels) or not len(labels):
        raise ValueError(f"Expected images and one label each; got {len(images)} images and {len(labels)} labels.")
    if labels.min() < 0 or labels.max() >= len(class_names):
        raise ValueError(f"Expected labels from 0 to {len(class_names) - 1} (one per class name); got {labels.max()}.")
    embeddings = model.label_embeddings(list(class_names), template_set(templates))
    texts = keras.ops.convert_to_numpy(embeddings).astype("float32")
    scores = _embedded(model.encode_images, images, batch_size) @ texts.T
    ranked = np.argsort(-scores, axis=-1, kind="stable")
    result = {f"acc{k}": float((ranked[:, :k] == labels[:, None]).any(axis=-1).mean()) for k in top_k}
    correct = ranked[:, 0] == labels
    result["mean_per_class_recall"] = float(np.mean([correct[labels == c].mean() for c in np.unique(labels)]))
    return result


def class_names_from(class_names, names):
    """Each class's text, in index order: ``class_names`` (a list, or a text file with one a
    line), else ``names`` (a folder's subfolders); as many as ``names`` where both are given."""
    if class_names is None:
        if names is None:
            raise ValueError("class_names is needed with (images, labels): the text of each class, in index order.")
        return list(names)
    if isinstance(class_names, (str, os.PathLike)):
        with open(class_names, encoding="utf-8") as f:
            class_names = [line.strip() for line in f if line.strip()]
    class_names = list(class_names)
    if names is not None and len(class_names) != len(names):
        raise ValueError(f"Expected {len(names)} class names, one per subfolder; got {len(class_names)}.")
    return class_names


def read_captions(path):
    """``(images, captions)`` of a captions file: a CSV with an ``image`` column (a path,
    relative to the file's folder) and a ``caption`` column, a row per caption, several
    rows for an image with several captions; the images in their first row's order. A
    ``ValueError`` for other columns, no rows, or an image that is not there."""
    folder = os.path.dirname(os.path.abspath(path))
    captions = {}
    with open(path, encoding="utf-8", newline="") as f:
        reader = csv.DictReader(f)
        if not {"image", "caption"} <= set(reader.fieldnames or ()):
            raise ValueError(f"Expected a CSV with columns image and caption; {path!r} has {reader.fieldnames}.")
        for row in reader:
            captions.setdefault(os.path.join(folder, row["image"]), []).append(row["caption"])
    if not captions:
        raise ValueError(f"Expected at least one caption; {path!r} has none.")
    missing = [image for image in captions if not os.path.isfile(image)]
    if missing:
        shown = ", ".join(repr(os.path.relpath(image, folder)) for image in missing[:3])
        more = f" and {len(missing) - 3} more" if len(missing) > 3 else ""
        raise ValueError(f"{path!r} names images that are not files beside it: {shown}{more}.")
    return list(captions), list(captions.values())


def retrieval_recall(model, images, captions, ks=(1, 5, 10), batch_size=32):
    """Image-text retrieval recall of ``model``, as clip_benchmark measures it: every caption
    ranks every image (``image_retrieval_recall@k``: the share of captions whose image is
    among its ``k`` best), and every image every caption (``text_retrieval_recall@k``: the
    share of images with one of their captions among their ``k`` best).

    Args:
        model: an ``ImageTextModel``.
        images: a list of what ``classify`` takes (or a uint8 ``(N, H, W, 3)`` array).
        captions: one entry per image: its caption, or a list of its captions
            (``read_captions`` reads both from a file).
        ks: the recalls to measure.
        batch_size: images (and captions) per forward pass.

    Returns:
        ``{"image_retrieval_recall@1": ..., "text_retrieval_recall@1": ..., ...}``.
    """
    captions = [[c] if isinstance(c, str) else list(c) for c in captions]
    if len(captions) != len(images) or not all(captions):
        raise ValueError(
            f"Expected one caption or more for each of the {len(images)} images; got {len(captions)} entries"
            + (", some empty." if not all(captions) else ".")
        )
    texts = [c for per_image in captions for c in per_image]
    owner = np.repeat(np.arange(len(captions)), [len(c) for c in captions])
    scores = _embedded(model.encode_texts, texts, batch_size) @ _embedded(model.encode_images, images, batch_size).T
    positive = owner[:, None] == np.arange(len(captions))[None, :]
    return {
        name: value
        for k in ks
        for name, value in (
            (f"image_retrieval_recall@{k}", _recall(scores, positive, k)),
            (f"text_retrieval_recall@{k}", _recall(scores.T, positive.T, k)),
        )
    }


def _recall(scores, positive, k):
    """The share of rows with a positive column among their ``k`` best-scored."""
    best = np.argsort(-scores, axis=-1, kind="stable")[:, :k]
    return float(np.take_along_axis(positive, best, axis=-1).any(axis=-1).mean())
