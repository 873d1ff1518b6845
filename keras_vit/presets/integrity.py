"""A file's SHA-256, and the two records of it kept beside the file.

- ``<file>.sha256``: the hash the file must have, in ``sha256sum`` format (so
  ``sha256sum -c`` checks it too): the publisher's, or the one computed when the file was
  first downloaded (``download``).
- ``.<file>.stamp`` (hidden): the hash the file had when it was last read whole, with the
  size and modification time it had then. While the file keeps both, ``sha256`` answers
  from the stamp instead of reading gigabytes again at every use; a file written since,
  truncated, or copied without its times, is read and stamped again. A change that keeps
  both (a disk's bit rot) is seen only when asked for: ``rehash=True``.

Only the Python standard library is used (and ``keras_vit.atomic``, which writes the records). Records are written
atomically; where the folder is read-only they are not written, and the file is hashed
at every use instead.
"""

import contextlib
import hashlib
import json
import os

from keras_vit import atomic

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


def sha256(path, *, rehash=False):
    """The SHA-256 of a file: its stamp's while the file has the size and modification time
    it had when stamped, else read now (and stamped). ``rehash`` reads it regardless.

    >>> import tempfile
    >>> path = os.path.join(tempfile.mkdtemp(), "weights.npz")
    >>> _ = open(path, "wb").write(b"weights")
    >>> sha256(path) == file_sha256(path) == sha256(path, rehash=True)
    True
    >>> sorted(os.listdir(os.path.dirname(path)))
    ['.weights.npz.stamp', 'weights.npz']
    """
    facts = os.stat(path)  # before reading: a change while it is read leaves the stamp stale
    if not rehash:
        stamped = _stamped_sha256(path, facts)
        if stamped is not None:
            return stamped
    digest = file_sha256(path)
    stamp(path, digest, facts)
    return digest


def stamp(path, digest, facts=None):
    """Records that the file at ``path``, as ``facts`` (its ``os.stat``, taken before it was
    read; default: now) describe it, has the SHA-256 ``digest``."""
    facts = facts if facts is not None else os.stat(path)
    record = {"sha256": digest, "size": facts.st_size, "mtime_ns": facts.st_mtime_ns}
    _write(stamp_path(path), json.dumps(record) + "\n")


def _stamped_sha256(path, facts):
    """The stamp's hash if the stamp describes the file as ``facts`` do, else None.

    A stamp written within the tick of the file's own modification time is not trusted:
    the file could have changed again in that tick without its time changing (git's
    "racily clean" entries); the next check reads the file and stamps it again.
    """
    try:
        with open(stamp_path(path)) as f:
            written = os.fstat(f.fileno()).st_mtime_ns
            record = json.load(f)
        if written <= facts.st_mtime_ns:
            return None
        if (record["size"], record["mtime_ns"]) != (facts.st_size, facts.st_mtime_ns):
            return None
        return check_sha256(record["sha256"])
    except (OSError, ValueError, TypeError, KeyError):  # none, unreadable, or not a stamp
        return None


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
    """Removes ``path``'s records (the file itself stays)."""
    remove(sidecar(path), stamp_path(path))


def sidecar(path):
    return path + ".sha256"


def stamp_path(path):
    return hidden(path, "stamp")


def hidden(path, tag):
    """``.<name>.<tag>`` beside ``path``: the hidden files that go with it."""
    directory, name = os.path.split(path)
    return os.path.join(directory, f".{name}.{tag}")


def remove(*paths):
    for path in paths:
        with contextlib.suppress(FileNotFoundError):
            os.remove(path)


def _write(path, text):
    """Writes a record atomically; a read-only folder goes without."""
    with contextlib.suppress(OSError):
        atomic.write_text(path, text)
