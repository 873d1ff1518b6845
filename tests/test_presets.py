"""Presets: the registry's consistency, pretrained models by name through a local mirror,
class names and pre-processing that travel with the model, and local presets."""

import dataclasses
import os

import numpy as np
import pytest
from helpers import (
    TINY_ENCODER,
    assert_close_to_scale,
    log_softmax,
    randomize_keras,
    randomize_torch,
    to_numpy,
    torch_logits,
)
from http_server import download_env, unused_url
from upstream import write_original_npz

import keras_vit
from keras_vit.checkpoints.layouts import LAYOUTS
from keras_vit.labels import LABEL_SETS, label_set
from keras_vit.layers.preprocessing import ImagePreprocessing
from keras_vit.models.variants import VARIANTS
from keras_vit.presets import catalog, download

PRESETS = list(catalog.PRESETS.values())
# What a preset's pre-processing must state, and the file type each layout is published as.
PREPROCESSING_KEYS = {"crop_mode", "crop_fraction", "interpolation", "mean", "std"}
FILE_TYPES = {"original": ".npz", "timm": ".safetensors"}


# --- the registry ---------------------------------------------------------------------------


def test_names_are_unique():
    names = [preset.name for preset in catalog._presets()]
    assert len(names) == len(set(names)) == len(catalog.PRESETS)
    assert set(catalog.TOP1) <= set(catalog.PRESETS), "a reported top-1 for no preset"


@pytest.mark.parametrize("preset", PRESETS, ids=lambda p: p.name)
def test_every_entry_is_consistent(preset):
    assert preset.model in VARIANTS, "its architecture exists"
    spec = preset.spec
    assert all(side % spec.stride == 0 for side in spec.image_size), "its image size divides by the stride"
    assert spec.image_size == (preset.image_size,) * 2 and spec.num_classes == preset.num_classes
    # The numerics it was trained with are those the loader expects of its layout.
    layout = LAYOUTS[preset.layout]
    assert {k: getattr(spec, k) for k in layout.numerics} == layout.numerics
    if spec.resnet is not None:
        assert {k: getattr(spec.resnet, k) for k in layout.resnet_numerics} == layout.resnet_numerics
    assert preset.url.startswith("https://") and preset.url.endswith(FILE_TYPES[preset.layout])
    # Its pre-processing is complete, and builds.
    assert set(preset.preprocessing) == PREPROCESSING_KEYS
    ImagePreprocessing(preset.image_size, **preset.preprocessing)
    assert preset.labels is None or LABEL_SETS[preset.labels] == preset.num_classes
    assert preset.license
    assert (preset.top1 is None) == (preset.top1_source is None)
    assert preset.top1 is None or 50 < preset.top1 < 100
    assert preset.sha256 is None or len(preset.sha256) == 64


def test_the_papers_and_augreg_checkpoints_are_covered():
    paper = ["vit_b16", "vit_b32", "vit_l16", "vit_l32", "vit_h14", "r50_vit_b16"]
    expected = [f"{m}.orig_in21k" for m in paper]
    expected += [f"{m}.orig_in21k_ft_in1k_384" for m in paper if m != "vit_h14"]  # no H/14 was released
    for model in ("vit_ti16", "vit_s16", "vit_s32", "vit_b16", "vit_b32", "vit_l16"):
        expected += [f"{model}.augreg_in21k", f"{model}.augreg_in21k_ft_in1k", f"{model}.augreg_in21k_ft_in1k_384"]
    assert not set(expected) - set(catalog.PRESETS)


def test_list_models_with_wildcards_and_cards():
    assert keras_vit.list_models("vit_ti16.*", pretrained=True) == [
        "vit_ti16.augreg_in21k",
        "vit_ti16.augreg_in21k_ft_in1k",
        "vit_ti16.augreg_in21k_ft_in1k_384",
    ]
    card = keras_vit.get_preset("vit_b16.augreg2_in21k_ft_in1k").card()
    for fact in ("model.safetensors", "timm", "gelu_approximate=False", "bicubic", "85.11%", "apache-2.0"):
        assert fact in card
    with pytest.raises(ValueError, match="Did you mean 'vit_b16.augreg2_in21k_ft_in1k'"):
        keras_vit.get_preset("vit_b16.augreg2_in21k_ft_in1")


# --- class names ----------------------------------------------------------------------------


def test_label_sets_ship_with_the_package():
    assert len(label_set("imagenet1k")) == 1000 and len(label_set("imagenet21k")) == 21843
    assert label_set("imagenet1k")[0] == "tench, Tinca tinca"


def test_decode_predictions_returns_index_name_score():
    scores = np.random.default_rng(0).dirichlet(np.ones(1000), size=2).astype("float32")
    decoded = keras_vit.decode_predictions(scores, top=3)
    assert len(decoded) == 2 and len(decoded[0]) == 3
    index, name, score = decoded[1][0]
    assert index == int(scores[1].argmax()) and name == label_set("imagenet1k")[index]
    assert score == pytest.approx(float(scores[1].max()))
    assert [s for _, _, s in decoded[0]] == sorted((s for _, _, s in decoded[0]), reverse=True)
    model = keras_vit.create_model("vit_ti16", image_size=16, num_classes=2, depth=1, class_names=["cat", "dog"])
    assert keras_vit.decode_predictions(np.array([[0.2, 0.8]]), class_names=model) == [
        [(1, "dog", pytest.approx(0.8)), (0, "cat", pytest.approx(0.2))]
    ]
    with pytest.raises(ValueError, match="No label set .* has 7 classes"):
        keras_vit.decode_predictions(np.ones((1, 7)))
    with pytest.raises(ValueError, match="Expected 3 class names"):
        keras_vit.create_model("vit_ti16", image_size=16, num_classes=3, depth=1, class_names=["a", "b"])


# --- pretrained models by name, through a mirror on 127.0.0.1 -------------------------------

TI16 = "vit_ti16.augreg_in21k_ft_in1k"  # the smallest real preset: ViT-Ti/16, 5.7M parameters


def serve(server, preset, write):
    """Writes a preset's file with ``write(path)`` where the mirror keeps the publisher's path."""
    path = os.path.join(server.root, download.source_url(preset.url)[len(server.url) :])
    os.makedirs(os.path.dirname(path), exist_ok=True)
    write(path)
    return path


def photo():
    import skimage.data

    return skimage.data.chelsea()  # a real photo, 300x451, that installs with scikit-image


def write_ti16(path):
    # AugReg ViT-Ti/16 in the original .npz layout, random values (its real shapes).
    write_original_npz(path, np.random.default_rng(1), 192, 12, 3, 768, 16, 197, 1000)


def test_preset_downloads_once_matches_timm_and_then_works_offline(timm, mirror, monkeypatch, tmp_path):
    path = serve(mirror, catalog.PRESETS[TI16], write_ti16)
    model = keras_vit.create_model(TI16)
    assert mirror.requests == ["/" + os.path.relpath(path, mirror.root)]
    # Its record's spec, pre-processing and labels; the weights loaded through the real reader.
    assert model.spec == catalog.PRESETS[TI16].spec and model.spec.gelu_approximate
    assert model.class_names[281] == "tabby, tabby cat"
    assert model.preprocessing.get_config()["crop_fraction"] == 0.9
    peer = timm.models.vision_transformer.VisionTransformer(
        embed_dim=192, depth=12, num_heads=3, act_layer="gelu_tanh", num_classes=1000
    ).eval()
    timm.models.vision_transformer._load_weights(peer, path)
    x = np.asarray(model.preprocessing(photo()[None]))
    probabilities = model.classify(photo())
    reference = torch_logits(peer, x)
    np.testing.assert_allclose(
        np.log(probabilities) - np.log(probabilities).mean(), reference - reference.mean(), atol=2e-4
    )
    decoded = keras_vit.decode_predictions(probabilities, top=1)[0][0]
    assert decoded[0] == int(reference.argmax()) and decoded[1] == label_set("imagenet1k")[decoded[0]]

    # A cache hit: no request. Offline: no request either, and another size and task.
    again = keras_vit.create_model("vit_ti16", weights="augreg_in21k_ft_in1k", image_size=32, num_classes=10)
    download_env(monkeypatch, tmp_path / "home", offline=True)
    offline = keras_vit.create_model(TI16)
    assert len(mirror.requests) == 1
    np.testing.assert_array_equal(to_numpy(offline.weights[0]), to_numpy(model.weights[0]))
    assert again.input_shape == (None, 32, 32, 3) and again.class_names is None
    assert again.preprocessing.get_config()["image_size"] in ((32, 32), [32, 32])
    # Offline and not cached: the error names the file and where to put it.
    with pytest.raises(download.NotCachedError) as error:
        keras_vit.create_model("vit_ti16.augreg_in21k_ft_in1k_384")
    assert download.cache_path(catalog.PRESETS["vit_ti16.augreg_in21k_ft_in1k_384"].url) in str(error.value)
    assert len(mirror.requests) == 1


def test_a_corrupted_preset_file_is_refused_and_removed(mirror, monkeypatch):
    preset = dataclasses.replace(catalog.PRESETS[TI16], sha256="0" * 64)
    monkeypatch.setitem(catalog.PRESETS, TI16, preset)
    serve(mirror, preset, write_ti16)
    with pytest.raises(download.IntegrityError, match="0" * 64):
        keras_vit.create_model(TI16)
    target = download.cache_path(preset.url)
    left = [f for f in os.listdir(os.path.dirname(target)) if not f.endswith(".lock")]
    assert not os.path.exists(target) and not left


def test_a_missing_file_or_a_server_down_names_the_url_and_the_cache_path(mirror, monkeypatch, tmp_path):
    preset = catalog.PRESETS[TI16]
    with pytest.raises(download.DownloadError) as error:  # nothing served: 404
        keras_vit.create_model(TI16)
    assert "404" in str(error.value) and download.cache_path(preset.url) in str(error.value)
    assert download.source_url(preset.url) in str(error.value)
    download_env(monkeypatch, tmp_path / "home", mirror=unused_url())
    with pytest.raises(download.DownloadError, match="KERAS_VIT_MIRROR"):
        keras_vit.create_model(TI16)


def test_timm_file_by_url_builds_the_numerics_it_was_trained_with(timm, mirror):
    from safetensors.numpy import save_file

    peer = randomize_torch(timm.create_model("vit_tiny_patch16_224", pretrained=False, num_classes=5)).eval()
    url = mirror.put("org/tiny/model.safetensors", b"")
    save_file(
        {k: v.numpy() for k, v in peer.state_dict().items()}, os.path.join(mirror.root, "org/tiny/model.safetensors")
    )
    model = keras_vit.create_model("vit_ti16", weights=url, num_classes=5)
    assert model.spec.gelu_approximate is False and model.preprocessing is None
    x = np.random.default_rng(0).standard_normal((1, 224, 224, 3)).astype("float32")
    np.testing.assert_allclose(to_numpy(model(x)), torch_logits(peer, x), atol=2e-4)


def test_timm_safetensors_preset_matches_timm(timm, mirror):
    from safetensors.torch import save_file

    preset = catalog.PRESETS["vit_b16.augreg2_in21k_ft_in1k"]  # timm's file on the HF hub, ViT-B/16
    peer = randomize_torch(timm.create_model("vit_base_patch16_224", pretrained=False).eval(), informative=True)
    serve(mirror, preset, lambda path: save_file(peer.state_dict(), path))
    model = keras_vit.create_model(preset.name)
    assert not model.spec.gelu_approximate and model.class_names == label_set("imagenet1k")
    x = to_numpy(model.preprocessing(photo()[None]))
    assert_close_to_scale(to_numpy(model(x)), torch_logits(peer, x), 1e-4)


def test_papers_in21k_file_loads_its_pre_logits(mirror):
    # ViT-B/32 of the paper, ImageNet-21k: 21843 classes after a 768-wide pre-logits layer.
    preset = catalog.PRESETS["vit_b32.orig_in21k"]

    def write(path):
        rng = np.random.default_rng(2)
        write_original_npz(path, rng, 768, 12, 12, 3072, 32, 50, 21843)
        arrays = dict(np.load(path))
        arrays["pre_logits/kernel"] = (0.05 * rng.standard_normal((768, 768))).astype("float32")
        arrays["pre_logits/bias"] = np.zeros(768, "float32")
        np.savez(path, **arrays)

    serve(mirror, preset, write)
    model = keras_vit.create_model(preset.name)
    assert model.get_layer("pre_logits").output.shape[-1] == 768 and model.class_names is None
    assert model.output_shape == (None, 21843)


# --- the model keeps its pre-processing and class names; local presets ----------------------


def tiny_labelled():
    """A two-class model with its own pre-processing and informative weights (its initial
    zero head would classify every image as [0.5, 0.5], whatever was saved or dropped)."""
    preprocessing = ImagePreprocessing.from_normalization("imagenet", 16, crop_mode="center", crop_fraction=0.875)
    return randomize_keras(keras_vit.create_model(
        "vit_ti16", image_size=16, num_classes=2, depth=1, class_names=["cat", "dog"], preprocessing=preprocessing,
        **TINY_ENCODER,
    ))  # fmt: skip


def photos():
    """Three real photos of different sizes (classify takes a list of any sizes)."""
    import skimage.data

    return [skimage.data.chelsea(), skimage.data.astronaut(), skimage.data.coffee()]


def assert_classifies_alike(loaded, model):
    """The two models' log-probabilities of three photos agree, relative to their size."""
    raw = photos()
    assert_close_to_scale(np.log(loaded.classify(raw)), np.log(model.classify(raw)), 1e-5)


def test_pre_processing_and_class_names_are_saved_with_the_model(tmp_path):
    model = tiny_labelled()
    path = keras_vit.save_model(model, tmp_path / "model.keras")
    loaded = keras_vit.load_model(path)
    assert loaded.class_names == ("cat", "dog")
    assert loaded.preprocessing.get_config() == model.preprocessing.get_config()
    assert_classifies_alike(loaded, model)
    bigger = keras_vit.load_model(path, image_size=32)
    assert bigger.preprocessing.get_config()["image_size"] in ((32, 32), [32, 32])
    assert bigger.class_names == ("cat", "dog")


def test_local_preset_round_trip_adapts_and_is_verified(tmp_path):
    model = tiny_labelled()
    folder = keras_vit.save_preset(model, tmp_path / "pets", description="two pets")
    loaded = keras_vit.create_model(folder)
    # What the preset must carry: the weights, the pre-processing and the class names.
    saved = {variable.path: to_numpy(variable) for variable in model.weights}
    assert sorted(variable.path for variable in loaded.weights) == sorted(saved)
    for variable in loaded.weights:
        np.testing.assert_array_equal(to_numpy(variable), saved[variable.path], err_msg=variable.path)
    assert loaded.preprocessing is not None
    assert loaded.preprocessing.get_config() == model.preprocessing.get_config()
    assert_classifies_alike(loaded, model)
    assert loaded.class_names == ("cat", "dog")
    adapted = keras_vit.create_model(folder, image_size=32, num_classes=3)
    assert adapted.input_shape == (None, 32, 32, 3) and adapted.class_names is None
    with pytest.raises(FileExistsError):
        keras_vit.save_preset(model, folder)
    with open(os.path.join(folder, "model.keras"), "r+b") as f:  # one byte changed
        f.seek(100)
        byte = f.read(1)
        f.seek(100)
        f.write(bytes([byte[0] ^ 1]))
    with pytest.raises(ValueError, match="does not match its card"):
        keras_vit.create_model(folder)
    with pytest.raises(ValueError, match="not a keras-vit preset folder"):
        keras_vit.create_model(str(tmp_path))


def test_a_preset_of_a_model_without_pre_processing_classifies_files_and_pil_images(tmp_path):
    from PIL import Image

    bare = randomize_keras(keras_vit.create_model("vit_ti16", image_size=16, num_classes=2, depth=1, **TINY_ENCODER))
    assert bare.preprocessing is None
    folder = keras_vit.save_preset(bare, tmp_path / "bare")
    assert bare.preprocessing is None  # lent for the save only
    loaded = keras_vit.create_model(folder)
    unnamed = lambda layer: {k: v for k, v in layer.get_config().items() if k != "name"}  # noqa: E731
    assert unnamed(loaded.preprocessing) == unnamed(ImagePreprocessing.from_normalization("vit", 16))
    # Raw photos through the stored x / 127.5 - 1 and a resize: the bare model's own input.
    raw = photos()
    by_hand = [to_numpy(bare.predict(np.asarray(loaded.preprocessing(image))[None], verbose=0))[0] for image in raw]
    assert_close_to_scale(np.log(loaded.classify(raw)), log_softmax(np.asarray(by_hand)), 1e-5)
    # A file's path and a PIL image stand for the image, alone or in a list.
    paths = []
    for i, image in enumerate(raw):
        paths.append(str(tmp_path / f"{i}.png"))
        Image.fromarray(image).save(paths[-1])
    np.testing.assert_allclose(loaded.classify(paths), loaded.classify(raw), rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(loaded.classify(paths[1]), loaded.classify(raw[1]), rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(
        loaded.classify([Image.open(p).convert("L") for p in paths[:2]]),
        loaded.classify([np.repeat(np.asarray(Image.open(p).convert("L"))[..., None], 3, -1) for p in paths[:2]]),
        rtol=1e-6, atol=1e-7,
    )  # fmt: skip
    with pytest.raises(ValueError, match="does not exist"):
        loaded.classify(str(tmp_path / "missing.jpg"))
    with pytest.raises(ValueError, match="normalization"):
        keras_vit.save_preset(bare, tmp_path / "wrong", normalization="cifar")
    assert not os.path.exists(tmp_path / "wrong")


def test_weights_that_name_nothing_are_clear_errors_before_any_download(mirror):
    with pytest.raises(FileNotFoundError, match="missing.npz"):
        keras_vit.create_model("vit_ti16", weights="missing.npz")
    with pytest.raises(ValueError, match="Did you mean 'vit_ti16.augreg_in21k_ft_in1k_384'"):
        keras_vit.create_model("vit_ti16", weights="augreg_in21k_ft_in1k_38")
    with pytest.raises(ValueError, match="holds 'vit_ti16' weights, not 'vit_b16'"):
        keras_vit.create_model("vit_b16", weights="vit_ti16.augreg_in21k")
    with pytest.raises(ValueError, match="second source"):
        keras_vit.create_model(TI16, weights="augreg_in21k")
    with pytest.raises(ValueError, match="not divisible"):
        keras_vit.create_model(TI16, image_size=100)
    assert mirror.requests == []


def test_a_model_name_wins_over_a_folder_of_the_same_name(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    os.makedirs("vit_ti16")  # e.g. a run folder named after its model
    model = keras_vit.create_model("vit_ti16", image_size=16, depth=1, **TINY_ENCODER)
    assert model.spec.hidden_size == TINY_ENCODER["hidden_size"]


def test_a_local_preset_is_read_whole_only_when_its_model_file_changed(tmp_path, monkeypatch):
    from keras_vit.presets import integrity, local

    model = keras_vit.create_model("vit_ti16", image_size=16, num_classes=2, depth=1, **TINY_ENCODER)
    folder = keras_vit.save_preset(model, tmp_path / "pets")
    model_file = os.path.join(folder, "model.keras")
    hour_ago = os.stat(model_file).st_mtime_ns - 3600 * 10**9
    os.utime(model_file, ns=(hour_ago, hour_ago))  # a stamp written in the file's own time tick is not trusted
    hashed = []
    read_whole = integrity.file_sha256
    monkeypatch.setattr(integrity, "file_sha256", lambda path: hashed.append(path) or read_whole(path))
    keras_vit.create_model(folder)  # its time changed: read whole, and stamped
    keras_vit.create_model(folder)
    keras_vit.create_model(folder, num_classes=3)
    assert hashed == [model_file]
    local.read_card(folder, rehash=True)  # asked for
    assert hashed == [model_file] * 2
    with open(model_file, "r+b") as f:  # one byte changed, and the time
        f.seek(100)
        byte = f.read(1)
        f.seek(100)
        f.write(bytes([byte[0] ^ 1]))
    os.utime(model_file, ns=(hour_ago + 10**9,) * 2)
    with pytest.raises(ValueError, match="does not match its card"):
        keras_vit.create_model(folder)
    assert hashed == [model_file] * 3
