"""Hub files through ``huggingface_hub`` (``keras_vit/presets/hub.py``): the cache shared with
timm and transformers, pinned revisions, tokens for gated repositories, offline use, and one
clear error for each way a name can be wrong; a preset whose file is on the hub the same way.
The loopback server answers as the hub does (``http_server``); timm writes the repositories
with ``save_for_hf``.
"""

import dataclasses
import os
import subprocess
import sys
import time

import numpy as np
import pytest
from helpers import REPOSITORY, assert_close_to_scale, logits, serve_timm_model, timm_input, to_numpy, torch_logits
from http_server import unresolvable, unused_url

import keras_vit
from keras_vit.presets import catalog, download, hub, integrity
from keras_vit.sources import resolve

ARCHITECTURE = "vit_small_patch16_224"
WEIGHTS = "model.safetensors"

TIMM_CHILD = """
import sys
sys.path.insert(0, sys.argv[2])
import torchvision_stub
torchvision_stub.install()
import timm
timm.create_model(sys.argv[1], pretrained=True)
"""


def weight_downloads(server, name):
    return [path for path in server.requests if path == f"/{hub.repo_id(name)}/resolve/main/{WEIGHTS}"]


def test_a_checkpoint_timm_fetched_is_not_fetched_again(timm, mirror):
    name, peer = serve_timm_model(timm, mirror, ARCHITECTURE)
    child = subprocess.run([sys.executable, "-c", TIMM_CHILD, name, str(REPOSITORY / "tests")],
                           capture_output=True, text=True, timeout=600)  # fmt: skip
    assert child.returncode == 0, child.stderr[-3000:]
    assert len(weight_downloads(mirror, name)) == 1  # timm's, into the shared cache
    model = keras_vit.create_model(name)
    assert len(weight_downloads(mirror, name)) == 1  # keras-vit read timm's copy
    x = timm_input(peer)
    assert_close_to_scale(logits(model, x), torch_logits(peer, x), 2e-5)


def test_a_revision_pins_what_is_fetched(timm, mirror):
    name, _ = serve_timm_model(timm, mirror, ARCHITECTURE)
    repo = hub.repo_id(name)
    # Another revision of the same repository, with another depth.
    other = os.path.join(mirror.root, repo, "resolve", "v1")
    timm.models.save_for_hf(serve_timm_model(timm, mirror, ARCHITECTURE, tag="scratch", depth=1)[1], other,
                            safe_serialization=True)  # fmt: skip
    assert keras_vit.create_model(name).spec.depth == 2
    assert keras_vit.create_model(f"{name}@v1").spec.depth == 1
    commit = mirror.commit_of(repo, "v1")
    assert keras_vit.load_model(f"{name}@{commit}").spec.depth == 1
    with pytest.raises(hub.HubError, match=r"@v2: the repository has no revision 'v2'"):
        keras_vit.create_model(f"{name}@v2")


def test_each_wrong_name_is_one_error_naming_what_was_asked(timm, mirror, monkeypatch):
    name, _ = serve_timm_model(timm, mirror, ARCHITECTURE)
    with pytest.raises(hub.HubError, match="hf-hub:timm/no_such_model.x: no such repository on http://127.0.0.1"):
        keras_vit.create_model("hf-hub:timm/no_such_model.x")
    with pytest.raises(ValueError, match=r"'hf-hub:<organisation>/<repository>\[@<revision>\]'; got 'hf-hub:timm'"):
        keras_vit.create_model("hf-hub:timm")
    # A gated repository: refused without a token, read with one.
    mirror.gate(hub.repo_id(name), "hf_secret")
    with pytest.raises(hub.HubError, match="the repository is gated.*HF_TOKEN"):
        keras_vit.create_model(name)
    monkeypatch.setenv("HF_TOKEN", "hf_secret")
    assert keras_vit.create_model(name).spec.depth == 2
    # config.json alone, no weights.
    os.remove(os.path.join(mirror.root, hub.repo_id(name), "resolve", "main", WEIGHTS))
    monkeypatch.setenv("HF_HUB_CACHE", os.path.join(os.environ["HF_HUB_CACHE"], "other"))
    with pytest.raises(hub.HubError, match=f"{WEIGHTS} of {name}: the repository has no such file"):
        keras_vit.create_model(name)


def test_offline_the_cache_serves_and_a_missing_file_says_so(timm, mirror, monkeypatch):
    name, peer = serve_timm_model(timm, mirror, ARCHITECTURE)
    online = keras_vit.create_model(name)
    mirror.clear_requests()
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    offline = keras_vit.create_model(name)
    assert mirror.requests == [] and mirror.heads == []  # not asked at all
    x = timm_input(peer)
    np.testing.assert_array_equal(logits(offline, x), logits(online, x))
    with pytest.raises(hub.HubError, match="is not in the Hugging Face cache .* HF_HUB_OFFLINE or KERAS_VIT_OFFLINE"):
        keras_vit.create_model("hf-hub:timm/vit_small_patch16_224.never_fetched")


# --- a preset whose file is on the hub: through the same shared cache ------------------------

HUB_PRESET = "vit_b16.augreg2_in21k_ft_in1k"
HUB_PRESET_REPO = "timm/vit_base_patch16_224.augreg2_in21k_ft_in1k"  # where its file is, timm's name
NEVER_FETCHED = "hf-hub:timm/vit_small_patch16_224.never_fetched"
OPTIONS = ("HF_HUB_OFFLINE", "HF_ENDPOINT", "KERAS_VIT_OFFLINE")  # what an error without the file names


@pytest.fixture
def hub_preset(timm, mirror, monkeypatch):
    """The hub preset made narrow, its record and its file alike, the file served by the
    loopback hub at the repository's path: (the preset, the timm model, the file's path there)."""
    preset = catalog.PRESETS[HUB_PRESET]
    assert preset.url == f"https://huggingface.co/{HUB_PRESET_REPO}/resolve/main/{WEIGHTS}"
    architecture, tag = HUB_PRESET_REPO.split("/")[1].split(".", 1)
    _, peer = serve_timm_model(timm, mirror, architecture, tag, img_size=224, embed_dim=32, depth=1, num_heads=2,
                               mlp_ratio=2.0)  # fmt: skip
    narrow = dataclasses.replace(preset, options=dict(hidden_size=32, num_heads=2, mlp_dim=64, depth=1))
    monkeypatch.setitem(catalog.PRESETS, HUB_PRESET, narrow)
    return narrow, peer, f"/{HUB_PRESET_REPO}/resolve/main/{WEIGHTS}"


def assert_matches_timm(model, peer):
    x = timm_input(peer)
    assert_close_to_scale(logits(model, x), torch_logits(peer, x), 1e-4)


def test_a_hub_preset_downloads_once_into_the_shared_cache(hub_preset, mirror, tmp_path):
    preset, peer, served = hub_preset
    first = keras_vit.create_model(preset.name)
    heads = len(mirror.heads)
    second = keras_vit.create_model(preset.name)
    assert mirror.requests.count(served) == 1 and len(mirror.heads) == heads  # the second: nothing asked
    # In huggingface_hub's layout, where timm and transformers look; not in keras-vit's own cache.
    repository = tmp_path / "hf-cache" / f"models--{HUB_PRESET_REPO.replace('/', '--')}"
    (path,) = repository.glob("snapshots/*/model.safetensors")
    assert not os.path.exists(download.cache_path(preset.url))
    # A URL of the hub's file, given as a model's weights, is the same file.
    assert resolve("vit_b16", weights=preset.url).weights.path == str(path)
    assert mirror.requests.count(served) == 1
    np.testing.assert_array_equal(logits(first, timm_input(peer)), logits(second, timm_input(peer)))
    assert_matches_timm(second, peer)


def test_a_hub_preset_timm_fetched_is_not_fetched_again(hub_preset, mirror):
    preset, peer, served = hub_preset
    child = subprocess.run([sys.executable, "-c", TIMM_CHILD, f"hf-hub:{HUB_PRESET_REPO}", str(REPOSITORY / "tests")],
                           capture_output=True, text=True, timeout=600)  # fmt: skip
    assert child.returncode == 0, child.stderr[-3000:]
    assert mirror.requests.count(served) == 1  # timm's download, into the shared cache
    mirror.clear_requests()
    model = keras_vit.create_model(preset.name)
    assert mirror.requests == [] and mirror.heads == []  # found in the cache: the hub is not even asked
    assert_matches_timm(model, peer)


def test_a_hub_preset_is_checked_against_the_hash_its_record_gives(hub_preset, mirror, monkeypatch):
    preset, _, served = hub_preset
    file = mirror.served_file(served)
    exact = dataclasses.replace(preset, sha256=integrity.file_sha256(file), size=os.path.getsize(file))
    monkeypatch.setitem(catalog.PRESETS, HUB_PRESET, exact)
    keras_vit.create_model(HUB_PRESET)
    monkeypatch.setitem(catalog.PRESETS, HUB_PRESET, dataclasses.replace(preset, sha256="0" * 64))
    with pytest.raises(download.IntegrityError, match=f"Hugging Face cache's .* expected {'0' * 64}"):
        keras_vit.create_model(HUB_PRESET)
    monkeypatch.setitem(catalog.PRESETS, HUB_PRESET, dataclasses.replace(preset, size=exact.size + 1))
    with pytest.raises(download.IntegrityError, match=f"it has {exact.size} bytes, expected {exact.size + 1}"):
        keras_vit.create_model(HUB_PRESET)
    assert mirror.requests.count(served) == 1


def test_with_keras_vit_mirror_alone_a_hub_preset_comes_from_that_plain_server(hub_preset, mirror, monkeypatch):
    # A plain web server or folder keeping the hub's paths answers no hub HEAD: keras-vit's own cache.
    preset, peer, served = hub_preset
    monkeypatch.delenv("HF_ENDPOINT")
    unresolvable(monkeypatch, "huggingface.co")  # the hub itself, were it asked: never from a test
    model = keras_vit.create_model(preset.name)
    assert mirror.requests == [served] and mirror.heads == []
    assert os.path.isfile(download.cache_path(preset.url))
    assert_matches_timm(model, peer)


def test_a_hub_preset_fetched_through_keras_vit_mirror_is_found_offline_with_the_mirror_unset(
    hub_preset, mirror, monkeypatch
):
    # Where the file went is no concern of the user's: the setting at download time decides nothing later.
    preset, peer, served = hub_preset
    monkeypatch.delenv("HF_ENDPOINT")
    fetched = keras_vit.create_model(preset.name)
    monkeypatch.delenv("KERAS_VIT_MIRROR")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    mirror.clear_requests()
    offline = keras_vit.create_model(preset.name)
    assert mirror.requests == [] and mirror.heads == []
    assert offline.spec == fetched.spec
    for ours, theirs in zip(offline.weights, fetched.weights):
        np.testing.assert_array_equal(to_numpy(ours), to_numpy(theirs))
    assert_matches_timm(offline, peer)


@pytest.mark.parametrize("variable", ["HF_HUB_OFFLINE", "KERAS_VIT_OFFLINE"])
def test_offline_a_file_not_cached_is_one_error_naming_the_options(hub_preset, mirror, monkeypatch, variable):
    monkeypatch.setenv(variable, "1")
    for name in (HUB_PRESET, NEVER_FETCHED):
        with pytest.raises(hub.HubError, match="not in the Hugging Face cache .*forbids the network") as error:
            keras_vit.create_model(name)
        assert all(option in str(error.value) for option in OPTIONS), str(error.value)
    assert mirror.requests == [] and mirror.heads == []


def test_a_hub_whose_name_does_not_resolve_fails_at_once_naming_the_options(mirror, monkeypatch):
    lookups, waits = unresolvable(monkeypatch, "hub.invalid"), []
    monkeypatch.setattr(time, "sleep", waits.append)
    monkeypatch.setenv("HF_ENDPOINT", "http://hub.invalid")
    for name in (NEVER_FETCHED, HUB_PRESET):
        lookups.clear()
        with pytest.raises(hub.HubError, match="could not be reached: the host name does not resolve") as error:
            keras_vit.create_model(name)
        assert len(lookups) == 1 and waits == []  # asked once, not again: no network does not pass in seconds
        message = str(error.value)
        assert all(option in message for option in OPTIONS), message
        assert ("KERAS_VIT_MIRROR" in message) == (name == HUB_PRESET)  # a preset's file: a plain mirror too


def test_a_hub_that_refuses_connections_is_asked_again_as_every_download_is(mirror, monkeypatch):
    waits = []
    monkeypatch.setattr(time, "sleep", waits.append)
    monkeypatch.setenv("HF_ENDPOINT", unused_url().rstrip("/"))
    with pytest.raises(hub.HubError, match=r"Connection refused \(tried 4 times, waiting 1, 2, 4 s between\)") as error:
        keras_vit.create_model(NEVER_FETCHED)
    assert waits == [1, 2, 4]  # download(..., retries=3, backoff=1.0)'s, as reliability.md says
    assert all(option in str(error.value) for option in OPTIONS), str(error.value)
