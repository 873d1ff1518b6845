"""A folder of images with one subfolder per class (the ImageNet / Keras layout).

Either ``root/<class>/<image>`` (split here, seeded and stratified) or, when the folder
is already split, ``root/train/<class>/...`` with ``root/validation`` (or ``val``) and/or
``root/test`` beside it. Files are listed and sorted up front and decoded lazily by
tf.data, so a large folder costs no memory until it is read.
"""

import os
import warnings
import zlib

import numpy as np

from keras_vit.data.splits import DatasetInfo, DatasetSplits, Split, stratified_split_indices
from keras_vit.dependencies import require

IMAGE_EXTENSIONS = (".bmp", ".gif", ".jpeg", ".jpg", ".png")  # what tf.io.decode_image reads
_SPLIT_FOLDERS = {"train": "train", "validation": "validation", "val": "validation", "test": "test"}


def _subfolders(path):
    return sorted(e.name for e in os.scandir(path) if e.is_dir() and not e.name.startswith("."))


def _image_files(path):
    # Recursive, like keras.utils.image_dataset_from_directory; sorted for a fixed order.
    found = []
    for dirpath, dirnames, filenames in os.walk(path):
        dirnames.sort()
        found.extend(os.path.join(dirpath, f) for f in sorted(filenames) if f.lower().endswith(IMAGE_EXTENSIONS))
    return found


def _list_classes(root, class_names=None):
    """Returns (paths, labels, class_names) for ``root/<class>/...``."""
    class_names = class_names if class_names is not None else _subfolders(root)
    paths, labels = [], []
    for index, cls in enumerate(class_names):
        folder = os.path.join(root, cls)
        files = _image_files(folder) if os.path.isdir(folder) else []
        paths.extend(files)
        labels.extend([index] * len(files))
    return paths, np.asarray(labels, dtype=np.int32), tuple(class_names)


def _folder(path):
    """``path`` as a string, or a ValueError where it is not an existing folder."""
    if not isinstance(path, (str, os.PathLike)) or not os.path.isdir(path):
        raise ValueError(f"Expected an existing folder of images; got {path!r}, which is not a folder.")
    return os.fspath(path)


def labelled_files(root):
    """``(paths, labels, class_names)`` of every image under ``root/<class>/`` (sorted class
    names, their indices the labels): what an evaluation without training reads whole.
    Raises ValueError for a path that is not a folder or a folder without images."""
    root = _folder(root)
    paths, labels, class_names = _list_classes(root)
    if not paths:
        raise _no_images_error(root)
    return paths, labels, class_names


def _no_images_error(root):
    looked_for = ", ".join(IMAGE_EXTENSIONS)
    top_level = [f for f in os.listdir(root) if f.lower().endswith(IMAGE_EXTENSIONS)]
    hint = f" It holds {len(top_level)} image(s) directly; move them into one subfolder per class." if top_level else ""
    return ValueError(
        f"No images found in folder {root!r}: expected one subfolder per class holding image "
        f"files with extensions {looked_for} (case-insensitive).{hint}"
    )


# The first bytes of each format tf.io.decode_image reads.
_SIGNATURES = (b"\x89PNG", b"\xff\xd8\xff", b"GIF87a", b"GIF89a", b"BM")


def _listing(paths, limit=5):
    return ", ".join(repr(p) for p in paths[:limit]) + (f" and {len(paths) - limit} more" if len(paths) > limit else "")


def _cut_short(path, head):
    """Whether an image file ends before its format's end marker (a copy or download cut
    off). JPEG is judged by its last 64 KB: an end marker can only be followed by a trailer."""
    with open(path, "rb") as f:
        size = f.seek(0, os.SEEK_END)
        f.seek(max(0, size - 65536))
        tail = f.read()
    if head.startswith(b"\x89PNG"):
        return b"IEND" not in tail[-64:]  # the IEND chunk and its CRC are the last 12 bytes
    if head.startswith(b"\xff\xd8\xff"):
        return b"\xff\xd9" not in tail
    if head.startswith(b"GIF"):
        return not tail.rstrip(b"\x00").endswith(b"\x3b")
    return size < int.from_bytes(head[2:6], "little")  # BMP: the size its header states


def _png_damaged(path):
    """Whether a PNG's chunks fail their CRC-32 (bytes changed inside: a bad copy or disk).
    Reads the file once; a PNG is the one format whose every part carries a checksum."""
    with open(path, "rb") as f:
        f.seek(8)
        while True:
            header = f.read(8)
            if len(header) < 8:
                return True  # no IEND: structure broken
            length = int.from_bytes(header[:4], "big")
            data, crc = f.read(length), f.read(4)
            if len(data) < length or zlib.crc32(header[4:] + data) != int.from_bytes(crc, "big"):
                return True
            if header[4:] == b"IEND":
                return False


def _check_images(paths):
    """Refuses, before any training, files whose first bytes are no image format's (a
    renamed text file, an HTML error page saved as .jpg) or that cannot be opened; returns
    the images cut short or damaged inside (a PNG checksum), which are skipped with a
    warning naming them. Reads 8 bytes and the end of each file, and each PNG whole."""
    bad, short, unreadable, damaged = [], [], [], []
    for path in paths:
        try:
            with open(path, "rb") as f:
                head = f.read(8)
        except OSError as error:  # a broken link, no permission, a folder named .jpg
            unreadable.append(f"{path} ({error.strerror or error})")
            continue
        if not head.startswith(_SIGNATURES):
            bad.append(path)
        elif _cut_short(path, head):
            short.append(path)
        elif head.startswith(b"\x89PNG") and _png_damaged(path):
            damaged.append(path)
    if unreadable:
        raise ValueError(
            f"{len(unreadable)} image file(s) cannot be read: {_listing(unreadable)}. Expected readable image "
            "files: fix their permissions or links, or remove them."
        )
    if bad:
        raise ValueError(
            f"{len(bad)} file(s) named as images are not PNG, JPEG, GIF or BMP images: {_listing(bad)}. "
            "Remove or replace them."
        )
    if short:
        warnings.warn(
            f"Skipping {len(short)} image(s) cut short (their format's end is missing): {_listing(short)}. "
            "Copy them again to use them.",
            stacklevel=3,
        )
    if damaged:
        warnings.warn(
            f"Skipping {len(damaged)} image(s) damaged inside (a PNG checksum does not match): "
            f"{_listing(damaged)}. Copy them again to use them.",
            stacklevel=3,
        )
    return set(short) | set(damaged)


def _without(paths, labels, skipped):
    keep = [i for i, p in enumerate(paths) if p not in skipped]
    return [paths[i] for i in keep], np.asarray(labels)[keep]


def _decode(path, label):
    tf = require("tensorflow", "data")

    # channels=3 turns grey into RGB and drops alpha; expand_animations=False gives a GIF's
    # first frame as (H, W, 3) instead of a 4-D stack.
    image = tf.io.decode_image(tf.io.read_file(path), channels=3, expand_animations=False)
    image.set_shape([None, None, 3])
    return image, label


def _split(name, info, paths, labels):
    tf = require("tensorflow", "data")

    dataset = tf.data.Dataset.from_tensor_slices((np.asarray(paths, dtype=str), labels))
    dataset = dataset.map(_decode, num_parallel_calls=tf.data.AUTOTUNE)
    # An image cut short past its header fails only when decoded: skipped with TensorFlow's
    # warning, rather than stopping a run in the middle of an epoch.
    dataset = dataset.ignore_errors(log_warning=True)
    return Split(name, info, dataset=dataset, num_examples=len(paths))


def load_image_folder(path, validation_fraction=0.1, test_fraction=0.2, seed=0):
    """Loads a folder of images, one subfolder per class, as train/validation/test splits.

    Class names are the sorted subfolder names; labels are their indices. An unsplit folder
    is split by a seeded, stratified draw (``validation_fraction`` / ``test_fraction``),
    so the same seed gives the same split every run. A pre-split folder (``train/`` plus
    ``validation/`` or ``val/`` and/or ``test/``) is used as it is; a missing validation or
    test part is carved out of train with the same fractions. Images decode to uint8
    ``(H, W, 3)`` (grey becomes RGB); sizes may differ, ``make_pipeline`` resizes them.

    Raises ValueError, before any image is decoded, when the folder holds no images (naming
    the extensions looked for), fewer than two classes, or files that are not images by
    their first bytes, or files that cannot be opened (naming them). An image cut short
    (its format's end marker missing) or a PNG damaged inside (a chunk's checksum) is
    skipped with a warning naming it; a JPEG whose entropy-coded data fails to decode is
    skipped with TensorFlow's warning when the pipeline reaches it, never a crash
    mid-epoch. Damage the JPEG decoder does not notice (the data carries no checksum)
    decodes, with its "Corrupt JPEG data" warning, into the garbled image it holds.

    Examples:
        >>> import os, tempfile, numpy as np
        >>> from PIL import Image
        >>> root = tempfile.mkdtemp()
        >>> for cls in ("cat", "dog"):
        ...     os.makedirs(os.path.join(root, cls))
        ...     for i in range(5):
        ...         Image.fromarray(np.zeros((8, 8, 3), np.uint8)).save(f"{root}/{cls}/{i}.png")
        >>> splits = load_image_folder(root, validation_fraction=0.2, test_fraction=0.2)
        >>> splits.info.class_names, splits.train.num_examples, splits.test.num_examples
        (('cat', 'dog'), 6, 2)
    """
    root = _folder(path)
    subfolders = _subfolders(root)
    presplit = "train" in subfolders and all(s in _SPLIT_FOLDERS for s in subfolders)

    if presplit:
        paths, labels, class_names = _list_classes(os.path.join(root, "train"))
        parts = {"train": (paths, labels)}
        for folder in subfolders:
            role = _SPLIT_FOLDERS[folder]
            if role != "train":
                extra = set(_subfolders(os.path.join(root, folder))) - set(class_names)
                if extra:
                    raise ValueError(
                        f"Folder {os.path.join(root, folder)!r} has classes {sorted(extra)} that "
                        f"{os.path.join(root, 'train')!r} lacks; expected the same class subfolders."
                    )
                parts[role] = _list_classes(os.path.join(root, folder), class_names)[:2]
    else:
        paths, labels, class_names = _list_classes(root)
        parts = {}
    if len(paths) == 0:
        raise _no_images_error(os.path.join(root, "train") if presplit else root)

    if len(class_names) < 2:
        raise ValueError(
            f"Folder {root!r} has {len(class_names)} class subfolder(s) ({', '.join(class_names)}): a classifier "
            "needs at least two, one subfolder per class."
        )
    skipped = _check_images(list(paths) + [p for role, (files, _) in parts.items() if role != "train" for p in files])
    if skipped:
        paths, labels = _without(paths, labels, skipped)
        parts = {role: _without(files, part_labels, skipped) for role, (files, part_labels) in parts.items()}
    info = DatasetInfo(
        name=root,
        num_classes=len(class_names),
        class_names=class_names,
        image_shape=(None, None, 3),
    )
    # Carve whatever is missing out of train, seeded and stratified.
    missing_val = "validation" not in parts
    missing_test = "test" not in parts
    if missing_val or missing_test:
        train_idx, val_idx, test_idx = stratified_split_indices(
            labels,
            validation_fraction if missing_val else 0.0,
            test_fraction if missing_test else 0.0,
            seed,
        )
        if missing_val:
            parts["validation"] = ([paths[i] for i in val_idx], labels[val_idx])
        if missing_test:
            parts["test"] = ([paths[i] for i in test_idx], labels[test_idx])
        parts["train"] = ([paths[i] for i in train_idx], labels[train_idx])
    return DatasetSplits(*(_split(role, info, *parts[role]) for role in ("train", "validation", "test")), info)
