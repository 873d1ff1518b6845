"""Downloading weight files into the cache: verified, atomic, offline-capable, shared by processes.

Every test serves its files from ``http_server.FileServer`` on 127.0.0.1; most fetch a
publisher's URL through ``KERAS_VIT_MIRROR``, the way an air-gapped site would.
"""

import hashlib
import io
import os
import random
import subprocess
import sys
import time

import pytest
from helpers import leftovers
from http_server import FileServer, download_env, unused_url

from keras_vit.presets import download as dl
from keras_vit.presets import integrity

pytestmark = pytest.mark.backend_free  # Python alone: runs once (tests/backend_free.py)

URL = "https://storage.googleapis.com/vit_models/augreg/tiny.npz"
SERVED = "vit_models/augreg/tiny.npz"  # the publisher's path, where the mirror serves it
DATA = random.Random(0).randbytes(200_000)
SHA256 = hashlib.sha256(DATA).hexdigest()
CACHED = os.path.join("storage.googleapis.com", *SERVED.split("/"))  # under home()
STAMP = os.path.join(os.path.dirname(CACHED), ".tiny.npz.stamp")  # the hash stamp beside it
HOUR_AGO = time.time_ns() - 3600 * 10**9

# Loads the download modules from their folder as a package of their own (not as
# keras_vit.presets, whose __init__ imports Keras), as a tool without Keras would, and
# downloads argv[2].
CHILD = """
import importlib, os, sys, types
# The download modules and keras_vit.atomic, without the package's own imports (Keras).
for name, folder in (("keras_vit", os.path.dirname(sys.argv[1])), ("keras_vit.presets", sys.argv[1])):
    package = types.ModuleType(name)
    package.__path__ = [folder]
    sys.modules[name] = package
download = importlib.import_module("keras_vit.presets.download")
assert "keras" not in sys.modules
print(download.download(sys.argv[2]))
"""


@pytest.fixture
def file_server(tmp_path):
    with FileServer(tmp_path / "served") as server:
        yield server


@pytest.fixture
def server(file_server, monkeypatch, tmp_path):
    """The file server holding ``DATA`` at the publisher's path, set as the mirror."""
    file_server.put(SERVED, DATA)
    download_env(monkeypatch, tmp_path / "cache", mirror=file_server.url)
    return file_server


def read(path):
    with open(path, "rb") as f:
        return f.read()


def spawn(url):
    folder = os.path.dirname(dl.__file__)
    return subprocess.Popen(
        [sys.executable, "-c", CHILD, folder, url], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def set_mtime(path, ns):
    os.utime(path, ns=(ns, ns))


def count_hashing(monkeypatch):
    """The paths whose every byte is read to hash them, from now on."""
    hashed = []
    read_whole = integrity.file_sha256

    def counted(path):
        hashed.append(path)
        return read_whole(path)

    monkeypatch.setattr(integrity, "file_sha256", counted)
    return hashed


def test_first_download_stores_the_served_bytes_and_records_their_hash(server):
    path = dl.download(URL, progress=False)
    assert path == dl.cache_path(URL)
    assert read(path) == DATA
    assert read(path + ".sha256").decode().split() == [SHA256, "tiny.npz"]
    assert server.requests == ["/" + SERVED]
    assert leftovers(os.path.dirname(path)) == [".tiny.npz.stamp", "tiny.npz", "tiny.npz.sha256"]


def test_a_cache_hit_sends_no_request(server):
    dl.download(URL, sha256=SHA256, size=len(DATA), progress=False)
    server.clear_requests()
    assert read(dl.download(URL, sha256=SHA256, size=len(DATA), progress=False)) == DATA
    assert read(dl.download(URL, progress=False)) == DATA
    assert server.requests == []


def test_offline_a_hit_works_and_a_miss_names_the_file_and_where_to_put_it(server, monkeypatch):
    dl.download(URL, progress=False)
    server.clear_requests()
    monkeypatch.setenv("KERAS_VIT_OFFLINE", "yes")
    assert read(dl.download(URL, progress=False)) == DATA
    missing = "https://storage.googleapis.com/vit_models/augreg/other.npz"
    with pytest.raises(dl.NotCachedError) as error:
        dl.download(missing, progress=False)
    message = str(error.value)
    assert "other.npz" in message and missing in message and dl.cache_path(missing) in message
    assert "KERAS_VIT_OFFLINE" in message
    assert server.requests == []


@pytest.mark.parametrize("wrong", ["sha256", "size"])
def test_a_download_of_the_wrong_file_is_refused_and_leaves_nothing(server, wrong):
    expected = {"sha256": "0" * 64} if wrong == "sha256" else {"size": len(DATA) + 1}
    with pytest.raises(dl.IntegrityError) as error:
        dl.download(URL, progress=False, **expected)
    message = str(error.value)
    assert URL in message and server.url_for(SERVED) in message
    assert str(expected[wrong]) in message  # the expected value, and the actual one:
    assert (SHA256 if wrong == "sha256" else str(len(DATA))) in message
    assert leftovers(dl.home()) == []


def test_a_corrupted_cached_file_is_caught_by_its_recorded_hash_and_fetched_again(server, monkeypatch):
    path = dl.download(URL, progress=False)
    with open(path, "r+b") as f:  # one flipped byte, the same size
        f.seek(1000)
        f.write(bytes([DATA[1000] ^ 1]))
    monkeypatch.setenv("KERAS_VIT_OFFLINE", "1")
    with pytest.raises(dl.IntegrityError, match="recorded in .*tiny.npz.sha256"):
        dl.download(URL, progress=False)  # offline: refused, kept for the user to look at
    monkeypatch.delenv("KERAS_VIT_OFFLINE")
    server.clear_requests()
    assert read(dl.download(URL, progress=False)) == DATA
    assert server.requests == ["/" + SERVED]


def test_a_cache_hit_reads_the_stamp_not_the_file(server, monkeypatch):
    path = dl.download(URL, progress=False)
    set_mtime(path, HOUR_AGO)  # a stamp written in the tick of the file's own time is not trusted
    hashed = count_hashing(monkeypatch)
    assert dl.download(URL, progress=False) == path and hashed == [path]  # its time changed: hashed again
    for _ in range(3):
        assert read(dl.download(URL, sha256=SHA256, size=len(DATA), progress=False)) == DATA
        assert dl.download(URL, progress=False) == path
    assert hashed == [path]
    dl.download(URL, progress=False, rehash=True)  # asked for: read whole
    assert hashed == [path, path] and server.requests == ["/" + SERVED]


def flip_a_byte(path):
    with open(path, "r+b") as f:
        f.seek(1000)
        byte = f.read(1)
        f.seek(1000)
        f.write(bytes([byte[0] ^ 1]))


@pytest.mark.parametrize("change", ["touched", "corrupted", "grown"])
def test_a_file_changed_since_its_stamp_is_hashed_again_and_refused_if_wrong(server, monkeypatch, change):
    path = dl.download(URL, progress=False)
    set_mtime(path, HOUR_AGO)
    dl.download(URL, progress=False)  # hashed and stamped as it is now
    hashed = count_hashing(monkeypatch)
    monkeypatch.setenv("KERAS_VIT_OFFLINE", "1")  # a refused file stays, to be looked at
    if change == "touched":  # the same bytes, another time
        set_mtime(path, HOUR_AGO + 10**9)
        assert dl.download(URL, sha256=SHA256, progress=False) == path and hashed == [path]
        assert dl.download(URL, sha256=SHA256, progress=False) == path and hashed == [path]  # stamped again
        return
    if change == "corrupted":  # a byte changed, and so the time
        flip_a_byte(path)
        set_mtime(path, HOUR_AGO + 10**9)
    else:  # a byte more, the time the stamp holds: the size tells
        with open(path, "ab") as f:
            f.write(b"\0")
        set_mtime(path, HOUR_AGO)
    with pytest.raises(dl.IntegrityError, match=f"expected {SHA256}"):
        dl.download(URL, progress=False)
    assert hashed == [path]
    with pytest.raises(dl.IntegrityError, match=f"expected {SHA256}"):
        dl.download(URL, sha256=SHA256, progress=False)
    monkeypatch.delenv("KERAS_VIT_OFFLINE")
    assert read(dl.download(URL, sha256=SHA256, progress=False)) == DATA  # fetched again
    assert len(server.requests) == 2


def test_a_change_that_keeps_the_size_and_time_is_seen_when_asked_for(server, monkeypatch):
    path = dl.download(URL, progress=False)
    set_mtime(path, HOUR_AGO)
    dl.download(URL, progress=False)
    flip_a_byte(path)  # as a disk's bit rot would: the size and time kept
    set_mtime(path, HOUR_AGO)
    monkeypatch.setenv("KERAS_VIT_OFFLINE", "1")
    assert dl.download(URL, sha256=SHA256, progress=False) == path  # the stamp's limit
    with pytest.raises(dl.IntegrityError, match=f"expected {SHA256}"):
        dl.download(URL, sha256=SHA256, progress=False, rehash=True)
    with pytest.raises(dl.IntegrityError, match=f"expected {SHA256}"):
        dl.download(URL, sha256=SHA256, progress=False)  # and from then on, without asking


def test_a_download_cut_halfway_leaves_no_file_and_the_next_call_succeeds(server):
    server.cut(SERVED)
    with pytest.raises(dl.DownloadError, match=f"closed after {len(DATA) // 2} of {len(DATA)} bytes"):
        dl.download(URL, progress=False, retries=0)
    assert leftovers(dl.home()) == []
    server.normal(SERVED)
    assert read(dl.download(URL, progress=False)) == DATA


@pytest.mark.skipif(os.name != "posix", reason="kills the downloading process with SIGKILL")
@pytest.mark.backend_free(processes="the children download a file: no backend in them")
def test_a_killed_download_leaves_no_file_and_the_next_download_removes_its_remains(server):
    server.slow(SERVED, seconds=30, pieces=300)  # killed long before the end
    target = dl.cache_path(URL)
    child = spawn(URL)
    deadline = time.monotonic() + 10
    while not any(".tmp-" in name for name in leftovers(dl.home())) and time.monotonic() < deadline:
        time.sleep(0.02)
    child.kill()
    child.communicate()
    assert not os.path.exists(target)
    assert [name for name in leftovers(dl.home()) if ".tmp-" in name]  # what SIGKILL left behind
    server.normal(SERVED)
    assert read(dl.download(URL, progress=False)) == DATA
    assert leftovers(os.path.dirname(target)) == [".tiny.npz.stamp", "tiny.npz", "tiny.npz.sha256"]


def test_a_server_that_is_down_names_both_urls_the_cache_path_and_what_to_do(server, monkeypatch):
    mirror = unused_url()
    monkeypatch.setenv("KERAS_VIT_MIRROR", mirror)
    with pytest.raises(dl.DownloadError) as error:
        dl.download(URL, progress=False, retries=1, backoff=0.01)
    message = str(error.value)
    assert "Connection refused" in message and "(tried 2 times, waiting 0.01 s between)" in message
    assert mirror + SERVED in message and URL in message and dl.cache_path(URL) in message
    assert "KERAS_VIT_MIRROR" in message and "KERAS_VIT_OFFLINE=1" in message
    assert error.value.path == dl.cache_path(URL) and error.value.source == mirror + SERVED


@pytest.mark.parametrize("status", [404, 500])
def test_an_http_error_names_the_url_and_the_cache_path(file_server, monkeypatch, tmp_path, status):
    download_env(monkeypatch, tmp_path / "cache")
    url = file_server.url_for("weights/missing.npz")  # the publisher itself, no mirror
    file_server.fail("weights/missing.npz", status)
    with pytest.raises(dl.DownloadError, match=f"HTTP {status}") as error:
        dl.download(url, progress=False, retries=2, backoff=0.01)
    assert url in str(error.value) and dl.cache_path(url) in str(error.value)
    assert leftovers(dl.home()) == []
    # A missing file is missing the next time too; a server error may pass: asked again.
    assert len(file_server.requests) == (1 if status == 404 else 3)


def test_a_busy_server_is_asked_again_with_growing_waits(server, capsys):
    server.fail(SERVED, 503, times=2)
    started = time.monotonic()
    assert read(dl.download(URL, retries=3, backoff=0.2)) == DATA
    assert time.monotonic() - started >= 0.2 + 0.4  # waited 0.2 s, then 0.4 s
    assert len(server.requests) == 3
    assert capsys.readouterr().err.count("trying again in") == 2


def test_a_server_that_stops_sending_times_out_and_is_asked_again(server):
    server.slow(SERVED, seconds=30, pieces=1)
    with pytest.raises(dl.DownloadError, match=r"no data for 0.2 s \(tried 3 times, waiting 0.01, 0.02 s between\)"):
        dl.download(URL, progress=False, timeout=0.2, retries=2, backoff=0.01)
    assert leftovers(dl.home()) == [] and len(server.requests) == 3
    # A server that stalls twice, then answers: the third request gets the file.
    server.slow(SERVED, seconds=30, pieces=1, times=2)
    server.clear_requests()
    assert read(dl.download(URL, progress=False, timeout=0.2, retries=2, backoff=0.01)) == DATA
    assert len(server.requests) == 3


@pytest.mark.backend_free(processes="the children download a file: no backend in them")
def test_two_processes_downloading_one_file_get_one_intact_file(server):
    server.slow(SERVED, seconds=1, pieces=10)
    children = [spawn(URL), spawn(URL)]
    results = [child.communicate(timeout=60) for child in children]
    assert [child.returncode for child in children] == [0, 0], [err for _, err in results]
    assert [out.strip() for out, _ in results] == [dl.cache_path(URL)] * 2
    assert read(dl.cache_path(URL)) == DATA
    assert leftovers(dl.home()) == [STAMP, CACHED, CACHED + ".sha256"]
    # With a lock the second process waits, then finds the file: one request (without, maybe two).
    assert len(server.requests) in ({1} if dl.fcntl is not None else {1, 2})


def test_the_mirror_is_asked_at_the_publishers_path(monkeypatch):
    monkeypatch.setenv("KERAS_VIT_MIRROR", "http://10.0.0.1:8000")
    assert dl.source_url(URL) == "http://10.0.0.1:8000/vit_models/augreg/tiny.npz"
    hf = "https://huggingface.co/timm/vit_base_patch16_224.augreg2_in21k_ft_in1k/resolve/main/model.safetensors"
    monkeypatch.setenv("KERAS_VIT_MIRROR", "http://10.0.0.1:8000/weights/")
    assert dl.source_url(hf) == (
        "http://10.0.0.1:8000/weights/timm/vit_base_patch16_224.augreg2_in21k_ft_in1k/resolve/main/model.safetensors"
    )
    monkeypatch.setenv("KERAS_VIT_MIRROR", "mirror.internal")
    with pytest.raises(ValueError, match="KERAS_VIT_MIRROR"):
        dl.source_url(URL)


def test_a_mirror_with_a_path_prefix_serves_the_file(file_server, monkeypatch, tmp_path):
    file_server.put("weights/" + SERVED, DATA)
    download_env(monkeypatch, tmp_path / "cache", mirror=file_server.url + "weights")
    assert read(dl.download(URL, sha256=SHA256, progress=False)) == DATA
    assert file_server.requests == ["/weights/" + SERVED]


def test_the_cache_keeps_each_publishers_host_and_path(monkeypatch, tmp_path):
    download_env(monkeypatch, tmp_path)
    gcs = "https://storage.googleapis.com/vit_models/"
    paths = {
        dl.cache_path(gcs + "imagenet21k/ViT-B_16.npz"),
        dl.cache_path(gcs + "imagenet21k+imagenet2012/ViT-B_16.npz"),
        dl.cache_path("https://example.org/vit_models/imagenet21k/ViT-B_16.npz"),
    }
    assert len(paths) == 3 and all(p.startswith(str(tmp_path) + os.sep) for p in paths)
    assert dl.cache_path(gcs + "imagenet21k/ViT-B_16.npz?download=1") == dl.cache_path(gcs + "imagenet21k/ViT-B_16.npz")


@pytest.mark.parametrize(
    "url",
    [
        "https://example.org/a/../../escape.npz",
        "https://example.org/a/%2e%2e/%2E%2E/escape.npz",
        "https://example.org/a/..%5c..%5cescape.npz",
        "https://example.org/weights/",
        "ftp://example.org/weights.npz",
    ],
)
def test_a_url_whose_path_would_leave_the_cache_is_refused(url):
    with pytest.raises(ValueError, match="Expected"):
        dl.cache_path(url)


def test_home_is_keras_vit_home_else_the_users_cache(monkeypatch, tmp_path):
    monkeypatch.setenv("KERAS_VIT_HOME", str(tmp_path / "here"))
    assert dl.home() == str(tmp_path / "here")
    monkeypatch.delenv("KERAS_VIT_HOME")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert dl.home() == str(tmp_path / "xdg" / "keras_vit")
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path))
    assert dl.home() == str(tmp_path / ".cache" / "keras_vit")


def test_progress_is_one_line_redrawn_on_a_terminal(server, monkeypatch):
    class Terminal(io.StringIO):
        def isatty(self):
            return True

    monkeypatch.setattr(sys, "stderr", Terminal())
    dl.download(URL, progress=True)
    shown = sys.stderr.getvalue()
    assert "Downloading " + server.url_for(SERVED) in shown
    assert shown.rstrip("\n").rsplit("\r", 1)[-1].split()[:2] == ["tiny.npz", "100%"]
