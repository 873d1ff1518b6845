"""Hub files through ``huggingface_hub`` (``keras_vit/presets/hub.py``): the cache shared with
timm and transformers, pinned revisions, tokens for gated repositories, offline use, and one
clear error for each way a name can be wrong. The loopback server answers as the hub does
(``http_server``); timm writes the repositories with ``save_for_hf``.
"""

import os
import subprocess
import sys

import numpy as np
import pytest
from helpers import REPOSITORY, assert_close_to_scale, logits, serve_timm_model, timm_input, torch_logits

import keras_vit
from keras_vit.presets import hub

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
