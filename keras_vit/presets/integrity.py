"""A file's SHA-256, and the record of it kept beside the file.

``<file>.sha256``: the hash the file must have, in ``sha256sum`` format (so
``sha256sum -c`` checks it too): the publisher's, or the one computed when the file was
first downloaded (``download``).

Only the Python standard library is used (see ``download``). Records are written
atomically; where the folder is read-only they are not written.
"""

import contextlib
import hashlib
import os
import uuid

CHUNK = 1 << 20


def check_sha256(sha256):
    """``sha256`` as 64 lowercase hexadecimal digits (None stays None); ValueError if it is not one.

    >>> check_sha256(" " + "AB" * 32)[:8]
    'abababab'
    """
    if sha256 is None:
        return None
    value = str(sha256).strip().lower()
    if len(value) != 64 or any(c not in "0123456789abcdef" for c in value):
        raise ValueError(f"sha256 must be 64 hexadecimal digits; got {sha256!r}.")
    return value


def file_sha256(path):
    """The SHA-256 of a file, read in chunks, as hex: every byte of it is read."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def recorded_sha256(path):
    """The hash in ``path``'s ``.sha256`` record, None if there is none or it is not a hash."""
    try:
        with open(sidecar(path)) as f:
            return check_sha256(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def record_sha256(path, digest):
    """Writes ``digest`` as the hash ``path`` must have (``<file>.sha256``)."""
    _write(sidecar(path), f"{digest}  {os.path.basename(path)}\n")


def forget(path):
    """Removes ``path``'s record (the file itself stays)."""
    remove(sidecar(path))


def sidecar(path):
    return path + ".sha256"


def hidden(path, tag):
    """``.<name>.<tag>`` beside ``path``: the hidden files that go with it."""
    directory, name = os.path.split(path)
    return os.path.join(directory, f".{name}.{tag}")


def temp_path(path, suffix=None):
    """A hidden temporary name beside ``path``, ``.<name>.tmp-<suffix>`` (a random suffix by
    default; ``""`` gives the prefix of them all). A hidden ``path`` keeps its one dot."""
    directory, name = os.path.split(path)
    suffix = uuid.uuid4().hex[:8] if suffix is None else suffix
    return os.path.join(directory, f".{name.lstrip('.')}.tmp-{suffix}")


def remove(*paths):
    for path in paths:
        with contextlib.suppress(FileNotFoundError):
            os.remove(path)


def _write(path, text):
    """Writes a record atomically; a read-only folder goes without."""
    temp = temp_path(path)
    try:
        with open(temp, "x") as f:
            f.write(text)
        os.replace(temp, path)
    except OSError:
        remove(temp)
