"""A local HTTP file server for download tests, and the environment that points downloads at it.

``FileServer(root)`` serves the files under ``root`` on 127.0.0.1 (a free port) from a
thread, records every request's path, and can be told per path to misbehave::

    with FileServer(tmp_path / "served") as server:
        url = server.put("vit_models/x.npz", data)  # writes root/vit_models/x.npz, returns its URL
        server.fail("vit_models/x.npz", 500)        # answer with an error status
        server.fail("vit_models/x.npz", 503, times=2)  # ... the next two requests only
        server.cut("vit_models/x.npz")              # full Content-Length, half the bytes, then close
        server.slow("vit_models/x.npz", seconds=1)  # the body in pieces spread over a second
        server.normal("vit_models/x.npz")           # serve it properly again
        server.requests                             # ['/vit_models/x.npz', ...], in arrival order

As a pytest fixture (a started server on a fresh folder, stopped after the test)::

    @pytest.fixture
    def file_server(tmp_path):
        with FileServer(tmp_path / "served") as server:
            yield server

``download_env(monkeypatch, home, mirror=..., offline=...)`` sets ``KERAS_VIT_HOME``,
``KERAS_VIT_MIRROR`` and ``KERAS_VIT_OFFLINE`` for one test (unsetting those not given, so
the caller's own settings never leak in) and keeps proxies away from 127.0.0.1.
``unused_url()`` is a base URL where nothing listens (connection refused).

>>> import tempfile, urllib.request
>>> with FileServer(tempfile.mkdtemp()) as server:
...     url = server.put("a/b.bin", b"abc")
...     urllib.request.urlopen(url).read(), server.requests
(b'abc', ['/a/b.bin'])
"""

import http.server
import os
import socket
import threading
import urllib.parse


class FileServer:
    """Serves ``root`` over HTTP on 127.0.0.1 (see the module docstring). ``url`` is the
    base URL, ending in ``/``; ``start()``/``stop()`` or a ``with`` block run it."""

    def __init__(self, root):
        self.root = os.path.abspath(root)
        os.makedirs(self.root, exist_ok=True)
        self._rules = {}
        self._requests = []
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._httpd = None
        self.url = None

    def start(self):
        self._httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        self._httpd.daemon_threads = True
        self._httpd.owner = self
        self.url = f"http://127.0.0.1:{self._httpd.server_address[1]}/"
        threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        return self

    def stop(self):
        self._stopping.set()  # slow answers stop waiting
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    def url_for(self, path):
        return self.url + path.lstrip("/")

    def put(self, path, data):
        """Writes ``data`` (bytes) at ``path`` under the root; returns its URL."""
        file = self._file(path)
        os.makedirs(os.path.dirname(file), exist_ok=True)
        with open(file, "wb") as f:
            f.write(data)
        return self.url_for(path)

    def fail(self, path, status=404, times=None):
        """Answers requests for ``path`` with ``status`` and no file (the next ``times``
        requests only, then serves it properly; all of them when None)."""
        self._rules[self._key(path)] = ("fail", status, times)

    def cut(self, path, after=None, times=None):
        """Sends the full Content-Length for ``path``, then only ``after`` bytes (default:
        half), then closes the connection."""
        self._rules[self._key(path)] = ("cut", after, times)

    def slow(self, path, seconds=1.0, pieces=10, times=None):
        """Sends ``path``'s body in ``pieces`` parts, waiting ``seconds / pieces`` before each."""
        self._rules[self._key(path)] = ("slow", (seconds, pieces), times)

    def normal(self, path):
        """Serves ``path`` properly again."""
        self._rules.pop(self._key(path), None)

    @property
    def requests(self):
        """The paths requested so far, in arrival order (a copy)."""
        with self._lock:
            return list(self._requests)

    def clear_requests(self):
        with self._lock:
            self._requests.clear()

    @staticmethod
    def _key(path):
        return "/" + path.lstrip("/")

    def _file(self, path):
        file = os.path.abspath(os.path.join(self.root, path.lstrip("/")))
        if os.path.commonpath([file, self.root]) != self.root:
            raise ValueError(f"{path!r} is outside the served folder {self.root}.")
        return file

    def _record(self, path):
        """Records a request; returns the rule that answers it, counting it against ``times``."""
        with self._lock:
            self._requests.append(path)
            kind, arg, times = self._rules.get(path, (None, None, None))
            if times is not None:
                if times <= 1:
                    self._rules.pop(path, None)
                else:
                    self._rules[path] = (kind, arg, times - 1)
            return kind, arg


class _Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        owner = self.server.owner
        path = urllib.parse.unquote(urllib.parse.urlsplit(self.path).path)
        kind, arg = owner._record(path)
        try:
            file = owner._file(path)
        except ValueError:
            file = None
        if kind == "fail" or file is None or not os.path.isfile(file):
            self.send_error(arg if kind == "fail" else 404)
            return
        with open(file, "rb") as f:
            data = f.read()
        self.send_response(200)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        try:
            if kind == "cut":
                self.wfile.write(data[: len(data) // 2 if arg is None else arg])
            elif kind == "slow":
                seconds, pieces = arg
                step = -(-len(data) // pieces) or 1
                for start in range(0, max(len(data), 1), step):
                    if owner._stopping.wait(seconds / pieces):
                        return
                    self.wfile.write(data[start : start + step])
                    self.wfile.flush()
            else:
                self.wfile.write(data)
        except ConnectionError:  # the client gave up (a timeout test): nothing to tell
            pass
        self.close_connection = True

    def log_message(self, format, *args):  # quiet: the requests are in owner.requests
        pass


def download_env(monkeypatch, home, *, mirror=None, offline=False):
    """Sets the download variables for one test: ``KERAS_VIT_HOME=home``, ``KERAS_VIT_MIRROR``
    (unset if None) and ``KERAS_VIT_OFFLINE`` (``1`` or unset). Subprocesses inherit them.
    Returns ``home`` as a string."""
    monkeypatch.setenv("KERAS_VIT_HOME", os.fspath(home))
    for name, value in (("KERAS_VIT_MIRROR", mirror), ("KERAS_VIT_OFFLINE", "1" if offline else None)):
        if value is None:
            monkeypatch.delenv(name, raising=False)
        else:
            monkeypatch.setenv(name, value)
    for name in ("no_proxy", "NO_PROXY"):  # a proxy set for the real network must not take 127.0.0.1
        monkeypatch.setenv(name, "127.0.0.1,localhost")
    return os.fspath(home)


def unused_url():
    """A base URL on 127.0.0.1 where nothing listens: requests are refused."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}/"
