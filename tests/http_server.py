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
``unused_url()`` is a base URL where nothing listens (connection refused);
``unresolvable(monkeypatch, host)`` makes a host name one that does not resolve (DNS), as
without a network.

Under ``<org>/<name>/resolve/<revision>/`` it answers as the Hugging Face hub does, for
``huggingface_hub`` (``HF_ENDPOINT`` set to ``url``; ``hub_env`` sets it): ``HEAD`` gives a
file's commit (``X-Repo-Commit``, the same for every file of a revision folder), ``ETag``
and size, a revision may be named by that commit too, and a missing repository, revision
or file is a 404 with the hub's ``X-Error-Code``. ``server.gate(repo, token)`` makes a
repository answer 401 ``GatedRepo`` unless the request carries that token. ``requests``
records the ``GET`` requests, ``heads`` the ``HEAD`` ones.

>>> import tempfile, urllib.request
>>> with FileServer(tempfile.mkdtemp()) as server:
...     url = server.put("a/b.bin", b"abc")
...     urllib.request.urlopen(url).read(), server.requests
(b'abc', ['/a/b.bin'])
"""

import hashlib
import http.server
import os
import re
import socket
import threading
import urllib.parse

# <org>/<name>/resolve/<revision>/<file>: a hub repository's file (see the module docstring).
HUB_FILE = re.compile(r"/(?P<repo>[^/]+/[^/]+)/resolve/(?P<revision>[^/]+)/(?P<file>[^/].*)")


class FileServer:
    """Serves ``root`` over HTTP on 127.0.0.1 (see the module docstring). ``url`` is the
    base URL, ending in ``/``; ``start()``/``stop()`` or a ``with`` block run it."""

    def __init__(self, root):
        self.root = os.path.abspath(root)
        os.makedirs(self.root, exist_ok=True)
        self._rules = {}
        self._requests = []
        self._heads = []
        self._gates = {}
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

    def gate(self, repo, token):
        """Answers the hub repository ``repo`` only to requests that carry ``token``."""
        self._gates[repo] = token

    @property
    def requests(self):
        """The paths requested so far (``GET``), in arrival order (a copy)."""
        with self._lock:
            return list(self._requests)

    @property
    def heads(self):
        """The paths asked about so far (``HEAD``), in arrival order (a copy)."""
        with self._lock:
            return list(self._heads)

    @staticmethod
    def commit_of(repo, revision):
        """The commit a revision folder of a hub repository stands for (40 hex digits)."""
        return hashlib.sha1(f"{repo}@{revision}".encode()).hexdigest()

    def hub_answer(self, path, authorization):
        """For a hub file's path: ``(status, headers, file)``, the file None for an error;
        None for any other path."""
        match = HUB_FILE.fullmatch(path)
        if match is None:
            return None
        repo, revision, name = match["repo"], match["revision"], match["file"]
        folder = os.path.join(self.root, repo, "resolve")
        token = self._gates.get(repo)
        if token is not None and authorization != f"Bearer {token}":
            return 401, {"X-Error-Code": "GatedRepo"}, None
        if not os.path.isdir(folder):
            return 404, {"X-Error-Code": "RepoNotFound"}, None
        revisions = {self.commit_of(repo, r): r for r in os.listdir(folder)}
        revision = revisions.get(revision, revision)
        if not os.path.isdir(os.path.join(folder, revision)):
            return 404, {"X-Error-Code": "RevisionNotFound"}, None
        file = os.path.join(folder, revision, name)
        commit = {"X-Repo-Commit": self.commit_of(repo, revision)}
        if not os.path.isfile(file):
            return 404, {**commit, "X-Error-Code": "EntryNotFound"}, None
        with open(file, "rb") as f:
            etag = hashlib.sha256(f.read()).hexdigest()
        return 200, {**commit, "ETag": f'"{etag}"'}, file

    def clear_requests(self):
        with self._lock:
            self._requests.clear()
            self._heads.clear()

    @staticmethod
    def _key(path):
        return "/" + path.lstrip("/")

    def served_file(self, path):
        """The file ``path`` names under the root, None if there is none (or it is outside)."""
        try:
            file = self._file(path)
        except ValueError:
            return None
        return file if os.path.isfile(file) else None

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
    def _answer(self, head):
        """The status line and headers of a request; the file to send, or None when done."""
        owner = self.server.owner
        path = urllib.parse.unquote(urllib.parse.urlsplit(self.path).path)
        if head:
            with owner._lock:
                owner._heads.append(path)
            kind, arg = None, None
        else:
            kind, arg = owner._record(path)
        hub = owner.hub_answer(path, self.headers.get("Authorization"))
        status, headers, file = hub if hub is not None else (200, {}, owner.served_file(path))
        if kind == "fail" or file is None:
            self.send_response(arg if kind == "fail" else (status if hub is not None else 404))
            for name, value in headers.items():
                self.send_header(name, value)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return None
        self.send_response(200)
        for name, value in headers.items():
            self.send_header(name, value)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(os.path.getsize(file)))
        self.end_headers()
        return kind, arg, file

    def do_HEAD(self):
        self._answer(head=True)

    def do_GET(self):
        owner = self.server.owner
        answer = self._answer(head=False)
        if answer is None:
            return
        kind, arg, file = answer
        with open(file, "rb") as f:
            data = f.read()
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


def hub_env(monkeypatch, server, cache):
    """Points ``huggingface_hub`` at ``server`` with a fresh cache (``HF_HUB_CACHE``), online
    and without a token, for one test; subprocesses inherit it."""
    monkeypatch.setenv("HF_ENDPOINT", server.url.rstrip("/"))
    monkeypatch.setenv("HF_HUB_CACHE", os.fspath(cache))
    for name in ("HF_HUB_OFFLINE", "HF_TOKEN", "HF_HOME"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HF_HUB_DISABLE_TELEMETRY", "1")


def unused_url():
    """A base URL on 127.0.0.1 where nothing listens: requests are refused."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}/"


def unresolvable(monkeypatch, host):
    """Makes ``host`` a name that does not resolve, as on a machine without a network, for
    one test: answered in this process, no DNS server is asked. Returns the list each lookup
    of it is appended to (one per connection attempt)."""
    lookups = []
    real = socket.getaddrinfo

    def getaddrinfo(name, *args, **kwargs):
        if name == host:
            lookups.append(name)
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return real(name, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    return lookups
