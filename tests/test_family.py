"""timm's ViT family by name: ``hf-hub:timm/<architecture>.<tag>`` through a loopback hub.

Each architecture is built by timm with random, informative weights (``helpers``) at depth
2 and a 3x3 patch grid (through its ``model_args``, as a hub ``config.json`` records
them), written by timm's own ``save_for_hf`` where a mirror on 127.0.0.1 serves the hub's
paths, and loaded by its hub name. The logits of both on a real photo, pre-processed by
timm's evaluation transform (written with PIL), agree within ``RTOL`` of their scale.
"""

import json
import os

import numpy as np
import pytest
from helpers import assert_close_to_scale, cat_photo, logits, small_timm_model, timm_input, to_numpy, torch_logits

import keras_vit
from keras_vit.checkpoints import timm_config
from keras_vit.checkpoints.timm_architectures import ARCHITECTURES
from keras_vit.presets import hub

RTOL = 2e-5
# timm's transform and the model's own layer, both on the photo: PIL rounds to 8-bit levels
# after each of its two passes, the layer keeps floats (test_preprocessing.py: at most 1.25
# levels, 0.4 on average); in normalised units 0.4 levels are under 0.01.
MEAN_PREPROCESSING_DIFFERENCE = 0.02
SIZE_ARGS = ("embed_dim", "depth", "num_heads", "patch_size", "img_size", "mlp_ratio")


def _signature(args):
    """What an architecture's arguments choose besides its sizes."""
    return tuple(sorted((k, "set" if k == "init_values" else v) for k, v in args.items() if k not in SIZE_ARGS))


def _representatives():
    """One architecture (the narrowest) of each distinct set of options that keras-vit builds."""
    chosen = {}
    for name in sorted(ARCHITECTURES):
        args = ARCHITECTURES[name]
        if timm_config.support(name) is not None:
            continue
        key = _signature(args)
        if key not in chosen or args["embed_dim"] < ARCHITECTURES[chosen[key]]["embed_dim"]:
            chosen[key] = name
    return sorted(chosen.values())


# Registers, LayerScale, no position rows for the prefix tokens: in the fast tier (the other
# representatives are in the slow one, tests/slow_tests.txt).
DINOV2_REGISTERS = "vit_small_patch14_reg4_dinov2"


def serve_timm_model(timm, mirror, architecture, tag="random", **model_args):
    """``helpers.small_timm_model`` of ``architecture``, written by ``save_for_hf`` at the
    hub's paths under the mirror; returns (its hub name, the timm model)."""
    peer = small_timm_model(timm, architecture, **model_args)
    repo = f"timm/{architecture}.{tag}"
    folder = os.path.join(mirror.root, repo, "resolve", "main")
    timm.models.save_for_hf(peer, folder, safe_serialization=True)
    return f"{hub.PREFIX}{repo}", peer


def assert_loads_by_hub_name_at_timms_logits(timm, mirror, architecture):
    name, peer = serve_timm_model(timm, mirror, architecture)
    model = keras_vit.create_model(name)
    # Both files fetched through the mirror, from the hub's paths.
    assert sorted(mirror.requests) == sorted(f"/{hub.repo_id(name)}/resolve/main/{f}" for f in hub.FILES)
    x = timm_input(peer)
    expected = torch_logits(peer, x)
    assert_close_to_scale(logits(model, x), expected, RTOL)  # one jitted call on JAX
    # The model's own pre-processing of the raw photo is timm's transform.
    ours = to_numpy(model.preprocessing(cat_photo()[None]))
    assert ours.shape == x.shape and np.abs(ours - x).mean() < MEAN_PREPROCESSING_DIFFERENCE
    assert model.name == architecture and model.spec.num_prefix_tokens == peer.num_prefix_tokens


def test_dinov2_with_registers_loads_by_hub_name_at_timms_logits(timm, mirror):
    assert_loads_by_hub_name_at_timms_logits(timm, mirror, DINOV2_REGISTERS)


@pytest.mark.parametrize("architecture", [n for n in _representatives() if n != DINOV2_REGISTERS])
def test_each_kind_of_timm_architecture_loads_by_hub_name_at_timms_logits(timm, mirror, architecture):
    assert_loads_by_hub_name_at_timms_logits(timm, mirror, architecture)


def test_a_wrong_gelu_form_moves_the_logits_past_the_bound_and_a_missing_layer_scale_is_refused(timm, mirror):
    # The bound sees the numerics: a model built with the tanh GELU (timm's is erf) fails it.
    name, peer = serve_timm_model(timm, mirror, DINOV2_REGISTERS)
    x = timm_input(peer)
    expected = torch_logits(peer, x)
    with pytest.warns(UserWarning, match="trained with gelu_approximate=False"):
        wrong = keras_vit.create_model(name, gelu_approximate=True)
    with pytest.raises(AssertionError):
        assert_close_to_scale(to_numpy(wrong(x)), expected, RTOL)
    # A model without LayerScale would load the rest and compute another function: refused.
    with pytest.raises(ValueError, match="layer_scale_init=a number"):
        keras_vit.create_model(name, layer_scale_init=None)


def test_a_timm_folder_loads_as_its_hub_name_does(timm, mirror, tmp_path):
    name, peer = serve_timm_model(timm, mirror, "vit_base_patch16_clip_quickgelu_224")
    folder = os.path.join(mirror.root, hub.repo_id(name), "resolve", "main")
    model = keras_vit.create_model(folder)
    assert model.spec.mlp_activation == "quick_gelu" and model.spec.pre_norm and not model.spec.patch_bias
    x = timm_input(peer)
    assert_close_to_scale(to_numpy(model(x)), torch_logits(peer, x), RTOL)
    # Another size and task: the position table resampled, a fresh head.
    with pytest.warns(UserWarning, match="head/(kernel|bias) keeps its fresh initial value"):
        resized = keras_vit.create_model(folder, image_size=64, num_classes=3)
    assert resized.output_shape == (None, 3) and resized.preprocessing.image_size == (64, 64)


def test_every_architecture_builds_or_says_why_not():
    built, refused = [], {}
    for name in ARCHITECTURES:
        reason = timm_config.support(name)
        if reason is None:
            options = timm_config.spec_options(timm_config.architecture_args(name))
            spec = keras_vit.models.spec.ViTSpec(**options)
            assert spec.hidden_size == ARCHITECTURES[name]["embed_dim"] and spec.depth == ARCHITECTURES[name]["depth"]
            built.append(name)
        else:
            assert reason.startswith("keras-vit does not build these timm options yet: "), reason
            refused[name] = reason
    # Every family the issue names that keras-vit builds today is among them.
    for family in ("dinov2", "reg4", "clip", "deit3", "siglip_gap", "gap"):
        assert any(family in n for n in built), family
    assert len(built) + len(refused) == len(ARCHITECTURES)


def test_bad_names_configs_and_files_are_clear_errors_and_load_nothing(timm, mirror, tmp_path):
    with pytest.raises(ValueError, match="not one of timm's .* Did you mean 'vit_small_patch16_224'"):
        timm_config.architecture_args("vit_smal_patch16_224")
    with pytest.raises(ValueError, match="hf-hub:<organisation>/<repository>"):
        keras_vit.create_model("hf-hub:vit_small_patch16_224")
    # A config.json with an option keras-vit does not know.
    name, _ = serve_timm_model(timm, mirror, "vit_small_patch16_224")
    # A misspelt option fails on the config, before the weights are downloaded.
    with pytest.raises(ValueError, match="unknown option.*pooling_mode"):
        keras_vit.create_model(name, pooling_mode="gap")
    assert mirror.requests == [f"/{hub.repo_id(name)}/resolve/main/config.json"]
    folder = os.path.join(mirror.root, hub.repo_id(name), "resolve", "main")
    with open(os.path.join(folder, "config.json")) as f:
        config = json.load(f)
    strange = tmp_path / "strange"
    strange.mkdir()
    os.link(os.path.join(folder, "model.safetensors"), strange / "model.safetensors")
    (strange / "config.json").write_text(json.dumps({**config, "model_args": {"warp_factor": 9}}))
    with pytest.raises(ValueError, match="timm arguments keras-vit does not know: warp_factor"):
        keras_vit.create_model(str(strange))
    # Weights that do not fit their config: the message names the key and both shapes.
    (strange / "config.json").write_text(
        json.dumps({**config, "model_args": {**config["model_args"], "embed_dim": 96}})
    )
    with pytest.raises(ValueError, match=r"(?s)does not fit model.*nothing was loaded.*expected"):
        keras_vit.create_model(str(strange))
    # An architecture keras-vit does not build yet says which option.
    with pytest.raises(timm_config.UnsupportedArchitectureError, match="distilled=True"):
        timm_config.spec_options(timm_config.architecture_args("deit_tiny_distilled_patch16_224"))


def test_the_table_and_its_docs_page_are_what_the_script_writes_from_this_timm(timm):
    import importlib.util

    script = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "scripts", "make_timm_table.py")
    spec = importlib.util.spec_from_file_location("make_timm_table", script)
    make = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(make)
    version, collected = make.collect()
    assert collected == ARCHITECTURES, f"timm {version}: run scripts/make_timm_table.py"
    with open(make.DOCS, encoding="utf-8") as f:
        assert f.read() == make.render_docs(), "run scripts/make_timm_table.py"
