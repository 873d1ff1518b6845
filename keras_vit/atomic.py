"""Atomic file writes: every file keras-vit writes (models, presets and their records,
downloads, exports, run folders) goes through here.

A file goes to a hidden temporary path beside its target first and is moved into place
with ``os.replace``, a rename that is atomic within one folder on POSIX file systems: a
reader (a resumed run, TF Serving polling a model folder, a deploy script) sees the old
file or the new one, never a half-written one. Temporary names start with a dot and carry
``.tmp-`` (``.old-`` for a replaced file during the swap), so they are easy to recognise
should a process be killed outright (SIGKILL leaves no chance to clean up): ``is_temp_of``,
and the next writer removes them (``remove_leftovers``). Before any work, ``check_writable``
tries whether an output can be written at all.
"""

import contextlib
import errno
import os
import shutil
import uuid


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


class UnwritableOutputError(ValueError, OSError):
    """An output this process cannot write, found before any work: a folder it cannot make
    (no permission, a read-only file system, a file in the way), a folder where a file is
    wanted. Bad input (a ``ValueError``) and what the machine refused (an ``OSError``)."""


def check_writable(folder, what="output"):
    """Raises ``UnwritableOutputError`` unless files can be written in ``folder``, made with
    its parents if missing; ``what`` names it in the message (a flag: ``"--output"``).

    Tried, not guessed from permissions (root ignores them, a read-only mount or sysfs does
    not): the missing folders are made, a hidden file is written in the last, and all of
    it is removed again, so a command can refuse a bad output before it loads anything.

    >>> import tempfile
    >>> check_writable(os.path.join(tempfile.mkdtemp(), "new", "export"), "--output")
    >>> try:
    ...     check_writable("/dev/null/export", "--output")
    ... except UnwritableOutputError as error:
    ...     print(str(error).split(". ")[0])
    Cannot write /dev/null/export (--output): /dev/null is a file, not a folder
    """
    folder = os.path.abspath(folder)
    try:
        _try_writing_in(folder)
    except OSError as error:
        raise unwritable(folder, error, what) from None


def check_writable_file(path, what="output"):
    """``check_writable`` for a file: its folder can be written in, and ``path`` is no folder."""
    path = os.path.abspath(path)
    if os.path.isdir(path):
        raise UnwritableOutputError(f"Cannot write {path} ({what}): it is a folder. Expected the path of a file; "
                                    f"give {what} a file name.")  # fmt: skip
    try:
        _try_writing_in(os.path.dirname(path))
    except OSError as error:
        raise unwritable(path, error, what) from None


def _try_writing_in(folder):
    missing, made = [], []
    directory = folder
    while not os.path.isdir(directory) and os.path.dirname(directory) != directory:
        missing.append(directory)
        directory = os.path.dirname(directory)
    try:
        for path in reversed(missing):
            os.mkdir(path)
            made.append(path)
        probe = temp_path_beside(os.path.join(folder, "probe"))
        with open(probe, "x"):
            pass
        os.remove(probe)
    finally:
        for path in reversed(made):
            try:
                os.rmdir(path)  # only if empty: never removes anything else
            except OSError:
                pass


def unwritable(path, error, what="output"):
    """The ``UnwritableOutputError`` of writing ``path`` having failed with ``error`` (an
    ``OSError``): the path, the reason (the file in the way, else the system's words and the
    path it refused) and what to do."""
    reason = f"{error.strerror or error} ({error.filename or path})"
    if error.errno in (errno.EEXIST, errno.ENOTDIR):
        directory = path
        while os.path.dirname(directory) != directory and not os.path.lexists(directory):
            directory = os.path.dirname(directory)
        if os.path.lexists(directory) and not os.path.isdir(directory):
            reason = f"{directory} is a file, not a folder"
    return UnwritableOutputError(
        f"Cannot write {path} ({what}): {reason}. Expected a path where this process can write (making the "
        f"folders it needs); give {what} another path."
    )


def remove_leftovers(targets):
    """Removes what a killed process left beside ``targets`` while writing them, and returns
    the paths removed: their staged paths (``temp_path_beside``), and a set-aside copy
    (``.old-``) of a target that is there. A set-aside copy of a missing target (killed
    while swapping a folder) is moved back instead. Only these names: never a user's file.

    >>> import tempfile
    >>> out = tempfile.mkdtemp()
    >>> for name in (".model.tmp-1a2b3c4d.onnx", ".model.tmp-notmine.onnx", "model.onnx"):
    ...     open(os.path.join(out, name), "w").close()
    >>> [os.path.basename(p) for p in remove_leftovers([os.path.join(out, "model.onnx")])]
    ['.model.tmp-1a2b3c4d.onnx']
    >>> sorted(os.listdir(out))
    ['.model.tmp-notmine.onnx', 'model.onnx']
    """
    removed = []
    for target in map(os.path.abspath, targets):
        directory = os.path.dirname(target)
        try:
            names = sorted(os.listdir(directory))
        except OSError:
            continue  # no folder yet: nothing left in it
        for name in names:
            path = os.path.join(directory, name)
            if is_temp_of(name, target, "old") and not os.path.lexists(target):
                os.replace(path, target)
            elif is_temp_of(name, target) or is_temp_of(name, target, "old"):
                _remove_path(path)
                removed.append(path)
    return removed


def temp_path_beside(target, tag="tmp"):
    """A fresh hidden path in the target's folder, e.g. ``out/.model.tmp-1a2b3c4d.tflite``.

    The extension is kept, all of it (Keras insists on ``.weights.h5``), so tools that go
    by it can open the file before it is moved.

    >>> name = os.path.basename(temp_path_beside("out/epoch-3.weights.h5"))
    >>> name.startswith(".epoch-3.tmp-"), name.endswith(".weights.h5")
    (True, True)
    """
    directory, name = os.path.split(os.path.abspath(target))
    stem, ext = _split(name.lstrip("."))
    return os.path.join(directory, f".{stem}.{tag}-{uuid.uuid4().hex[:8]}{ext}")


def is_temp_of(name, target, tag="tmp"):
    """Whether the file name ``name`` is one of ``temp_path_beside(target, tag)``'s paths
    (a killed process's leftover, for whoever cleans up after it).

    >>> is_temp_of(os.path.basename(temp_path_beside("cache/vit.npz")), "cache/vit.npz")
    True
    >>> is_temp_of(".vit.tmp-1a2b3c4d.safetensors", "cache/vit.npz")
    False
    """
    stem, ext = _split(os.path.basename(target).lstrip("."))
    prefix = f".{stem}.{tag}-"
    return name.startswith(prefix) and name.endswith(ext) and len(name) == len(prefix) + 8 + len(ext)


def is_leftover(name):
    """Whether the file name ``name`` is a staged or set-aside path of any target (what a
    killed process leaves).

    >>> is_leftover(".model.tmp-1a2b3c4d.keras"), is_leftover(".model.old-1a2b3c4d.keras"), is_leftover("model.keras")
    (True, True, False)
    """
    return name.startswith(".") and any(f".{tag}-" in name for tag in ("tmp", "old"))


def _split(name):
    stem, dot, ext = name.partition(".")
    return stem, dot + ext


def scratch_folder(beside, name):
    """A fresh hidden folder in ``beside``, named as staged paths are (``.<name>.tmp-...``),
    for intermediate files that are never moved into place; the caller removes it."""
    path = temp_path_beside(os.path.join(beside, name))
    os.makedirs(path)
    return path


def write_text(path, text):
    """Writes a small text file atomically (``atomic_path``)."""
    with atomic_path(path) as staged, open(staged, "w", encoding="utf-8") as f:
        f.write(text)


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
