"""The front door: what each way of naming a model resolves to (``keras_vit.sources.resolver``),
the model the builder makes of it, and that loading goes down the package's floors.

Every kind of source is an entry of ``resolver.ENTRIES``; each has a case here. Hub names are
tested through the loopback hub in ``test_family.py`` and presets' downloads in
``test_presets.py``.
"""

import sys

import numpy as np
import pytest
from helpers import TINY_ENCODER, floor_of, floors, once_on, to_numpy

import keras_vit
from keras_vit.sources import InvalidModelFileError, NoWeightsError, build, resolve
from keras_vit.training.config import make_config
from keras_vit.training.pretrained import load_pretrained


def tiny(**options):
    return keras_vit.create_model("vit_ti16", image_size=16, num_classes=3, depth=1, **TINY_ENCODER, **options)


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """A tiny model with class names, as a ``.keras`` file and as a local preset."""
    folder = tmp_path_factory.mktemp("sources")
    model = tiny(class_names=["a", "b", "c"])
    keras_path = keras_vit.save_model(model, str(folder / "tiny.keras"))
    preset = keras_vit.save_preset(model, str(folder / "preset"))
    return {"keras": keras_path, "preset": preset, "model": model}


def test_each_name_resolves_to_its_kind_spec_and_weights(files):
    variant = resolve("vit_ti16")
    assert (variant.kind, variant.name, variant.weights) == ("variant", "vit_ti16", None)
    assert variant.spec == keras_vit.get_spec("vit_ti16")
    timm = resolve("vit_small_patch14_reg4_dinov2")
    assert (timm.kind, timm.spec.num_register_tokens, timm.weights) == ("timm_architecture", 4, None)
    preset = resolve("vit_ti16.augreg_in21k_ft_in1k")
    assert (preset.kind, preset.name, preset.num_classes, preset.weights.path) == ("preset", "vit_ti16", 1000, None)
    assert preset.weights.url.startswith("https://") and preset.preprocessing and preset.class_names == "imagenet1k"
    # The same preset by tag, as create_model's weights.
    assert resolve("vit_ti16", weights="augreg_in21k_ft_in1k") == preset
    local = resolve(files["preset"])
    assert (local.kind, local.spec, local.weights.container) == ("local_preset", None, "keras")
    keras_file = resolve(files["keras"])
    assert (keras_file.kind, keras_file.weights.path) == ("keras_file", files["keras"])


def test_a_checkpoint_resolves_with_the_numerics_of_its_layout_and_needs_an_architecture(tmp_path):
    path = str(tmp_path / "timm.npz")
    np.savez(path, **{"patch_embed.proj.weight": np.zeros((8, 3, 16, 16), "float32")})
    bare = resolve(path)
    assert (bare.kind, bare.spec, bare.weights.container) == ("checkpoint", None, "npz")
    with pytest.raises(InvalidModelFileError, match="holds weights only"):
        build(bare)
    named = resolve(path, model_name="vit_ti16")
    # timm's files were trained with the exact GELU and epsilon 1e-6: the spec says so.
    assert (named.name, named.spec.gelu_approximate, named.spec.layer_norm_epsilon) == ("vit_ti16", False, 1e-6)
    assert resolve("vit_ti16", weights=path) == named


@once_on("torch", "a file is read the same on every backend")
def test_a_checkpoint_with_a_model_name_is_read_and_its_layout_told_once(timm, tmp_path, monkeypatch):
    import torch

    from keras_vit.checkpoints import layouts, readers

    path = str(tmp_path / "t.pth")
    torch.save(timm.create_model("vit_tiny_patch16_224", depth=1, img_size=32, num_classes=3).state_dict(), path)
    reads, detections = [], []
    read, detect = readers.read_arrays, layouts.detect_layout
    monkeypatch.setattr(readers, "read_arrays", lambda path, **kwargs: reads.append(path) or read(path, **kwargs))
    monkeypatch.setattr(layouts, "detect_layout", lambda arrays: detections.append(len(arrays)) or detect(arrays))
    model = keras_vit.load_model(path, model_name="vit_ti16", depth=1, image_size=32, num_classes=3)
    assert reads == [path] and len(detections) == 1, (reads, detections)
    assert not model.spec.gelu_approximate  # the file's numerics: timm's exact GELU, read that once too


def test_loading_asks_for_weights_and_names_what_to_use_instead(tmp_path):
    with pytest.raises(NoWeightsError, match=r"'vit_ti16' names an architecture.*vit_ti16\.augreg"):
        resolve("vit_ti16", loading=True)
    with pytest.raises(NoWeightsError, match="names an architecture"):
        keras_vit.load_model("vit_small_patch14_reg4_dinov2")
    with pytest.raises(InvalidModelFileError, match="no such file or folder"):
        resolve(str(tmp_path / "missing.keras"), loading=True)
    with pytest.raises(InvalidModelFileError, match="is a folder"):
        keras_vit.load_model(str(tmp_path))
    with pytest.raises(ValueError, match="Unknown preset"):
        resolve("vit_ti16.no_such_tag", loading=True)
    with pytest.raises(ValueError, match="Unknown model name 'vit_tii16'. Did you mean 'vit_ti16'"):
        resolve("vit_tii16")


def test_the_builder_makes_each_source_into_its_model(files):
    x = np.random.default_rng(0).uniform(-1, 1, (2, 16, 16, 3)).astype("float32")
    expected = to_numpy(files["model"](x))
    for source in (files["keras"], files["preset"]):
        loaded = keras_vit.load_model(source)
        np.testing.assert_allclose(to_numpy(loaded(x)), expected, rtol=1e-5, atol=1e-6)
        assert loaded.class_names == ("a", "b", "c")
    # Built at another size: the position embeddings resampled, the rest the file's.
    wider = keras_vit.create_model(files["preset"], image_size=32)
    assert wider.input_shape == (None, 32, 32, 3) and wider.class_names == ("a", "b", "c")
    fresh = build(resolve("vit_ti16"), 16, 3, depth=1, **TINY_ENCODER)
    assert fresh.count_params() == files["model"].count_params()


# --- loading goes down the floors ---------------------------------------------------------------


def climbs(action):
    """Runs ``action`` and returns the calls it made from a keras-vit module into a module
    of a higher floor (pyproject.toml's layers): ``[(caller, callee, function)]``."""
    floor_list = floors()
    found, entered = [], set()

    def profile(frame, event, arg):
        if event != "call":
            return
        callee = frame.f_globals.get("__name__", "")
        caller = frame.f_back.f_globals.get("__name__", "") if frame.f_back else ""
        if not callee.startswith("keras_vit"):
            return
        entered.add(callee)
        # A function of a higher module called by name; a method reached through an object
        # (a layer's call, a callback) is the object's, not a dependency of the caller.
        by_name = frame.f_code.co_varnames[:1] not in (("self",), ("cls",))
        if by_name and caller.startswith("keras_vit") and caller != callee:
            if floor_of(callee, floor_list) < floor_of(caller, floor_list):
                found.append((caller, callee, frame.f_code.co_name))

    sys.setprofile(profile)
    try:
        action()
    finally:
        sys.setprofile(None)
    climbs.entered = entered
    return sorted(set(found))


def test_loading_a_model_goes_down_the_floors_and_back_never_up(files, tmp_path):
    assert climbs(lambda: keras_vit.load_model(files["keras"], image_size=32)) == []
    assert {"keras_vit.factory", "keras_vit.sources.resolver", "keras_vit.sources.builder"} <= climbs.entered
    assert climbs(lambda: keras_vit.create_model(files["preset"], num_classes=5)) == []
    config = make_config("digits_finetune", init_from=files["keras"])
    assert climbs(lambda: load_pretrained(config)) == []
    assert "keras_vit.training.pretrained" in climbs.entered


def test_the_climb_check_sees_a_call_up():
    # A lower floor calling the front door by name (as saving.load_model once called the
    # registry's create_model, and local presets called saving) is a climb.
    from keras_vit import factory

    lower = {"__name__": "keras_vit.sources.resolver", "list_models": factory.list_models}
    exec("def climbing():\n    return list_models('vit_ti*')\n", lower)
    assert climbs(lower["climbing"]) == [("keras_vit.sources.resolver", "keras_vit.factory", "list_models")]
