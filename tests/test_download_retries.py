"""Downloads ask a server again after HTTP 408 (Request Timeout) and 429 (Too Many Requests),
as after 500 and 503 (test_download.py), and not after an error that would only repeat, nor
when the host name does not resolve (no network).

A server that is rate-limiting or timing a request out says so with these statuses, and a
later request may pass; a missing or forbidden file is missing the next time too. Every
test serves its file from ``http_server.FileServer`` on 127.0.0.1, through the mirror.
"""

import random
import time

import pytest
from helpers import leftovers
from http_server import FileServer, download_env, unresolvable

from keras_vit.presets import download as dl

pytestmark = pytest.mark.backend_free  # Python alone: runs once (tests/backend_free.py)

URL = "https://storage.googleapis.com/vit_models/retries/tiny.npz"
SERVED = "vit_models/retries/tiny.npz"  # the publisher's path, where the mirror serves it
DATA = random.Random(1).randbytes(50_000)


@pytest.fixture
def server(tmp_path, monkeypatch):
    """The file server holding ``DATA`` at the publisher's path, set as the mirror."""
    with FileServer(tmp_path / "served") as file_server:
        file_server.put(SERVED, DATA)
        download_env(monkeypatch, tmp_path / "cache", mirror=file_server.url)
        yield file_server


@pytest.mark.parametrize("status", [408, 429])
def test_a_server_that_times_out_or_rate_limits_twice_is_asked_again_and_the_third_request_gets_the_file(
    server, status
):
    server.fail(SERVED, status, times=2)
    path = dl.download(URL, progress=False, retries=3, backoff=0.01)
    with open(path, "rb") as f:
        assert f.read() == DATA
    assert server.requests == ["/" + SERVED] * 3


@pytest.mark.parametrize("status", [408, 429])
def test_a_server_that_keeps_answering_408_or_429_is_asked_retries_plus_one_times_then_named(server, status):
    server.fail(SERVED, status)
    with pytest.raises(dl.DownloadError, match=f"HTTP {status}") as error:
        dl.download(URL, progress=False, retries=2, backoff=0.01)
    assert URL in str(error.value) and dl.cache_path(URL) in str(error.value)
    assert server.requests == ["/" + SERVED] * 3  # the first request and two more
    assert leftovers(dl.home()) == []


@pytest.mark.parametrize("status", [400, 403, 410])
def test_other_client_errors_are_not_asked_again(server, status):
    # The contrast: 408 and 429 are the client errors that may pass; these would repeat.
    server.fail(SERVED, status)
    with pytest.raises(dl.DownloadError, match=f"HTTP {status}"):
        dl.download(URL, progress=False, retries=2, backoff=0.01)
    assert server.requests == ["/" + SERVED]


def test_a_host_name_that_does_not_resolve_is_not_asked_again(server, monkeypatch):
    # No network (or a wrong name): asking again in 1, 2 and 4 s would not help, and the user waits.
    lookups, waits = unresolvable(monkeypatch, "mirror.invalid"), []
    monkeypatch.setattr(time, "sleep", waits.append)
    monkeypatch.setenv("KERAS_VIT_MIRROR", "http://mirror.invalid:8000/")
    with pytest.raises(dl.DownloadError, match="the host name does not resolve") as error:
        dl.download(URL, progress=False)
    assert lookups == ["mirror.invalid"] and waits == [] and server.requests == []
    message = str(error.value)
    assert "tried" not in message and "KERAS_VIT_MIRROR" in message and "KERAS_VIT_OFFLINE=1" in message
    assert leftovers(dl.home()) == []
