"""Writing files atomically, saving ``.keras`` models, and ``load_model`` for any model file.

Every file keras-vit writes goes to a hidden temporary path beside its target first and is
moved into place with ``os.replace``, a rename that is atomic within one folder on POSIX
file systems: a reader (a resumed run, TF Serving polling a model folder, a deploy script)
sees the old file or the new one, never a half-written one. Temporary names start with a
dot and carry ``.tmp-`` (``.old-`` for a replaced file during the swap), so they are easy
to recognise should a process be killed outright (SIGKILL leaves no chance to clean up).
"""

import contextlib
import errno
import os
import shutil
import uuid

import keras

from keras_vit import checks
from keras_vit.checkpoints import load_weights
from keras_vit.checkpoints.loader import trained_numerics
from keras_vit.checkpoints.readers import sniff_container, unsafe_keras_message
from keras_vit.models.deferred_init import deferred_initialization, initialize_unloaded
from keras_vit.models.rebuild import rebuild
from keras_vit.models.registry import create_model, get_spec
from keras_vit.models.vit import VisionTransformer


class InvalidModelFileError(ValueError):
    """The given path is not a model file keras-vit can load (checked before any work)."""


class DiskFullError(OSError):
    """A write ran out of disk space (or quota, or file size limit); nothing was half-written."""


# The errors of a full disk, a full quota and a process file size limit: as errno values,
# and as the text libraries that write in C (h5py, TensorFlow) put in their own exceptions.
_FULL = {errno.ENOSPC: "No space left on device", errno.EDQUOT: "Disk quota exceeded", errno.EFBIG: "File too large"}


def _disk_full(error):
    """The full-disk reason in ``error`` or its causes, None if it is another error."""
    seen = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        if isinstance(error, OSError) and error.errno in _FULL:
            return _FULL[error.errno]
        for text in _FULL.values():
            if text.lower() in str(error).lower():
                return text
        error = error.__cause__ or error.__context__
    return None


def temp_path_beside(target, tag="tmp"):
    """A fresh hidden path in the target's folder, e.g. ``out/.model.tmp-1a2b3c4d.tflite``.

    The extension is kept, all of it (Keras insists on ``.weights.h5``), so tools that go
    by it can open the file before it is moved.

    >>> name = os.path.basename(temp_path_beside("out/epoch-3.weights.h5"))
    >>> name.startswith(".epoch-3.tmp-"), name.endswith(".weights.h5")
    (True, True)
    """
    directory, name = os.path.split(os.path.abspath(target))
    stem, dot, ext = name.partition(".")
    ext = dot + ext
    return os.path.join(directory, f".{stem}.{tag}-{uuid.uuid4().hex[:8]}{ext}")


def _remove_path(path):
    """Removes a file, link or folder tree if it exists."""
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path, ignore_errors=True)
    elif os.path.lexists(path):
        os.remove(path)


def _keep_aside(target, backup):
    """Keeps the current ``target`` at ``backup`` so a failed commit can restore it. A file
    is hard-linked (copied where links are not supported) and stays in place, so that
    ``os.replace`` swaps it for the new one in one step: a reader, or a process killed at
    any moment, sees one or the other. A folder cannot be renamed over: it is moved aside,
    and for that instant the target is missing (its ``.old-`` sibling holds it)."""
    if os.path.isdir(target) and not os.path.islink(target):
        os.replace(target, backup)
        return
    try:
        os.link(target, backup)
    except OSError:
        shutil.copy2(target, backup, follow_symlinks=False)


def check_targets(targets, overwrite):
    """Raises ``FileExistsError`` naming every existing target unless ``overwrite``."""
    existing = [t for t in targets if os.path.lexists(t)]
    if existing and not overwrite:
        raise FileExistsError(
            f"Expected paths that do not exist yet (or overwrite=True); these exist: {', '.join(existing)}."
        )


class StagedWrites:
    """Several targets written at temporary paths beside them, moved into place together.

    Use as a context manager: write each ``staging.paths[key]``, check the results, then
    call ``commit()``. Leaving the block without ``commit()`` (an exception, a failed check)
    removes every temporary path, and any folder this object created that is still empty.
    ``commit()`` itself is all-or-nothing: if one move fails, the targets it had already
    replaced are restored. An existing target is refused unless ``overwrite``.

    Examples:
        >>> import tempfile
        >>> out = tempfile.mkdtemp()
        >>> with StagedWrites({"a": os.path.join(out, "a.txt")}) as staging:
        ...     with open(staging.paths["a"], "w") as f:
        ...         _ = f.write("done")
        ...     staging.commit()
        >>> sorted(os.listdir(out))
        ['a.txt']
    """

    def __init__(self, targets, overwrite=True):
        self.targets = {key: os.path.abspath(path) for key, path in targets.items()}
        self.overwrite = overwrite
        self.paths = {key: temp_path_beside(path) for key, path in self.targets.items()}
        self.committed = False
        self._created_dirs = []

    def __enter__(self):
        check_targets(self.targets.values(), self.overwrite)
        for target in self.targets.values():
            self._make_parent(os.path.dirname(target))
        return self

    def _make_parent(self, directory):
        missing = []
        while directory and not os.path.isdir(directory):
            missing.append(directory)
            directory = os.path.dirname(directory)
        for path in reversed(missing):
            os.makedirs(path, exist_ok=True)
            self._created_dirs.append(path)

    def commit(self):
        """Moves every staged path onto its target (replacing it only if ``overwrite``)."""
        for key, staged in self.paths.items():
            if not os.path.lexists(staged):
                raise FileNotFoundError(f"{key!r} was never written to {staged}; nothing was moved.")
        # Checked again: another process may have created a target since __enter__.
        check_targets(self.targets.values(), self.overwrite)
        backups, moved = {}, []
        try:
            for key, target in self.targets.items():
                if os.path.lexists(target):
                    backups[target] = temp_path_beside(target, "old")
                    _keep_aside(target, backups[target])
                os.replace(self.paths[key], target)
                moved.append(target)
        except BaseException:
            for target, backup in backups.items():
                if target in moved or os.path.isdir(backup):
                    if os.path.isdir(target) and not os.path.islink(target):
                        _remove_path(target)  # a folder cannot be renamed over
                    os.replace(backup, target)
                else:
                    _remove_path(backup)
            for target in moved:
                if target not in backups:
                    _remove_path(target)
            raise
        for backup in backups.values():
            _remove_path(backup)
        self.committed = True

    def __exit__(self, exc_type, exc, tb):
        for staged in self.paths.values():
            _remove_path(staged)
        if not self.committed:
            for directory in reversed(self._created_dirs):
                try:
                    os.rmdir(directory)  # only if empty: never removes anything else
                except OSError:
                    pass
        reason = None if exc is None or self.committed else _disk_full(exc)
        if reason is not None:
            targets = ", ".join(self.targets.values())
            raise DiskFullError(
                errno.ENOSPC,
                f"Could not write {targets}: {reason}. Nothing was half-written: the partial files are removed "
                "and what was there before is intact. Free some space (or write elsewhere) and run again.",
            ) from exc
        return False


@contextlib.contextmanager
def atomic_path(target, overwrite=True):
    """A temporary path beside ``target``, moved onto it if the block ends without an error.

    The one-target case of ``StagedWrites``: on an error the temporary path is removed and
    ``target`` stays as it was.

    >>> import tempfile
    >>> target = os.path.join(tempfile.mkdtemp(), "notes.txt")
    >>> with atomic_path(target) as path:
    ...     with open(path, "w") as f:
    ...         _ = f.write("complete")
    >>> open(target).read()
    'complete'
    """
    with StagedWrites({"target": target}, overwrite) as staging:
        yield staging.paths["target"]
        staging.commit()


def save_model(model, path, overwrite=True):
    """Saves ``model`` as a ``.keras`` file atomically: never a half-written model at ``path``.

    Missing folders are created. Returns ``path``.

    >>> import tempfile, keras_vit
    >>> model = keras_vit.create_model("vit_ti16", image_size=16, num_classes=3, depth=1)
    >>> folder = tempfile.mkdtemp()
    >>> _ = save_model(model, os.path.join(folder, "run", "model.keras"))
    >>> os.listdir(os.path.join(folder, "run"))
    ['model.keras']
    """
    path = os.fspath(path)
    if not path.endswith(".keras"):
        raise ValueError(f"Expected a path ending in .keras (the Keras model file format); got {path}.")
    with atomic_path(path, overwrite) as staged:
        model.save(staged)
    return path


def check_model_file(path, model_name=None):
    """Checks, without loading it, that ``load_model`` can load ``path``.

    Returns its container (``"keras"`` for a ``.keras`` model, ``"keras_weights"`` for
    ``.weights.h5``, else a checkpoint container such as ``"npz"`` or ``"safetensors"``).
    A checkpoint holds weights only, so it needs ``model_name`` (a ``create_model`` name)
    to build the architecture into.

    >>> import tempfile
    >>> bad = os.path.join(tempfile.mkdtemp(), "model.keras")
    >>> _ = open(bad, "w").write("not a model")
    >>> try:
    ...     check_model_file(bad)
    ... except InvalidModelFileError as error:
    ...     print("is not a model file" in str(error))
    True
    """
    path = os.fspath(path)
    if not os.path.isfile(path):
        what = "a folder" if os.path.isdir(path) else "nothing"
        raise InvalidModelFileError(
            f"Expected a model file (.keras, or a checkpoint with a model name); {path} is {what}."
        )
    try:
        container = sniff_container(path)
    except Exception as error:  # also zipfile.BadZipFile from a truncated file
        raise InvalidModelFileError(
            f"{path} is not a model file keras-vit can load: expected a .keras model or a "
            f"checkpoint that keras_vit.load_weights reads. ({error})"
        ) from None
    if container != "keras" and not model_name:
        raise InvalidModelFileError(
            f"{path} holds weights only ({container}); give the architecture to build them "
            "into: model_name=... (--model NAME, one of keras_vit.list_models())."
        )
    if model_name:
        get_spec(model_name)  # unknown names fail here, with suggestions
    return container


def load_model(path, model_name=None, image_size=None, num_classes=None, safe_mode=True, **model_options):
    """Loads a ``.keras`` model, or builds ``model_name`` and loads a checkpoint into it.

    Args:
        path: a ``.keras`` file written on any backend, or a checkpoint that
            ``keras_vit.load_weights`` reads (original ``.npz``, timm, HF, ``.weights.h5``).
        model_name: the ``create_model`` name; required for checkpoints, and for a
            ``.keras`` file only checked (the file holds its architecture).
        image_size: build at this input size (int or ``(height, width)``; position
            embeddings are resampled); default: the ``.keras`` model's own size, or 224
            for a checkpoint.
        num_classes: classifier size when building from a checkpoint (default 1000).
        safe_mode: True (the default) refuses what could run code while loading (a
            ``Lambda`` layer's Python function, a PyTorch pickle holding more than
            tensors); False loads it: only for files you trust.
        **model_options: further ``create_model`` options for checkpoints (by default
            the model gets the numerics the checkpoint's layout was trained with, e.g.
            the exact GELU for timm weights).

    Returns:
        The model, not compiled.

    Raises:
        InvalidModelFileError (a ValueError): ``path`` is missing, a folder, truncated or
            not a model file; a checkpoint without ``model_name``; a checkpoint that would
            leave weights freshly initialised (e.g. a 1000-class head loaded into a 10-class
            model: give the checkpoint's own ``num_classes``, or build the model yourself and
            call ``keras_vit.load_weights`` to fine-tune); ``image_size`` for a ``.keras``
            model that is not a keras-vit one.
        ValueError: an unknown ``model_name`` (the message suggests close ones).

    Examples:
        >>> import tempfile, keras_vit
        >>> path = os.path.join(tempfile.mkdtemp(), "tiny.keras")
        >>> keras_vit.create_model("vit_ti16", image_size=16, num_classes=3, depth=1).save(path)
        >>> load_model(path).input_shape
        (None, 16, 16, 3)
        >>> load_model(path, image_size=32).input_shape  # position embeddings resampled
        (None, 32, 32, 3)
    """
    container = check_model_file(path, model_name)
    if container == "keras":
        try:
            # Keras finds keras-vit's classes by their registered names (the imports above register them).
            model = keras.saving.load_model(path, compile=False, safe_mode=safe_mode)
        except ValueError as error:
            if "safe_mode" not in str(error):
                raise
            raise InvalidModelFileError(unsafe_keras_message(path)) from None
        size = None if image_size is None else checks.pair(image_size)
        if size is None or tuple(model.input_shape[1:3]) == size:
            return model
        if not isinstance(model, VisionTransformer):
            raise InvalidModelFileError(
                f"image_size={image_size} differs from the model's {model.input_shape[1:3]}, and "
                f"only keras-vit models can be rebuilt at another size; {path} holds a "
                f"{type(model).__name__}. Leave image_size unset."
            )
        resized = rebuild(model, model.spec.replace(image_size=size))
        load_weights(resized, path, safe_mode=safe_mode)
        return resized
    # Built with the numerics the checkpoint was trained with, unless the caller says otherwise.
    hybrid = get_spec(model_name).resnet is not None
    options = {**trained_numerics(path, hybrid), **model_options} if container != "keras_weights" else model_options
    with deferred_initialization():  # the file's weights replace them: not drawn at random
        model = create_model(model_name, image_size, num_classes, **options)
    if container == "keras_weights":
        model.load_weights(path)
        initialize_unloaded(model, [v.path for v in model.weights])
        return model
    report = load_weights(model, path, safe_mode=safe_mode)
    initialize_unloaded(model, report.loaded)
    if report.fresh:
        raise InvalidModelFileError(
            f"{path} has no weights for {', '.join(report.fresh)} of a {model_name} with "
            f"{model.spec.num_classes} classes ({'; '.join(report.fresh.values())}); they "
            "would stay random. Give the checkpoint's own num_classes (to fine-tune, build the "
            "model and call keras_vit.load_weights)."
        )
    return model
