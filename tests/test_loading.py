"""load_weights: formats by content, fresh heads, resampling, and errors that name the key."""

import os
import textwrap

import keras
import numpy as np
import pytest
from helpers import assert_close_to_scale, once_on, randomize_torch, run_on_next_backend, to_numpy

import keras_vit

SMALL = dict(image_size=32, patch_size=16, hidden_size=32, depth=2, num_heads=2, mlp_dim=64)


def small(**kwargs):
    return keras_vit.VisionTransformer(**{**SMALL, "num_classes": 5, "head_zero_init": False, **kwargs})


def timm_file(timm, tmp_path, name="timm.pth", **kwargs):
    import torch

    peer = timm.models.vision_transformer.VisionTransformer(
        img_size=32, patch_size=16, embed_dim=32, depth=2, num_heads=2, mlp_ratio=2.0, **{"num_classes": 5, **kwargs}
    )
    randomize_torch(peer)
    torch.save(peer.state_dict(), str(tmp_path / name))
    return str(tmp_path / name), peer


def test_other_number_of_classes_loads_all_but_the_head(timm, tmp_path, rng):
    path, peer = timm_file(timm, tmp_path, num_classes=1000)
    model = small(num_classes=10, gelu_approximate=False)
    before = to_numpy(model.get_layer("head").kernel)
    with pytest.warns(UserWarning, match=r"head/kernel keeps its fresh initial value.*\(32, 1000\)"):
        report = keras_vit.load_weights(model, path)
    assert set(report.fresh) == {"head/kernel", "head/bias"}
    np.testing.assert_array_equal(to_numpy(model.get_layer("head").kernel), before)
    # Everything else did load: features equal timm's pre-logits features.
    import torch

    x = rng.uniform(-1, 1, (2, 32, 32, 3)).astype("float32")
    with torch.no_grad():
        expected = peer.forward_head(
            peer.forward_features(torch.from_numpy(x.transpose(0, 3, 1, 2))), pre_logits=True
        ).numpy()
    features = keras.Model(model.input, model.get_layer("pooling").output)
    np.testing.assert_allclose(to_numpy(features(x)), expected, atol=1e-4)


def test_checkpoint_without_head_keeps_fresh_head(timm, tmp_path):
    path, _ = timm_file(timm, tmp_path, num_classes=0)
    report = keras_vit.load_weights(small(), path, warn=False)
    assert set(report.fresh) == {"head/kernel", "head/bias"}


def test_missing_key_names_key_and_shape(timm, tmp_path):
    import torch

    path, peer = timm_file(timm, tmp_path)
    state = peer.state_dict()
    del state["blocks.1.mlp.fc1.weight"]
    torch.save(state, path)
    model = small()
    before = [to_numpy(v) for v in model.weights]
    with pytest.raises(
        ValueError,
        match=r"block_1/mlp/fc1/kernel: missing key 'blocks.1.mlp.fc1.weight' "
        r"\(expected shape \(32, 64\)\)",
    ):
        keras_vit.load_weights(model, path)
    # Nothing was assigned: a failed load leaves the model as it was.
    for v, b in zip(model.weights, before):
        np.testing.assert_array_equal(to_numpy(v), b)


def test_wrong_shape_names_key_expected_and_given(timm, tmp_path):
    path, _ = timm_file(timm, tmp_path)
    with pytest.raises(
        ValueError,
        match=r"block_0/mlp/fc1/kernel: key 'blocks.0.mlp.fc1.weight' has shape "
        r"\(32, 64\), expected \(32, 128\)",
    ):
        keras_vit.load_weights(small(mlp_dim=128), path)


def test_depth_mismatch_is_an_error(timm, tmp_path):
    path, _ = timm_file(timm, tmp_path)
    with pytest.raises(ValueError, match=r"block_2/norm1/gamma: missing key 'blocks.2.norm1.weight'"):
        keras_vit.load_weights(small(depth=3), path)


def test_pooling_structure_mismatch_is_an_error(timm, tmp_path):
    path, _ = timm_file(timm, tmp_path, global_pool="avg", fc_norm=True)
    with pytest.raises(ValueError, match=r"after pooling \(`fc_norm`\).*norm_after_pool=True"):
        keras_vit.load_weights(small(pooling="gap", class_token=True), path)
    path, _ = timm_file(timm, tmp_path, name="nocls.pth", global_pool="avg", class_token=False, fc_norm=False)
    with pytest.raises(ValueError, match=r"has no class token.*class_token=True"):
        keras_vit.load_weights(small(), path)


def test_numerics_that_differ_from_the_checkpoint_are_reported(timm, tmp_path):
    path, _ = timm_file(timm, tmp_path)
    with pytest.warns(
        UserWarning, match=r"trained with gelu_approximate=False.*create_model\(\.\.\., gelu_approximate=False\)"
    ):
        keras_vit.load_weights(small(gelu_approximate=True), path)


def test_not_a_checkpoint_is_an_error(tmp_path):
    path = tmp_path / "notes.pth"
    path.write_text("hello")
    with pytest.raises(ValueError, match=r"not a checkpoint keras-vit can read.*first bytes are b'hello'"):
        keras_vit.load_weights(small(), str(path))
    with pytest.raises(FileNotFoundError, match="No checkpoint file"):
        keras_vit.load_weights(small(), str(tmp_path / "missing.npz"))


def test_unreadable_checkpoints_are_one_clear_error(tmp_path):
    import pickle

    from keras_vit.checkpoints.readers import CheckpointReadError

    model = small()
    good = str(tmp_path / "good.keras")
    model.save(good)
    data = open(good, "rb").read()
    cases = {
        "truncated.keras": (data[: len(data) // 2], r"starts as a zip archive .* not a complete one"),
        "plain_pickle.pth": (
            pickle.dumps({"layers": [1, 2]}),
            r"holds Python objects besides tensors.*weights_only=False",
        ),
    }
    for name, (content, message) in cases.items():
        (tmp_path / name).write_bytes(content)
        with pytest.raises(CheckpointReadError, match=message) as error:
            keras_vit.load_weights(model, str(tmp_path / name))
        assert "\n" not in str(error.value)
    objects = str(tmp_path / "objects.npz")
    np.savez(objects, **{"embedding/kernel": np.array([{"a": 1}], dtype=object)})
    with pytest.raises(CheckpointReadError, match="holds object arrays"):
        keras_vit.load_weights(model, objects)


def _safetensors(path, header, data):
    import json
    import struct

    text = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(text)) + text + data)
    return str(path)


@pytest.mark.parametrize(
    "entries, data, message",
    [
        ({"a": ([4], [0, 64])}, bytes(16), r"'a' claims bytes 0\.\.64 .* the data holds 16 bytes"),
        ({"a": ([1 << 30, 1 << 10], [0, 16])}, bytes(16), r"'a' claims bytes 0\.\.16 for shape \[1073741824, 1024\]"),
        ({"a": ([2], [0, 8]), "b": ([2], [4, 12])}, bytes(16), "claim the same bytes"),
    ],
    ids=["offsets_past_the_end", "claims_gigabytes", "overlapping"],
)
def test_a_safetensors_header_that_lies_is_refused_before_the_data_is_read(tmp_path, entries, data, message):
    from keras_vit.checkpoints.readers import CheckpointReadError

    header = {
        name: {"dtype": "F32", "shape": shape, "data_offsets": offsets} for name, (shape, offsets) in entries.items()
    }
    path = _safetensors(tmp_path / "lies.safetensors", header, data)
    with pytest.raises(CheckpointReadError, match=message):
        keras_vit.load_weights(small(), path)


def test_an_incomplete_checkpoint_lists_its_missing_keys_instead_of_blaming_the_class_token(tmp_path):
    path = str(tmp_path / "kernel_only.npz")
    np.savez(path, **{"embedding/kernel": np.zeros((16, 16, 3, 32), "float32")})
    with pytest.raises(
        ValueError, match=r"nothing was loaded:\n  patch_embedding/bias: missing key 'embedding/bias'"
    ) as error:
        keras_vit.load_weights(small(), path)
    assert "class_token/token: missing key 'cls'" in str(error.value) and "build it with" not in str(error.value)


def test_unknown_layout_is_an_error(tmp_path):
    path = str(tmp_path / "other.npz")
    np.savez(path, **{"conv1/kernel": np.zeros((3, 3, 3, 8), "float32")})
    with pytest.raises(ValueError, match=r"Unrecognised checkpoint layout.*conv1/kernel"):
        keras_vit.load_weights(small(), path)


# transformers' models whose files' keys carry other layouts' signatures too (DINOv3's the
# register tokens', DINOv2's and BEiT's ViT's), and plain ones, by the layout each is.
_HF_LAYOUTS = {
    "ViTForImageClassification": "hf",
    "BeitForImageClassification": "hf_beit",
    "Dinov2Model": "hf_dinov2",
    "Dinov2ForImageClassification": "hf_dinov2",
    "Dinov2WithRegistersModel": "hf_dinov2_registers",
    "DINOv3ViTModel": "hf_dinov3",
    "Data2VecVisionForImageClassification": "hf_beit",
    "CLIPVisionModel": "hf_clip",
    "SiglipVisionModel": "hf_siglip",
}


@once_on("torch", "a layout is told from the key names alone, the same on every backend")
def test_each_layout_is_told_from_its_keys_whatever_the_records_order(timm, monkeypatch, tmp_path):
    import transformers

    from keras_vit.checkpoints import layouts, readers

    sizes = dict(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64, image_size=32,
                 patch_size=8)  # fmt: skip
    keys = {}
    for name, layout in _HF_LAYOUTS.items():  # the keys of the files save_pretrained writes
        model_class = getattr(transformers, name)
        model_class(model_class.config_class(**sizes)).save_pretrained(tmp_path / name)
        keys[name] = (layout, set(readers.read_arrays(str(tmp_path / name / "model.safetensors"))[1]))
    keys["timm"] = ("timm", set(timm.create_model("vit_tiny_patch16_224", depth=1).state_dict()))
    detected = {name: layouts.detect_layout(dict.fromkeys(k))[0].name for name, (_, k) in keys.items()}
    assert detected == {name: layout for name, (layout, _) in keys.items()}
    # The records asked in the other order say the same.
    monkeypatch.setattr(layouts, "LAYOUTS", dict(reversed(layouts.LAYOUTS.items())))
    assert {name: layouts.detect_layout(dict.fromkeys(k))[0].name for name, (_, k) in keys.items()} == detected
    # Two signatures that neither layout refines: no guess.
    with pytest.raises(ValueError, match=r"signatures of the layouts original, timm, and no layout's record refines"):
        layouts.detect_layout(dict.fromkeys(["embedding/kernel", "patch_embed.proj.weight"]))


def test_keras_file_fine_tunes_at_higher_resolution(tmp_path, rng):
    source = small()
    path = str(tmp_path / "source.keras")
    source.save(path)
    target = small(image_size=48, num_classes=3)
    with pytest.warns(UserWarning, match="head/kernel keeps its fresh initial value"):
        report = keras_vit.load_weights(target, path)
    assert report.layout == "keras" and report.resampled["position_embedding/embedding"] == ((1, 5, 32), (1, 10, 32))
    np.testing.assert_array_equal(
        to_numpy(target.get_layer("block_1").mlp.fc2.kernel), to_numpy(source.get_layer("block_1").mlp.fc2.kernel)
    )


def test_bfloat16_safetensors_load(timm, tmp_path):
    import torch
    from safetensors.torch import save_file

    _, peer = timm_file(timm, tmp_path)
    state = {k: v.to(torch.bfloat16).contiguous() for k, v in peer.state_dict().items()}
    save_file(state, str(tmp_path / "bf16.safetensors"))
    model = small()
    keras_vit.load_weights(model, str(tmp_path / "bf16.safetensors"))
    np.testing.assert_array_equal(
        to_numpy(model.get_layer("block_0").norm1.gamma), state["blocks.0.norm1.weight"].float().numpy()
    )


# --- the same files on every backend -------------------------------------------------------

OTHER_BACKEND_SCRIPT = textwrap.dedent("""
    import sys, numpy as np, keras, keras_vit
    kind, path, images, out = sys.argv[1:]
    if kind == "keras":
        model = keras.saving.load_model(path)
    else:
        model = keras_vit.VisionTransformer(**{SMALL!r}, num_classes=5, pooling="gap",
                                            representation_size=16)
        model.load_weights(path)
    np.save(out, keras.ops.convert_to_numpy(model(np.load(images))))
""")


@pytest.mark.parametrize("kind", ["keras", "weights_h5"])
def test_saved_model_loads_on_the_next_backend(tmp_path, rng, kind):
    model = small(pooling="gap", representation_size=16)
    x = rng.uniform(-1, 1, (3, 32, 32, 3)).astype("float32")
    expected = to_numpy(model(x))
    path = str(tmp_path / ("model.keras" if kind == "keras" else "model.weights.h5"))
    model.save(path) if kind == "keras" else model.save_weights(path)
    np.save(tmp_path / "x.npy", x)
    script = OTHER_BACKEND_SCRIPT.replace("{SMALL!r}", repr(SMALL))
    here = keras.backend.backend()
    out = tmp_path / "out.npy"
    backend = run_on_next_backend(script, kind, path, tmp_path / "x.npy", out)
    np.testing.assert_allclose(np.load(out), expected, atol=1e-5, rtol=0, err_msg=f"{here} -> {backend}")


def test_create_model_with_weights_draws_only_what_the_file_lacks(tmp_path):
    # create_model(weights=...) builds without drawing the weights the file replaces
    # (models/deferred_init.py); those it lacks (here the head) get their usual initializer.
    options = dict(image_size=16, num_classes=3, depth=1, hidden_size=32, num_heads=2, mlp_dim=64)
    source = keras_vit.create_model("vit_ti16", **options)
    path = str(tmp_path / "no_head.npz")
    np.savez(path, **{v.path: to_numpy(v) for v in source.weights if not v.path.startswith("head/")})
    with pytest.warns(UserWarning, match="head/kernel keeps its fresh initial value"):
        model = keras_vit.create_model("vit_ti16", weights=path, head_zero_init=False, **options)
    for loaded, original in zip(model.weights, source.weights):
        if not loaded.path.startswith("head/"):
            np.testing.assert_array_equal(to_numpy(loaded), to_numpy(original))
    head = to_numpy(model.get_layer("head").kernel)
    limit = np.sqrt(6 / sum(head.shape))  # glorot_uniform's bound
    assert 0.3 * limit < np.abs(head).max() <= limit  # drawn, not the zeros it was built with


def test_create_model_of_another_keras_model_file_returns_it_as_it_is(tmp_path):
    # A .keras file of a model that is not keras-vit's holds its own architecture: it loads
    # as it is, and options that would rebuild it are refused.
    path = str(tmp_path / "other.keras")
    keras.Sequential([keras.Input((4,)), keras.layers.Dense(2, name="dense")]).save(path)
    assert [layer.name for layer in keras_vit.create_model(path).layers] == ["dense"]
    with pytest.raises(ValueError, match="Sequential, which keras-vit cannot rebuild with changes"):
        keras_vit.create_model(path, num_classes=3)


def test_class_names_given_are_kept_whatever_the_source(tmp_path):
    # A trained .keras file of 10 classes, rebuilt for 2 with their names (the README's
    # bare-fit snippet): the names given are the model's, as create_model's by name are.
    path = str(tmp_path / "digits.keras")
    small(num_classes=10, class_names=[str(k) for k in range(10)]).save(path)
    with pytest.warns(UserWarning, match="head/kernel keeps its fresh initial value"):
        model = keras_vit.create_model(path, num_classes=2, class_names=("cat", "dog"))
    assert model.class_names == ("cat", "dog") and model.output_shape == (None, 2)
    assert keras_vit.decode_predictions(np.array([[0.2, 0.8]]), class_names=model)[0][0][:2] == (1, "dog")
    with pytest.warns(UserWarning, match="head/kernel keeps its fresh initial value"):
        assert keras_vit.create_model(path, num_classes=3).class_names is None  # the file's 10 do not fit 3
    assert keras_vit.create_model(path, class_names=list("abcdefghij")).class_names == tuple("abcdefghij")
    with pytest.raises(ValueError, match="Expected 2 class names, one per classifier output; got 3"):
        keras_vit.create_model(path, num_classes=2, class_names=("cat", "dog", "bird"))


SAVED = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "saved_models")


# Files an earlier keras-vit wrote (tests/write_saved_models.py, committed as written): each
# variant's layers keep their weight paths and numerics across refactors of the layers.
@pytest.mark.parametrize("name", sorted(f[: -len(".keras")] for f in os.listdir(SAVED) if f.endswith(".keras")))
def test_a_keras_file_an_earlier_version_wrote_loads_and_gives_its_stored_outputs(name):
    model = keras_vit.load_model(os.path.join(SAVED, f"{name}.keras"))
    stored = np.load(os.path.join(SAVED, f"{name}.npz"))
    assert model.name == name
    # A few float32 ulps of the outputs' scale: a framework's release may sum in another order;
    # a misread weight, GELU form or norm epsilon moves the outputs more.
    assert_close_to_scale(to_numpy(model.predict_on_batch(stored["images"])), stored["outputs"], 3e-6)
