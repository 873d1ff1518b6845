"""Downloading pretrained weight files into a local cache: verified, atomic, shared by processes.

Only the Python standard library is used, here, in the two modules this one uses
(``fetch``: HTTP with retries; ``integrity``: hashes and their records) and in
``keras_vit.atomic`` (the temporary names, and moving a finished file into place): a tool
without Keras can load the four files on their own (as ``tests/test_download.py`` does).

Where a file goes: ``home()/<publisher's host>/<publisher's path>``, so two publishers' files
of one name never collide. Beside it: ``<file>.sha256`` (its hash in ``sha256sum`` format:
the caller's, or the one computed at the first download, checked at every later use), a
hidden ``.<file>.stamp`` (the size and modification time the file had when it was last
hashed: a later use checks those instead of every byte; see ``integrity``), a hidden lock
file ``.<file>.lock``, and, during a download, a hidden temporary file (``keras_vit.atomic``) that is
moved into place only once complete and checked. A file at its cache path is thus always
whole; temporary files left by a killed process are removed by the next download of the
same file.

Environment:
    ``KERAS_VIT_HOME``: the cache root (default: the user's cache folder, see ``home()``).
    ``KERAS_VIT_OFFLINE=1`` (or ``true``, ``yes``): never use the network; a file missing
    from the cache is an error that says where to put it.
    ``KERAS_VIT_MIRROR``: a base URL (``http://host:port/``, with or without a path prefix)
    or a folder to fetch every file from, at its publisher's path (see ``source_url()``).

On an air-gapped site, either copy the files to a web server or a shared folder under
their publishers' paths (``vit_models/augreg/<file>.npz``,
``timm/<name>/resolve/main/model.safetensors``) and set ``KERAS_VIT_MIRROR`` to it; or fill
a cache on a connected machine, copy the folder over and set ``KERAS_VIT_HOME`` to it and
``KERAS_VIT_OFFLINE=1`` (a cache on a read-only mount works for reading).

Files on the Hugging Face hub come through ``huggingface_hub``'s cache instead
(``hub.fetch_url``), except from such a mirror while ``HF_ENDPOINT`` is unset.
"""

import contextlib
import os
import pathlib
import sys
import time
import urllib.parse

# Relative, so that these modules also load as a package of their own (see above).
from keras_vit import atomic

from . import fetch, integrity

try:
    import fcntl
except ImportError:  # Windows
    fcntl = None
try:
    import msvcrt
except ImportError:  # POSIX
    msvcrt = None

_TRUE = ("1", "true", "yes", "on")
MISSING = "it is not in the cache"


class DownloadError(OSError):
    """A file could not be had: the network, the server, or the cache failed. The message
    names the URL fetched, the cache path and what to do; so do the attributes."""

    def __init__(self, message, url=None, source=None, path=None):
        super().__init__(message)
        self.url, self.source, self.path = url, source, path


class IntegrityError(DownloadError):
    """A downloaded or cached file's size or SHA-256 is not the one expected."""


class NotCachedError(DownloadError):
    """``KERAS_VIT_OFFLINE`` is set and the file is not in the cache."""


def home():
    """The cache root: ``$KERAS_VIT_HOME``, else ``keras_vit`` in the user's cache folder
    (``$XDG_CACHE_HOME`` or ``~/.cache``; ``%LOCALAPPDATA%`` on Windows).

    >>> from unittest import mock
    >>> with mock.patch.dict(os.environ, {"KERAS_VIT_HOME": "/data/keras_vit"}):
    ...     home()
    '/data/keras_vit'
    """
    if os.environ.get("KERAS_VIT_HOME"):
        return os.path.abspath(os.path.expanduser(os.environ["KERAS_VIT_HOME"]))
    if os.name == "nt":
        base = os.environ.get("LOCALAPPDATA") or os.path.expanduser(os.path.join("~", "AppData", "Local"))
    else:
        base = os.environ.get("XDG_CACHE_HOME") or ""
        if not os.path.isabs(base):  # the XDG spec: a relative path is invalid and ignored
            base = os.path.expanduser(os.path.join("~", ".cache"))
    return os.path.join(base, "keras_vit")


def cache_path(url):
    """Where ``url``'s file lives in the cache: ``home()/<host>/<path>`` (query left out).

    >>> from pathlib import Path
    >>> path = cache_path("https://storage.googleapis.com/vit_models/imagenet21k/ViT-B_16.npz")
    >>> Path(path).relative_to(home()).as_posix()
    'storage.googleapis.com/vit_models/imagenet21k/ViT-B_16.npz'
    >>> cache_path("https://example.com/weights/../../escape.npz")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: Expected a URL of a file whose path stays inside the cache ...
    """
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"Expected an http(s) URL of a file; got {url!r}.")
    segments = urllib.parse.unquote(parts.path).split("/")
    if any(s in (".", "..") or "\\" in s or "\0" in s for s in segments):
        raise ValueError(
            f"Expected a URL of a file whose path stays inside the cache (no '.', '..' or backslash parts); got {url}."
        )
    segments = [s for s in segments if s]
    if not segments or parts.path.endswith("/"):
        raise ValueError(f"Expected a URL of a file, not of a folder; got {url}.")
    host = parts.hostname.replace(":", "_") + (f"_{parts.port}" if parts.port else "")  # ':' is no file name on Windows
    return os.path.join(home(), host, *segments)


def source_url(url):
    """The URL actually fetched for ``url``: itself, or with ``KERAS_VIT_MIRROR`` set, the
    mirror's (a URL or a folder) with the publisher's path appended.

    >>> from unittest import mock
    >>> url = "https://huggingface.co/timm/NAME/resolve/main/model.safetensors"
    >>> source_url(url) == url
    True
    >>> with mock.patch.dict(os.environ, {"KERAS_VIT_MIRROR": "http://mirror.internal:8000/weights/"}):
    ...     source_url(url)
    'http://mirror.internal:8000/weights/timm/NAME/resolve/main/model.safetensors'
    """
    mirror = os.environ.get("KERAS_VIT_MIRROR", "").strip()
    if not mirror:
        return url
    if os.path.isabs(mirror):  # a folder: C:\weights or /mnt/weights
        mirror = pathlib.Path(mirror).as_uri()
    if urllib.parse.urlsplit(mirror).scheme not in ("http", "https", "file"):
        raise ValueError(
            f"KERAS_VIT_MIRROR must be an http(s):// or file:// URL or an absolute folder; got {mirror!r}."
        )
    parts = urllib.parse.urlsplit(url)
    return mirror.rstrip("/") + parts.path + (f"?{parts.query}" if parts.query else "")


def is_offline(variable="KERAS_VIT_OFFLINE"):
    """Whether the environment ``variable`` forbids the network (``1``, ``true``, ``yes``, ``on``)."""
    return os.environ.get(variable, "").strip().lower() in _TRUE


def download(
    url, *, sha256=None, size=None, progress=True, timeout=60.0, retries=3, backoff=1.0, rehash=False, offline=None
):
    """Returns the local path of ``url``'s file, downloading it into the cache if needed.

    A cached file is used only if its size is ``size`` (when given) and its SHA-256 is
    ``sha256``, else the one recorded at its first download; a file that fails is removed
    and fetched again (offline, an ``IntegrityError`` says so and leaves it). Its SHA-256 is
    its stamp's while it keeps the size and modification time it was hashed with, so a
    cache hit does not read it; ``rehash=True`` reads it whole regardless. A download is
    streamed into a hidden temporary file, hashed as it is written, checked, and only then
    moved into place; processes downloading one file at once take turns on a lock file,
    and the later ones find the file done. ``progress`` shows a one-line bar on a terminal;
    ``timeout`` is in seconds without data. A failure that may pass (a timeout, a refused
    or cut connection, HTTP 408, 429 or 5xx) is tried again up to ``retries`` times, after
    ``backoff`` seconds, then twice as long each time (1, 2, 4 s by default); the wrong
    file, a missing one (HTTP 404) or a full disk fail at once. ``offline``: True forbids
    the network for this file (None: as ``KERAS_VIT_OFFLINE`` says).

    Raises ``NotCachedError`` (offline and not cached), ``IntegrityError`` (wrong size or
    hash) or ``DownloadError`` (the network or server failed): each names the URL, the cache
    path and what to do. An air-gapped site can serve the files from a folder:

    >>> import tempfile
    >>> from unittest import mock
    >>> mirror = tempfile.mkdtemp()
    >>> os.makedirs(os.path.join(mirror, "vit_models"))
    >>> with open(os.path.join(mirror, "vit_models", "tiny.npz"), "wb") as f:
    ...     _ = f.write(b"weights")
    >>> env = {"KERAS_VIT_HOME": tempfile.mkdtemp(), "KERAS_VIT_MIRROR": mirror}
    >>> with mock.patch.dict(os.environ, env):
    ...     path = download("https://storage.googleapis.com/vit_models/tiny.npz", size=7)
    ...     with open(path, "rb") as f:
    ...         f.read()
    b'weights'
    """
    target = cache_path(url)
    expected = integrity.check_sha256(sha256)
    problem = _problem(target, expected, size, rehash)  # no lock: a read-only cache works
    if problem is None:
        return target
    if offline or is_offline():
        raise _offline_error(url, target, problem)
    os.makedirs(os.path.dirname(target), exist_ok=True)
    with _lock(target, progress) as locked:
        # Again under the lock: another process may have just finished (or removed) it.
        problem = _problem(target, expected, size)
        if problem is None:
            return target
        integrity.remove(target)
        integrity.forget(target)
        _remove_stale_temps(target, older_than=0 if locked else 3600)
        _fetch(url, target, expected, size, progress, timeout, retries, backoff)
    return target


def _problem(target, expected, size, rehash=False):
    """None if the cached ``target`` is good, else what is wrong with it. A file with no
    hash on record (placed by hand, say) has its hash recorded now."""
    if not os.path.exists(target):
        return MISSING
    actual_size = os.path.getsize(target)
    if size is not None and actual_size != size:
        return f"it has {actual_size} bytes, expected {size}"
    recorded = integrity.recorded_sha256(target)
    actual = integrity.sha256(target, rehash=rehash)
    if expected is not None and actual != expected:
        return f"its sha256 is {actual}, expected {expected}"
    if expected is None and recorded is not None and actual != recorded:
        return (
            f"its sha256 is {actual}, expected {recorded} "
            f"(recorded in {integrity.sidecar(target)} at its first download)"
        )
    if recorded != actual:
        integrity.record_sha256(target, actual)
    return None


def _fetch(url, target, expected, size, progress, timeout, retries, backoff):
    """Downloads ``url`` (its mirror's copy, if one is set) to ``target``: into a hidden
    temporary file, then, checked and its hash recorded, moved into place."""
    source = source_url(url)
    temp = atomic.temp_path_beside(target)
    try:
        digest = fetch.fetch(
            source,
            temp,
            size=size,
            sha256=expected,
            progress=progress,
            timeout=timeout,
            retries=retries,
            backoff=backoff,
            shown_as=target,
        )
        integrity.record_sha256(target, digest)  # before the file, so a finished file always has its hash
        os.replace(temp, target)
    except fetch.FetchError as failure:
        error_type = IntegrityError if failure.wrong_file else DownloadError
        raise _failure(url, source, target, str(failure), error_type) from failure.__cause__
    except OSError as error:  # moving it into place; asking again would not help
        raise _failure(url, source, target, f"moving it into place failed: {error}") from error
    finally:
        integrity.remove(temp)
    integrity.stamp(target, digest)


def _offline_error(url, target, problem):
    if problem is MISSING:
        return NotCachedError(
            f"{os.path.basename(target)} is not in the cache and KERAS_VIT_OFFLINE is set, so {url} is not "
            f"downloaded. Place the file at {target} (or unset KERAS_VIT_OFFLINE, or set KERAS_VIT_MIRROR).",
            url=url,
            path=target,
        )
    return IntegrityError(
        f"The cached {target} is not the file of {url}: {problem}. KERAS_VIT_OFFLINE is set, so it is not "
        f"downloaded again: replace it with a good copy (remove {integrity.sidecar(target)} too if you replaced it "
        "on purpose), or unset KERAS_VIT_OFFLINE.",
        url=url,
        path=target,
    )


def _remove_stale_temps(target, older_than):
    """Removes the temporary files of ``target`` (and of its records) that killed processes
    left: all of them under the lock, only old ones where no lock could be had."""
    directory = os.path.dirname(target)
    records = (target, integrity.sidecar(target), integrity.stamp_path(target))
    now = time.time()
    with contextlib.suppress(FileNotFoundError):
        for entry in os.scandir(directory):
            if any(atomic.is_temp_of(entry.name, record) for record in records):
                with contextlib.suppress(OSError):
                    if now - entry.stat().st_mtime >= older_than:
                        os.remove(entry.path)


@contextlib.contextmanager
def _lock(target, progress):
    """Holds an exclusive lock on ``.<file>.lock`` beside ``target``; yields whether it got
    one (not on a read-only cache, nor without fcntl or msvcrt: the atomic replace still
    keeps the file whole, only the work may be done twice)."""
    fd = None
    for flags in (os.O_RDWR | os.O_CREAT, os.O_RDONLY):  # flock needs no write access
        if fd is None and (fcntl or msvcrt):
            with contextlib.suppress(OSError):
                fd = os.open(integrity.hidden(target, "lock"), flags, 0o666)
    if fd is None:
        yield False
        return
    try:
        if not _lock_fd(fd, block=False):
            if progress:
                print(f"Waiting for another process downloading {target}", file=sys.stderr, flush=True)
            while not _lock_fd(fd, block=True):  # flock blocks; msvcrt is polled
                time.sleep(0.1)
        yield True
    finally:
        with contextlib.suppress(OSError):
            _lock_fd(fd, unlock=True)
        os.close(fd)


def _lock_fd(fd, block=False, unlock=False):
    try:
        if fcntl is not None:
            fcntl.flock(fd, fcntl.LOCK_UN if unlock else fcntl.LOCK_EX | (0 if block else fcntl.LOCK_NB))
        else:
            os.lseek(fd, 0, os.SEEK_SET)  # msvcrt locks bytes from the current position
            msvcrt.locking(fd, msvcrt.LK_UNLCK if unlock else msvcrt.LK_NBLCK, 1)
        return True
    except OSError:
        return False


def _failure(url, source, target, reason, error_type=None):
    fetched = source if source == url else f"{source} (the mirror's copy of {url})"
    return (error_type or DownloadError)(
        f"Could not download {fetched}: {reason}. The file belongs at {target}. Check the network "
        "connection, or set KERAS_VIT_MIRROR to a server or folder that holds the file at the publisher's "
        "path, or place the file at that cache path yourself and set KERAS_VIT_OFFLINE=1.",
        url,
        source,
        target,
    )
