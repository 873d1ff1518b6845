"""Seeing inside a ViT (the paper's section 4.5): constructed cases with known answers,
the attention maps against timm's and HF's own, and the figures' recipe."""

import itertools

import keras
import numpy as np
import pytest
from helpers import TINY_ENCODER, images, randomize_torch, save_torch_state, to_numpy
from upstream import HF_CASES, SMALL_KERAS, SMALL_TIMM, hf_model, keras_for_hf, keras_hybrid

import keras_vit
from keras_vit import inspect

TINY = dict(patch_size=8, depth=2, num_classes=3, gelu_approximate=False, **TINY_ENCODER)


def mean_pairwise_distance(grid, stride):
    """The grid's mean distance between patch centres, pair by pair (self pairs included)."""
    cells = list(itertools.product(range(grid[0]), range(grid[1])))
    return np.mean([stride * np.hypot(a[0] - b[0], a[1] - b[1]) for a in cells for b in cells])


def uniform_attention(model):
    """Zero queries and keys: every attention row is uniform, whatever the input."""
    for block in model.layers_by_role["blocks"]:
        qkv = block.attention.qkv
        width = qkv.kernel.shape[0]
        kernel, bias = to_numpy(qkv.kernel).copy(), to_numpy(qkv.bias).copy()
        kernel[:, : 2 * width], bias[: 2 * width] = 0.0, 0.0
        qkv.kernel.assign(kernel)
        qkv.bias.assign(bias)
    return model


# --- constructed cases -------------------------------------------------------------------


@pytest.mark.parametrize("hybrid", [False, True], ids=["plain", "hybrid"])
def test_uniform_attention_distance_is_the_grids_mean_pairwise_distance(rng, hybrid):
    if hybrid:  # stride 8 = ResNet 8 x patch 1: the patch spacing is the total stride
        model = keras_hybrid((1, 1), 8, (24, 40), depth=2, num_classes=3, resnet_num_groups=4, **TINY_ENCODER)
    else:
        model = keras_vit.VisionTransformer(image_size=(24, 40), **TINY)
    uniform_attention(model)
    x = images(rng, (24, 40))
    maps = inspect.attention_maps(model, x)
    assert maps.shape == (2, 2, 2, 16, 16)
    np.testing.assert_allclose(maps, 1 / 16, atol=1e-6)
    distance = inspect.mean_attention_distance(model, x)
    assert distance.shape == (2, 2)
    np.testing.assert_allclose(distance, mean_pairwise_distance((3, 5), 8), rtol=1e-5)


def test_uniform_attention_rolls_out_to_the_known_mixture(rng):
    # Each block mixes 0.5 * uniform + 0.5 * identity; two blocks: 0.75 * uniform + 0.25 * identity.
    model = uniform_attention(keras_vit.VisionTransformer(image_size=(16, 24), **TINY))
    rollout = inspect.attention_rollout(model, images(rng, (16, 24)))
    assert rollout.shape == (2, 2, 3)
    np.testing.assert_allclose(rollout, 0.75 / 7, rtol=1e-5)  # the class token's row, 6 patches of 7 tokens


def test_self_attention_only_has_distance_zero_and_rolls_out_to_the_identity():
    eye = np.broadcast_to(np.eye(7), (3, 2, 4, 7, 7))  # 3 blocks, 2 images, 4 heads, 1 + 2x3 tokens
    np.testing.assert_array_equal(inspect.attention_distance(eye, (2, 3), 16), np.zeros((3, 4)))
    np.testing.assert_allclose(inspect.rollout(eye), np.broadcast_to(np.eye(7), (2, 7, 7)), atol=1e-12)
    for fusion in ("max", "min"):
        np.testing.assert_allclose(inspect.rollout(eye, head_fusion=fusion)[0], np.eye(7), atol=1e-12)
    # Attention to the neighbour on the right only: one stride, the last column wrapping to its row's start.
    shifted = np.zeros((1, 1, 1, 7, 7))
    shifted[..., 0, 0] = 1.0
    for cell in range(6):
        row, col = divmod(cell, 3)
        shifted[..., 1 + cell, 1 + row * 3 + (col + 1) % 3] = 1.0
    np.testing.assert_allclose(inspect.attention_distance(shifted, (2, 3), 10), [[(4 * 10 + 2 * 20) / 6]])


def test_discarding_drops_the_smallest_weights_but_none_to_the_class_token():
    attention = np.full((1, 1, 1, 3, 3), 0.1)
    attention[..., :, 0] = 0.05  # the smallest weights all go to the class token: kept
    attention[..., 2, 2] = 0.01
    kept = inspect.rollout(attention, discard_ratio=0.5)
    dropped = 0.5 * np.where(attention[0, 0, 0] == 0.01, 0.0, attention[0, 0, 0]) + 0.5 * np.eye(3)
    np.testing.assert_allclose(kept[0], dropped / dropped.sum(axis=-1, keepdims=True))


def test_position_embedding_similarity_is_one_with_itself_and_the_tables_cosine():
    model = keras_vit.VisionTransformer(image_size=(24, 32), **TINY)
    similarity = inspect.position_embedding_similarity(model)
    assert similarity.shape == (3, 4, 3, 4)
    flat = similarity.reshape(12, 12)
    np.testing.assert_allclose(np.diag(flat), 1.0, atol=1e-6)
    table = to_numpy(model.get_layer("position_embedding").embedding)[0, 1:]
    np.testing.assert_allclose(flat[2, 7], table[2] @ table[7] / np.linalg.norm(table[2]) / np.linalg.norm(table[7]),
                               atol=1e-6)  # fmt: skip
    fixed = keras_vit.VisionTransformer(image_size=(24, 32), position_embedding="sincos2d", **TINY)
    sincos = inspect.position_embedding_similarity(fixed).reshape(12, 12)
    np.testing.assert_allclose(np.diag(sincos), 1.0, atol=1e-6)
    assert sincos[0, 1] > sincos[0, 3]  # nearer patches are more alike


def test_embedding_filter_components_are_recovered(rng):
    model = keras_vit.VisionTransformer(image_size=16, **TINY)  # 32 filters of 8x8x3
    known = np.linalg.qr(rng.standard_normal((192, 4)))[0].T  # 4 orthonormal components
    scales = np.array([8.0, 4.0, 2.0, 1.0])  # distinct variances fix their order
    filters = (rng.standard_normal((32, 4)) * scales) @ known
    kernel = model.get_layer("patch_embedding").kernel
    kernel.assign(filters.T.reshape(8, 8, 3, 32).astype("float32"))
    components = inspect.embedding_filters(model, num_components=4)
    assert components.shape == (4, 8, 8, 3)
    overlap = np.abs(components.reshape(4, -1) @ known.T)  # |cosine| with each known component
    np.testing.assert_allclose(np.diag(overlap), 1.0, atol=0.05)


# --- against the peers --------------------------------------------------------------------


def test_attention_maps_equal_timms_explicit_attention_and_predict_stays_fused(timm, tmp_path, rng, monkeypatch):
    import torch

    peer = randomize_torch(timm.models.vision_transformer.VisionTransformer(img_size=(32, 48), **SMALL_TIMM).eval())
    path = save_torch_state(peer.state_dict(), str(tmp_path / "timm.safetensors"))
    model = keras_vit.VisionTransformer(image_size=(32, 48), **SMALL_KERAS)
    keras_vit.load_weights(model, path, source_grid=(4, 6))
    captured = []
    for block in peer.blocks:
        block.attn.fused_attn = False  # timm's explicit attention; its dropout sees the softmax weights
        block.attn.attn_drop.register_forward_hook(lambda module, inputs, output: captured.append(inputs[0].numpy()))
    x = images(rng, (32, 48))
    with torch.no_grad():
        peer(torch.from_numpy(x.transpose(0, 3, 1, 2)))
    ours = inspect.attention_maps(model, x)
    assert ours.shape == (3, 2, 2, 25, 25)
    np.testing.assert_allclose(ours, np.stack(captured), atol=1e-5, rtol=0)
    np.testing.assert_allclose(inspect.attention_maps(model, x, blocks=[-1])[0], captured[-1], atol=1e-5, rtol=0)
    explicit = []
    attention_class = keras_vit.layers.MultiHeadSelfAttention
    original = attention_class._explicit_attention
    monkeypatch.setattr(attention_class, "_explicit_attention", lambda *a: explicit.append(1) or original(*a))
    model.predict(x, verbose=0)
    # The model's own graph runs the form the one switch chooses (on this CPU-only suite:
    # fused on torch, written out on tensorflow and jax).
    assert bool(explicit) == (not keras_vit.layers.fused_attention.use_fused_attention())
    assert bool(explicit) == (keras.config.backend() in ("tensorflow", "jax"))
    explicit.clear()
    model.attention_model()(x)
    assert explicit  # (and the count would see the explicit one)


def test_attention_maps_equal_hf_output_attentions(tmp_path, rng):
    import torch
    import transformers

    config_kwargs, _ = HF_CASES["p8_classifier_bin"]
    _, config = hf_model(config_kwargs, tmp_path)
    peer = transformers.ViTForImageClassification.from_pretrained(str(tmp_path), attn_implementation="eager").eval()
    model = keras_for_hf(config)
    keras_vit.load_weights(model, str(tmp_path / "model.safetensors"))
    x = images(rng, config.image_size)
    with torch.no_grad():
        theirs = peer(torch.from_numpy(x.transpose(0, 3, 1, 2)), output_attentions=True).attentions
    np.testing.assert_allclose(inspect.attention_maps(model, x), np.stack([a.numpy() for a in theirs]),
                               atol=1e-5, rtol=0)  # fmt: skip


# --- bad input ----------------------------------------------------------------------------


def test_bad_input_is_a_clear_error(rng):
    model = keras_vit.VisionTransformer(image_size=16, **TINY)
    x = images(rng, 16)
    with pytest.raises(ValueError, match=r"block indices in -2..1 \(the model has 2 blocks\)"):
        inspect.attention_maps(model, x, blocks=[2])
    with pytest.raises(ValueError, match=r"Expected 16x16 images .*got shape \(2, 24, 24, 3\)"):
        inspect.attention_rollout(model, images(rng, 24))
    with pytest.raises(ValueError, match=r"Expected images of shape \(batch, height, width, 3\)"):
        inspect.mean_attention_distance(model, x[..., :1])
    with pytest.raises(ValueError, match="Expected a keras_vit.VisionTransformer.*got a Sequential"):
        inspect.attention_maps(keras.Sequential([keras.layers.Dense(2)]), x)
    with pytest.raises(ValueError, match="head_fusion must be one of"):
        inspect.rollout(inspect.attention_maps(model, x), head_fusion="median")
    with pytest.raises(ValueError, match=r"num_components must be in 1..32"):
        inspect.embedding_filters(model, num_components=40)
    hybrid = keras_hybrid((1,), 8, 16, depth=1, num_classes=3, resnet_num_groups=4, **TINY_ENCODER)
    with pytest.raises(ValueError, match="filters ResNet features, not pixels"):
        inspect.embedding_filters(hybrid)


def test_raw_images_are_pre_processed_as_classify_does(rng, tmp_path):
    from PIL import Image

    from keras_vit.layers import ImagePreprocessing

    preprocessing = ImagePreprocessing.from_normalization("imagenet", 16)
    model = keras_vit.VisionTransformer(image_size=16, preprocessing=preprocessing, **TINY)
    raw = rng.integers(0, 256, (2, 16, 16, 3)).astype("uint8")
    pre = to_numpy(model.preprocessing(raw))
    expected = inspect.attention_rollout(model, pre)
    np.testing.assert_allclose(inspect.attention_rollout(model, raw), expected, rtol=0, atol=1e-7)
    np.testing.assert_allclose(inspect.attention_maps(model, raw), inspect.attention_maps(model, pre), rtol=0,
                               atol=1e-7)  # fmt: skip
    np.testing.assert_allclose(inspect.mean_attention_distance(model, raw),
                               inspect.mean_attention_distance(model, pre), rtol=0, atol=1e-5)  # fmt: skip
    # Files and PIL images, as classify takes them (one of another size: resized first).
    Image.fromarray(raw[0]).save(tmp_path / "first.png")
    large = np.asarray(Image.fromarray(raw[1]).resize((24, 24)))
    listed = inspect.attention_rollout(model, [tmp_path / "first.png", Image.fromarray(large)])
    resized = to_numpy(model.preprocessing(large[None]))
    np.testing.assert_allclose(listed, inspect.attention_rollout(model, np.concatenate([pre[:1], resized])),
                               rtol=0, atol=1e-7)  # fmt: skip
    # Raw pixels as floats: refused, unless said to be raw.
    with pytest.raises(ValueError, match=r"Expected images pre-processed for the model \(floats in -2.118..2.64.*"
                                         r"got floats in 0..25[0-9].*preprocessed=False"):  # fmt: skip
        inspect.attention_rollout(model, raw.astype("float32"))
    np.testing.assert_allclose(inspect.attention_rollout(model, raw.astype("float32"), preprocessed=False), expected,
                               rtol=0, atol=1e-7)  # fmt: skip
    bare = keras_vit.VisionTransformer(image_size=16, **TINY)  # no pre-processing to make its input
    with pytest.raises(ValueError, match=r"has no pre-processing \(model.preprocessing is None\)"):
        inspect.attention_maps(bare, raw)


# --- the figures' recipe ------------------------------------------------------------------


def run_recipe(*argv):
    from keras_vit.commands import inspect_model

    return inspect_model.main([str(a) for a in argv])


def read_csv(path):
    import csv

    with open(path) as f:
        return list(csv.reader(f))


def check_png(path, min_side=100):
    from PIL import Image

    with open(path, "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n", path
    with Image.open(path) as picture:
        assert min(picture.size) >= min_side and picture.mode in ("RGB", "RGBA"), (path, picture.size)
        assert len(np.unique(np.asarray(picture.convert("L")))) > 10, path  # drawn on, not blank


@pytest.fixture(scope="module")
def tiny_model_file(tmp_path_factory):
    from keras_vit.layers import ImagePreprocessing

    model = keras_vit.VisionTransformer(image_size=16, patch_size=4, depth=2, num_classes=10, gelu_approximate=False,
                                        preprocessing=ImagePreprocessing.from_normalization("vit", 16),
                                        **TINY_ENCODER)  # fmt: skip
    path = str(tmp_path_factory.mktemp("run") / "model.keras")
    model.save(path)
    return path


def test_recipe_writes_every_figure_and_its_numbers_beside_the_model(tiny_model_file):
    import os

    written = run_recipe(tiny_model_file, "--num_images", 3)
    folder = os.path.join(os.path.dirname(tiny_model_file), "figures")
    assert sorted(os.listdir(folder)) == sorted(os.path.basename(p) for p in written.values())
    assert len(written) == 8
    for path in written.values():
        if path.endswith(".png"):
            check_png(path)
    rows = read_csv(os.path.join(folder, "attention_distance.csv"))
    assert rows[0] == ["block", "head", "mean_distance_pixels"] and len(rows) == 1 + 2 * 2
    assert all(0 < float(r[2]) < 16 * np.sqrt(2) for r in rows[1:])
    # Counted from 1, as the plots count them: blocks 1 and 2, heads 1 and 2.
    assert sorted({(r[0], r[1]) for r in rows[1:]}) == [("1", "1"), ("1", "2"), ("2", "1"), ("2", "2")]
    rollout = read_csv(os.path.join(folder, "attention_rollout.csv"))
    assert rollout[0] == ["image", "class", "predicted", "probability", "row", "column", "rollout"]
    assert len(rollout) == 1 + 3 * 4 * 4
    # The digits of three classes in turn, each with the model's top class (no names: its index).
    shown = {r[0]: r[1:4] for r in rollout[1:]}
    assert sorted(shown) == ["1", "2", "3"] and [shown[k][0] for k in "123"] == ["0", "1", "2"]
    assert all(p in {str(k) for k in range(10)} and 0.1 <= float(q) <= 1 for _, p, q in shown.values())
    assert {(r[4], r[5]) for r in rollout[1:]} == {(str(i), str(j)) for i in range(1, 5) for j in range(1, 5)}
    similarity = read_csv(os.path.join(folder, "position_embedding_similarity.csv"))
    assert len(similarity) == 1 + 16 * 16 and {r[0] for r in similarity[1:]} == {"1", "2", "3", "4"}
    filters = read_csv(os.path.join(folder, "embedding_filters.csv"))
    assert len(filters) == 1 + 28 and [r[0] for r in filters[1:3]] == ["1", "2"]
    with pytest.raises(SystemExit) as exit_info:  # there already: refused, left as it was
        run_recipe(tiny_model_file, "--num_images", 3)
    assert exit_info.value.code == 2
    assert run_recipe(tiny_model_file, "--num_images", 3, "--overwrite") == written


def test_recipe_on_a_folder_of_photos_and_a_hybrid(tmp_path):
    import os

    from PIL import Image
    from skimage import data

    photos = tmp_path / "photos"
    photos.mkdir()
    for name in ("astronaut", "chelsea"):
        Image.fromarray(getattr(data, name)()).save(photos / f"{name}.png")
    model = keras_hybrid((1,), 8, 32, depth=1, num_classes=3, resnet_num_groups=4, **TINY_ENCODER)  # stride 4
    path = str(tmp_path / "hybrid.keras")
    model.save(path)
    written = run_recipe(path, "--images", photos, "--output", tmp_path / "figures")
    assert sorted(os.path.basename(p) for p in written.values()) == sorted(
        f"{name}.{ext}"
        for name in ("attention_rollout", "attention_distance", "position_embedding_similarity")
        for ext in ("png", "csv")
    )  # a hybrid has no pixel filters
    assert len(read_csv(tmp_path / "figures" / "attention_rollout.csv")) == 1 + 2 * 8 * 8
    check_png(written["attention_rollout.png"])


def test_recipe_shows_each_class_in_turn_with_the_models_prediction(tmp_path):
    from PIL import Image

    from keras_vit.commands import inspect_model
    from keras_vit.layers import ImagePreprocessing

    photos = tmp_path / "photos"
    for name, shade in (("cat", 40), ("dog", 200)):
        (photos / name).mkdir(parents=True)
        for i in range(3):  # sorted by path, the first three are all cats
            Image.new("RGB", (20, 20), (shade, i * 30, 0)).save(photos / name / f"{i}.png")
    model = keras_vit.VisionTransformer(image_size=16, patch_size=4, depth=2, num_classes=2, pooling="gap",
                                        class_names=["cat", "dog"], gelu_approximate=False,
                                        preprocessing=ImagePreprocessing.from_normalization("vit", 16),
                                        **TINY_ENCODER)  # fmt: skip
    path = str(tmp_path / "model.keras")
    model.save(path)
    raw, labels = inspect_model.pick_images(str(photos), 4)
    assert labels == ["cat", "dog", "cat", "dog"]
    written = run_recipe(path, "--images", photos, "--num_images", 4)
    rows = read_csv(written["attention_rollout.csv"])
    shown = {r[0]: r[1:4] for r in rows[1:]}
    probabilities = model.classify(raw)
    for k, (label, predicted, probability) in sorted(shown.items()):
        i = int(k) - 1
        assert label == labels[i] and predicted == ("cat", "dog")[probabilities[i].argmax()]
        np.testing.assert_allclose(float(probability), probabilities[i].max(), atol=1e-3)
    check_png(written["attention_rollout.png"])


@pytest.mark.parametrize("kind", ["not_a_vit", "not_a_model", "no_images"])
def test_recipe_bad_input_writes_nothing(tmp_path, tiny_model_file, capsys, kind):
    import os

    if kind == "not_a_vit":
        other = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)])
        model = str(tmp_path / "dense.keras")
        other.save(model)
        argv, message = [model], "Expected a keras_vit.VisionTransformer"
    elif kind == "not_a_model":
        model = tmp_path / "notes.keras"
        model.write_text("not a model")
        argv, message = [model], "is not a model file"
    else:
        (tmp_path / "empty").mkdir()
        argv, message = [tiny_model_file, "--images", tmp_path / "empty"], "no images"
    with pytest.raises(SystemExit) as exit_info:
        run_recipe(*argv, "--output", tmp_path / "figures")
    assert exit_info.value.code == 2 and message in capsys.readouterr().err
    assert not os.path.exists(tmp_path / "figures")
