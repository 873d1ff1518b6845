"""Write to a temporary path beside the target, move into place only when complete.

A rename within one folder is atomic on POSIX file systems, so a reader (TF Serving
polling a model folder, a deploy script) sees either the old export or the new one,
never a half-written one. Temporary names start with a dot and carry ``.tmp-`` (``.old-``
for a replaced export during the swap), so they are easy to recognise should a process be
killed outright (SIGKILL leaves no chance to clean up).
"""

import os
import shutil
import uuid

from keras_vit.export.errors import ExportError


def temp_path_beside(target, tag="tmp"):
    """A fresh hidden path in the target's folder, e.g. ``out/.model.tmp-1a2b3c4d.tflite``.

    The extension is kept, so tools that go by it can open the file before it is moved.
    """
    directory, name = os.path.split(os.path.abspath(target))
    stem, ext = os.path.splitext(name)
    return os.path.join(directory, f".{stem}.{tag}-{uuid.uuid4().hex[:8]}{ext}")


def remove_path(path):
    """Removes a file, link or folder tree if it exists."""
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path, ignore_errors=True)
    elif os.path.lexists(path):
        os.remove(path)


def check_targets(targets, overwrite):
    """Raises ``FileExistsError`` naming every existing target unless ``overwrite``."""
    existing = [t for t in targets if os.path.lexists(t)]
    if existing and not overwrite:
        raise FileExistsError(
            "Expected export targets that do not exist yet (or overwrite=True / --overwrite); "
            f"these exist: {', '.join(existing)}."
        )


class StagedOutputs:
    """Several targets written at temporary paths beside them, moved into place together.

    Use as a context manager: write each ``staging.paths[key]``, check the results, then
    call ``commit()``. Leaving the block without ``commit()`` (an exception, a failed check)
    removes every temporary path, and any folder this object created that is still empty.
    ``commit()`` itself is all-or-nothing: if one move fails, the targets it had already
    replaced are restored.

    Example:
    >>> import os, tempfile
    >>> out = tempfile.mkdtemp()
    >>> with StagedOutputs({"a": os.path.join(out, "a.txt")}) as staging:
    ...     with open(staging.paths["a"], "w") as f:
    ...         _ = f.write("done")
    ...     staging.commit()
    >>> sorted(os.listdir(out))
    ['a.txt']
    """

    def __init__(self, targets, overwrite=False):
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
                raise ExportError(f"The {key!r} export was never written to {staged}; nothing was moved.")
        # Checked again: another process may have created a target since __enter__.
        check_targets(self.targets.values(), self.overwrite)
        backups, moved = {}, []
        try:
            for key, target in self.targets.items():
                if os.path.lexists(target):
                    backups[target] = temp_path_beside(target, "old")
                    os.replace(target, backups[target])
                os.replace(self.paths[key], target)
                moved.append(target)
        except BaseException:
            for target in moved:
                remove_path(target)
            for target, backup in backups.items():
                os.replace(backup, target)
            raise
        for backup in backups.values():
            remove_path(backup)
        self.committed = True

    def __exit__(self, exc_type, exc, tb):
        for staged in self.paths.values():
            remove_path(staged)
        if not self.committed:
            for directory in reversed(self._created_dirs):
                try:
                    os.rmdir(directory)  # only if empty: never removes anything else
                except OSError:
                    pass
        return False
