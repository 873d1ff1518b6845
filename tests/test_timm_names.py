"""timm's names as timm's users type them (``keras_vit/presets/timm_names.py``): a tagged
name loads what its ``hf-hub:timm/`` form loads, an untagged one with ``pretrained=True``
timm's default tag, ``pretrained=False`` the architecture alone with nothing fetched, and
``num_classes=0`` the pooled features, each at timm's outputs. A loopback hub serves timm's
``save_for_hf`` files under a real tag (``helpers.serve_timm_model``)."""

import socket

import pytest
from helpers import assert_close_to_scale, logits, serve_timm_model, small_timm_args, timm_input, torch_logits

import keras_vit
from keras_vit.presets import timm_names

ARCHITECTURE = "vit_small_patch16_224"
RTOL = 2e-5


@pytest.fixture
def served(timm, mirror):
    """timm's default tag of ``ARCHITECTURE`` (timm's answer), small, on the loopback hub:
    (its name, timm's model)."""
    tag = timm.models.get_pretrained_cfg(ARCHITECTURE).tag
    _, peer = serve_timm_model(timm, mirror, ARCHITECTURE, tag)
    return f"{ARCHITECTURE}.{tag}", peer


def test_a_tagged_name_and_an_untagged_one_with_pretrained_load_timms_weights(served, mirror):
    name, peer = served
    x = timm_input(peer)
    expected = torch_logits(peer, x)
    for given, pretrained in ((name, None), (name, True), (ARCHITECTURE, True)):
        model = keras_vit.create_model(given, pretrained=pretrained)
        assert model.spec.depth == 2, given  # the served repository's, not the architecture's twelve
        assert_close_to_scale(logits(model, x), expected, RTOL)
    # Fetched once, into the shared cache; every later load found it there.
    assert len([p for p in mirror.requests if p.endswith("/model.safetensors")]) == 1
    assert_close_to_scale(logits(keras_vit.load_model(name), x), expected, RTOL)


def test_a_quickgelu_clip_loads_the_repository_timm_takes_its_weights_from_built_as_its_own(timm, mirror):
    # timm's QuickGELU CLIPs have no repository of their own: their tags' weights are the GELU
    # architecture's, whose config.json names that architecture.
    architecture = "vit_base_patch16_clip_quickgelu_224"
    _, gelu = serve_timm_model(timm, mirror, "vit_base_patch16_clip_224", "openai", num_classes=512)
    peer = timm.create_model(architecture, pretrained=False, **small_timm_args(architecture, num_classes=512)).eval()
    peer.load_state_dict(gelu.state_dict())
    model = keras_vit.create_model(f"{architecture}.openai")
    assert model.spec.mlp_activation == "quick_gelu"
    x = timm_input(peer)
    assert_close_to_scale(logits(model, x), torch_logits(peer, x), RTOL)


def test_zero_classes_are_timms_pooled_features_and_a_count_a_fresh_head(served):
    name, peer = served
    x = timm_input(peer)
    peer.reset_classifier(0)
    features = keras_vit.create_model(name, num_classes=0)
    assert features.output_shape == (None, peer.num_features)
    assert_close_to_scale(logits(features, x), torch_logits(peer, x), RTOL)
    assert keras_vit.create_model(name, num_classes=3).output_shape == (None, 3)


def test_pretrained_false_builds_the_tags_architecture_and_asks_no_network(timm, mirror, monkeypatch):
    def refuse(*args, **kwargs):
        raise OSError("this test refuses the network")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    for name in ("vit_base_patch16_224.augreg_in21k", "vit_small_patch14_dinov2.lvd142m"):
        model = keras_vit.create_model(name, pretrained=False, depth=1)
        cfg = timm.models.get_pretrained_cfg(name)
        assert model.input_shape == (None, *cfg.input_size[1:], 3), name
        assert model.output_shape[-1] == (cfg.num_classes or model.spec.hidden_size), name
    preset = keras_vit.create_model("vit_ti16.augreg_in21k_ft_in1k_384", pretrained=False, depth=1)  # keras-vit's own
    assert preset.input_shape == (None, 384, 384, 3) and preset.output_shape == (None, 1000)
    assert mirror.requests == [] and mirror.heads == []


def test_list_models_names_timms_pretrained_names_it_builds(timm):
    listed = keras_vit.list_models("*dinov2*", pretrained=True)
    assert listed and set(listed) <= set(timm.list_models("*dinov2*", pretrained=True))
    assert "vit_b16.augreg2_in21k_ft_in1k" in keras_vit.list_models("vit_b16.*", pretrained=True)  # its presets stay


@pytest.mark.backend_free
@pytest.mark.parametrize(
    "name, options, says",
    [
        ("vit_b16", dict(pretrained=True), "names an architecture, which has no pre-trained weights"),
        ("vit_huge_patch14_gap_224.in1k_ijepa", {}, "timm publishes no hub file"),
        ("vit_b16", dict(pretrained="yes"), "pretrained must be True, False or None"),
        ("vit_b_16", dict(pretrained=False), "Unknown model name 'vit_b_16'.*Did you mean 'vit_b16'"),
    ],
)
def test_names_without_weights_to_fetch_are_clear_errors(name, options, says):
    with pytest.raises(ValueError, match=says):
        keras_vit.create_model(name, **options)


@pytest.mark.backend_free
def test_names_are_split_by_the_table():
    assert timm_names.split("vit_base_patch16_224.augreg_in21k") == ("vit_base_patch16_224", "augreg_in21k")
    assert timm_names.split("vit_base_patch16_224.no_such_tag") is None
    assert timm_names.split("vit_b16.augreg_in21k") is None  # keras-vit's preset name: not timm's
