"""Fetching a URL into a file: streamed, hashed as it is written, asked again after a
failure that may pass.

``fetch(source, path, ...)`` writes ``path`` (a temporary file, which the caller moves into
place) and returns its SHA-256; a failure leaves no file and raises ``FetchError``, whose
message says why, for the caller to put in context (``download`` names the cache path and
what to do). Only the Python standard library is used (see ``download``).
"""

import functools
import hashlib
import http.client
import os
import socket
import sys
import time
import urllib.error
import urllib.request

from .integrity import CHUNK, remove  # relative: see download's docstring

# HTTP statuses worth asking again: the server is busy, restarting or rate-limiting.
RETRY_STATUSES = (408, 429, 500, 502, 503, 504)


class FetchError(Exception):
    """The file could not be fetched; ``wrong_file``: it was fetched, but its size or hash is
    not the one expected (rather than the network or the server failing)."""

    def __init__(self, reason, wrong_file=False):
        super().__init__(reason)
        self.wrong_file = wrong_file


class Retryable(Exception):
    """A failure that may pass: a timeout, a refused or cut connection, a busy server."""


def fetch(source, path, *, size=None, sha256=None, progress=True, timeout=60.0, retries=3, backoff=1.0, shown_as=None):
    """Downloads ``source`` (an ``http(s)://`` or ``file://`` URL) to ``path``, which must not
    exist; returns its SHA-256.

    ``size`` and ``sha256``, where given, are checked (the size as soon as the server states
    it). ``progress`` shows a line on stderr (a bar on a terminal) naming ``shown_as``
    (default: ``path``); ``timeout`` is in seconds without data. A failure that may pass (a
    timeout, a refused or cut connection, HTTP 408, 429 or 5xx) is tried again up to
    ``retries`` times, after ``backoff`` seconds, then twice as long each time; a host name
    that does not resolve, the wrong file, a missing one (HTTP 404) or a failing disk raise
    at once.
    """
    shown_as = path if shown_as is None else shown_as
    attempt = functools.partial(_fetch_once, source, path, size, sha256, progress, timeout, shown_as)
    return retrying(attempt, retries=retries, backoff=backoff, progress=progress)


def retrying(attempt, *, retries=3, backoff=1.0, progress=True):
    """``attempt()``'s answer, asked again after a ``Retryable`` failure up to ``retries``
    times, waiting ``backoff`` seconds, then twice as long each time; the last failure is a
    ``FetchError`` saying how often it was tried. (The hub's requests, ``hub``, follow it too.)"""
    waits = []
    while True:
        try:
            return attempt()
        except Retryable as failure:
            if len(waits) == retries:
                tried = f" (tried {len(waits) + 1} times, waiting {', '.join(f'{w:g}' for w in waits)} s between)"
                raise FetchError(f"{failure}{tried if waits else ''}") from failure.__cause__
            waits.append(backoff * 2 ** len(waits))
            if progress:
                print(f"{failure}; trying again in {waits[-1]:g} s", file=sys.stderr, flush=True)
            time.sleep(waits[-1])


def unresolved(error):
    """The host name that did not resolve (DNS) behind ``error``, as a ``FetchError`` to raise
    at once: no network, or a wrong name, neither of which passes in seconds. None if the
    failure was another."""
    while error is not None:
        if isinstance(error, socket.gaierror):
            return FetchError(
                f"the host name does not resolve ({error.strerror or error}): no network, or a wrong name"
            )
        error = error.__cause__ or error.__context__
    return None


def _fetch_once(source, path, size, expected, progress, timeout, shown_as):
    request = urllib.request.Request(source, headers={"User-Agent": "keras-vit"})
    fetched = False
    try:
        if progress:
            print(f"Downloading {source} to {shown_as}", file=sys.stderr, flush=True)
        with urllib.request.urlopen(request, timeout=timeout) as response, open(path, "xb") as out:
            length = response.headers.get("Content-Length")
            length = int(length) if length and length.isdigit() else None
            if size is not None and length is not None and length != size:
                raise FetchError(f"the server sends {length} bytes, expected {size}", wrong_file=True)
            digest, received = hashlib.sha256(), 0
            bar = _Progress(os.path.basename(shown_as), length or size, progress)
            while chunk := response.read(CHUNK):
                out.write(chunk)
                digest.update(chunk)
                received += len(chunk)
                bar(received)
            bar(received, last=True)
            if length is not None and received != length:  # http.client returns b"" at a cut, no error
                raise Retryable(f"the connection closed after {received} of {length} bytes")
            out.flush()
            os.fsync(out.fileno())
        actual = digest.hexdigest()
        if size is not None and received != size:
            raise FetchError(f"got {received} bytes, expected {size}", wrong_file=True)
        if expected is not None and actual != expected:
            raise FetchError(f"its sha256 is {actual}, expected {expected}", wrong_file=True)
        fetched = True
        return actual
    except urllib.error.HTTPError as e:
        e.close()  # it holds the server's answer, and its socket
        if e.code in RETRY_STATUSES:
            raise Retryable(f"HTTP {e.code} {e.reason}") from e
        raise FetchError(f"HTTP {e.code} {e.reason}") from e
    except urllib.error.URLError as e:
        if (failure := unresolved(e.reason)) is not None:
            raise failure from e
        if isinstance(e.reason, TimeoutError):
            raise Retryable(f"no data for {timeout:g} s") from e
        raise Retryable(str(e.reason)) from e
    except TimeoutError as e:
        raise Retryable(f"no data for {timeout:g} s") from e
    except (http.client.HTTPException, ConnectionError) as e:
        raise Retryable(f"{type(e).__name__}: {e}") from e
    except OSError as e:  # writing the file: a full disk, no permission; asking again would not help
        raise FetchError(f"writing {path} failed: {e}") from e
    finally:
        if not fetched:
            remove(path)


class _Progress:
    """``name  42%  114.7/274.0 MB`` on one line of stderr, redrawn with \\r, on a terminal only."""

    def __init__(self, name, total, enabled):
        self.name, self.total, self.shown = name, total, 0.0
        self.enabled = bool(enabled and total and sys.stderr is not None and sys.stderr.isatty())

    def __call__(self, done, last=False):
        if self.enabled and (last or time.monotonic() - self.shown >= 0.1):
            self.shown = time.monotonic()
            percent = min(100, 100 * done // self.total)
            sys.stderr.write(f"\r{self.name}  {percent:3d}%  {done / 1e6:.1f}/{self.total / 1e6:.1f} MB")
            sys.stderr.write("\n" if last else "")
            sys.stderr.flush()
