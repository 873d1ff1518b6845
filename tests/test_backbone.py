"""A ViT as a backbone: intermediate features against timm's ``forward_intermediates``,
a dense head trained on them, and the model at another (non-square) input size."""

import keras
import numpy as np
import pytest
from helpers import (
    assert_close_to_scale,
    images,
    log_softmax,
    not_on,
    randomize_keras,
    randomize_torch,
    save_torch_state,
    to_numpy,
    torch_logits,
)
from upstream import SMALL_KERAS, SMALL_TIMM, keras_hybrid, timm_hybrid

import keras_vit

TOL = 1e-4
SIZE = (32, 48)  # a 4x6 patch grid: height and width swapped would not go unnoticed


def timm_pair(timm, tmp_path, size=SIZE):
    peer = randomize_torch(timm.models.vision_transformer.VisionTransformer(img_size=size, **SMALL_TIMM).eval())
    path = save_torch_state(peer.state_dict(), str(tmp_path / "timm.safetensors"))
    model = keras_vit.VisionTransformer(image_size=size, **SMALL_KERAS)
    keras_vit.load_weights(model, path, source_grid=(size[0] // 8, size[1] // 8))
    return peer, model, path


def timm_intermediates(peer, x, indices, norm, output_fmt="NCHW"):
    import torch

    with torch.no_grad():
        out = peer.forward_intermediates(
            torch.from_numpy(x.transpose(0, 3, 1, 2)),
            indices=indices,
            norm=norm,
            output_fmt=output_fmt,
            intermediates_only=True,
        )
    return [o.numpy() for o in out]


@pytest.mark.parametrize("norm", [False, True])
@pytest.mark.parametrize("blocks", [None, 2, [0, -1]], ids=["all", "last_2", "first_and_last"])
def test_intermediate_feature_maps_match_timm(timm, tmp_path, rng, blocks, norm):
    peer, model, _ = timm_pair(timm, tmp_path)
    x = images(rng, SIZE)
    features = model.intermediate_model(blocks=blocks, norm=norm)(x)
    expected = timm_intermediates(peer, x, blocks, norm)
    assert len(features) == len(expected)
    for (name, ours), theirs in zip(sorted(features.items(), key=lambda kv: int(kv[0].split("_")[1])), expected):
        assert tuple(ours.shape) == (2, 4, 6, 32), name
        np.testing.assert_allclose(to_numpy(ours), theirs.transpose(0, 2, 3, 1), atol=TOL, rtol=0)


def test_intermediate_tokens_match_timm_and_keep_the_class_token_on_request(timm, tmp_path, rng):
    peer, model, _ = timm_pair(timm, tmp_path)
    x = images(rng, SIZE)
    tokens = model.intermediate_model(blocks=[1], output_format="tokens")(x)["block_1"]
    (expected,) = timm_intermediates(peer, x, [1], False, output_fmt="NLC")
    np.testing.assert_allclose(to_numpy(tokens), expected, atol=TOL, rtol=0)
    with_prefix = model.intermediate_model(blocks=[1], output_format="tokens", include_prefix=True)(x)["block_1"]
    assert tuple(with_prefix.shape) == (2, 1 + 24, 32)
    np.testing.assert_array_equal(to_numpy(with_prefix)[:, 1:], to_numpy(tokens))


def test_hybrid_intermediates_and_stem_stages_match_timm(timm, tmp_path, rng):
    import torch

    peer = randomize_torch(
        timm_hybrid(timm, (1, 1), 32, (32, 48), embed_dim=32, depth=2, num_heads=2, mlp_ratio=2.0, num_classes=3)
    )
    path = save_torch_state(peer.state_dict(), str(tmp_path / "hybrid.pth"))
    model = keras_hybrid((1, 1), 32, (32, 48), hidden_size=32, depth=2, num_heads=2, mlp_dim=64, num_classes=3,
                         gelu_approximate=False)  # fmt: skip
    keras_vit.load_weights(model, path, source_grid=(4, 6))
    x = images(rng, (32, 48))
    features = model.intermediate_model(blocks=[-1], norm=True, stem=True).predict_on_batch(x)
    (expected,) = timm_intermediates(peer, x, [-1], True)
    np.testing.assert_allclose(to_numpy(features["block_1"]), expected.transpose(0, 2, 3, 1), atol=TOL, rtol=0)
    backbone = peer.patch_embed.backbone
    with torch.no_grad():
        y = backbone.stem(torch.from_numpy(x.transpose(0, 3, 1, 2)))
        for j, stage in enumerate(backbone.stages):
            y = stage(y)
            ours = to_numpy(features[f"stem_stage_{j}"])
            np.testing.assert_allclose(ours, y.numpy().transpose(0, 2, 3, 1), atol=TOL, rtol=0)


def test_bad_block_choices_are_clear_errors():
    model = keras_vit.VisionTransformer(image_size=16, **SMALL_KERAS)
    with pytest.raises(ValueError, match=r"indices in -3..2 \(the model has 3 blocks\)"):
        model.intermediate_model(blocks=[3])
    with pytest.raises(ValueError, match="count of last blocks in 1..3"):
        model.intermediate_model(blocks=4)
    with pytest.raises(ValueError, match="output_format"):
        model.intermediate_model(output_format="NCHW")
    with pytest.raises(ValueError, match="needs a hybrid"):
        model.intermediate_model(stem=True)


def test_a_dense_head_on_the_backbone_trains_with_fit(tmp_path):
    vit = keras_vit.VisionTransformer(image_size=SIZE, **SMALL_KERAS)
    backbone = vit.intermediate_model(blocks=[-2, -1], norm=True)
    images_in = keras.Input((*SIZE, 3))
    features = backbone(images_in)
    x = keras.layers.Concatenate()([features["block_1"], features["block_2"]])
    x = keras.layers.Conv2D(4, 1, name="classes")(x)  # per-patch logits: a segmentation head
    x = keras.layers.UpSampling2D(8, interpolation="bilinear")(x)
    segmenter = keras.Model(images_in, x)
    segmenter.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    rng = np.random.default_rng(0)
    pixels = rng.uniform(-1, 1, (8, *SIZE, 3)).astype("float32")
    masks = (pixels[..., 0] > 0).astype("int32")  # a learnable per-pixel target
    before = to_numpy(vit.get_layer("block_0").mlp.fc1.kernel).copy()
    history = segmenter.fit(pixels, masks, epochs=3, batch_size=4, verbose=0)
    assert history.history["loss"][-1] < history.history["loss"][0]
    assert not np.array_equal(to_numpy(vit.get_layer("block_0").mlp.fc1.kernel), before)  # fine-tuned too
    path = str(tmp_path / "segmenter.keras")
    segmenter.save(path)
    np.testing.assert_allclose(to_numpy(keras.saving.load_model(path)(pixels[:2])), to_numpy(segmenter(pixels[:2])),
                               atol=1e-5)  # fmt: skip


# --- any resolution -------------------------------------------------------------------------


@pytest.mark.parametrize("new_size", [(32, 64), (64, 32)], ids=["wider", "taller"])
def test_resize_matches_timm_resampling_and_a_timm_model_built_at_that_size(timm, tmp_path, rng, new_size):
    from timm.layers import resample_abs_pos_embed

    peer, model, path = timm_pair(timm, tmp_path, size=(32, 32))
    resized = keras_vit.resize(model, new_size)
    grid = (new_size[0] // 8, new_size[1] // 8)
    expected = resample_abs_pos_embed(peer.pos_embed.detach(), new_size=grid, num_prefix_tokens=1).numpy()
    np.testing.assert_allclose(to_numpy(resized.get_layer("position_embedding").embedding), expected, atol=1e-6)
    # timm's own model at that size, from the same checkpoint (its loader resamples the same way).
    peer_at_size = timm.models.vision_transformer.VisionTransformer(img_size=new_size, **SMALL_TIMM).eval()
    state = timm.models.vision_transformer.checkpoint_filter_fn(peer.state_dict(), peer_at_size)
    peer_at_size.load_state_dict(state)
    x = images(rng, new_size)
    np.testing.assert_allclose(to_numpy(resized(x)), torch_logits(peer_at_size, x), atol=TOL, rtol=0)
    np.testing.assert_array_equal(to_numpy(resized.get_layer("head").kernel), to_numpy(model.get_layer("head").kernel))


def test_a_keras_file_loads_into_the_transposed_grid_resampled(tmp_path):
    wide = keras_vit.VisionTransformer(image_size=(48, 80), **SMALL_KERAS)  # a 6x10 grid
    path = str(tmp_path / "wide.keras")
    wide.save(path)
    tall = keras_vit.VisionTransformer(image_size=(80, 48), **SMALL_KERAS)  # 10x6: the same 60 tokens
    report = keras_vit.load_weights(tall, path)
    assert report.source_grid == (6, 10) and not report.grid_assumed
    assert "position_embedding/embedding" in report.resampled
    expected = keras_vit.resize(wide, (80, 48)).get_layer("position_embedding").embedding
    np.testing.assert_allclose(to_numpy(tall.get_layer("position_embedding").embedding), to_numpy(expected), atol=1e-6)


def test_a_file_without_a_grid_says_which_grid_it_assumed(timm, tmp_path):
    peer = timm.models.vision_transformer.VisionTransformer(img_size=48, **SMALL_TIMM).eval()  # 6x6 = 36 tokens
    path = save_torch_state(peer.state_dict(), str(tmp_path / "square.pth"))
    same_count = keras_vit.VisionTransformer(image_size=(32, 72), **SMALL_KERAS)  # 4x9 = 36 tokens: its own grid
    with pytest.warns(UserWarning, match=r"taken as a \(4, 9\) grid for the model's \(4, 9\)"):
        report = keras_vit.load_weights(same_count, path)
    assert report.grid_assumed and report.source_grid == (4, 9) and not report.resampled
    other_count = keras_vit.VisionTransformer(image_size=(32, 64), **SMALL_KERAS)  # 4x8: a square 6x6 is assumed
    with pytest.warns(UserWarning, match=r"taken as a \(6, 6\) grid for the model's \(4, 8\)"):
        report = keras_vit.load_weights(other_count, path)
    assert report.grid_assumed and report.source_grid == (6, 6) and report.resampled
    report = keras_vit.load_weights(other_count, path, source_grid=(4, 9))  # the caller knows better
    assert report.source_grid == (4, 9) and not report.grid_assumed
    with pytest.raises(ValueError, match="not divisible"):
        keras_vit.resize(other_count, (30, 72))


# --- dynamic image size ---------------------------------------------------------------------

# Sizes for a model stored at 32x32 (a 4x4 grid): smaller and wider, taller, larger and wider.
DYNAMIC_SIZES = [(16, 40), (48, 32), (56, 72)]


def test_dynamic_image_size_matches_timm_at_three_sizes(timm, tmp_path, rng):
    peer = timm.models.vision_transformer.VisionTransformer(img_size=32, dynamic_img_size=True, **SMALL_TIMM)
    peer = randomize_torch(peer.eval())
    path = save_torch_state(peer.state_dict(), str(tmp_path / "timm.safetensors"))
    model = keras_vit.VisionTransformer(image_size=32, dynamic_image_size=True, **SMALL_KERAS)
    keras_vit.load_weights(model, path)
    assert model.input_shape == (None, None, None, 3)
    for size in DYNAMIC_SIZES:
        x = images(rng, size)
        np.testing.assert_allclose(model.predict(x, verbose=0), torch_logits(peer, x), atol=TOL, rtol=0, err_msg=size)
    x = images(rng, (48, 32))
    features = model.intermediate_model(blocks=[0, -1], norm=True)(x)
    for ours, theirs in zip((features["block_0"], features["block_2"]), timm_intermediates(peer, x, [0, -1], True)):
        assert tuple(ours.shape) == (2, 6, 4, 32)
        np.testing.assert_allclose(to_numpy(ours), theirs.transpose(0, 2, 3, 1), atol=TOL, rtol=0)


def test_dynamic_hybrid_matches_timm(timm, tmp_path, rng):
    kwargs = dict(depth=1, num_classes=3, dynamic_img_size=True)
    peer = randomize_torch(timm_hybrid(timm, (1, 1), 32, 32, embed_dim=32, num_heads=2, mlp_ratio=2.0, **kwargs))
    path = save_torch_state(peer.state_dict(), str(tmp_path / "hybrid.pth"))
    model = keras_hybrid((1, 1), 32, 32, hidden_size=32, depth=1, num_heads=2, mlp_dim=64, num_classes=3,
                         gelu_approximate=False, dynamic_image_size=True)  # fmt: skip
    keras_vit.load_weights(model, path)
    for size in [(24, 40), (48, 32)]:  # stride 8: 3x5 and 6x4 grids from the stored 4x4
        x = images(rng, size)
        np.testing.assert_allclose(model.predict(x, verbose=0), torch_logits(peer.eval(), x), atol=TOL, rtol=0)


@pytest.mark.parametrize("interpolation", ["bicubic", "bilinear"])
def test_position_table_resampled_in_the_graph_as_timm(timm, rng, interpolation):
    import torch
    from timm.layers import resample_abs_pos_embed

    layer = keras_vit.layers.PositionEmbedding((4, 6), num_prefix_tokens=1, interpolation=interpolation)
    layer.build((None, 25, 8))
    table = rng.standard_normal((1, 25, 8)).astype("float32")
    layer.embedding.assign(table)
    for grid in [(2, 9), (7, 3), (4, 6)]:
        expected = resample_abs_pos_embed(
            torch.from_numpy(table), new_size=grid, old_size=(4, 6), interpolation=interpolation, antialias=True
        ).numpy()
        as_ints = layer.table(grid)  # sizes the graph knows
        as_tensors = layer.table(tuple(keras.ops.convert_to_tensor(side, "int32") for side in grid))
        for ours in (as_ints, as_tensors):
            np.testing.assert_allclose(to_numpy(ours), expected, atol=1e-5, rtol=0, err_msg=grid)


def test_dynamic_model_compiles_once_per_size_and_equals_the_resized_model(rng, monkeypatch):
    # Informative weights: with the initial zero head every size's logits are 0 and equal.
    model = randomize_keras(keras_vit.VisionTransformer(image_size=32, dynamic_image_size=True, **SMALL_KERAS))
    sizes = [(32, 32), (16, 48), (32, 32), (16, 48), (48, 24), (16, 48), (48, 24)]
    inputs = {size: images(rng, size) for size in sizes}
    expected = {size: to_numpy(keras_vit.resize(model, size)(x)) for size, x in inputs.items()}
    traces = []
    call = keras_vit.layers.PositionEmbedding.call

    def counted(self, tokens, patch_map=None):  # Python runs once per trace in a compiled graph
        traces.append(tuple(tokens.shape))
        return call(self, tokens, patch_map)

    monkeypatch.setattr(keras_vit.layers.PositionEmbedding, "call", counted)
    for i, size in enumerate(sizes):
        assert_close_to_scale(model.predict(inputs[size], verbose=0), expected[size], 1e-5, err_msg=size)
        if keras.backend.backend() == "jax":  # one compiled function per input shape
            assert len(traces) == len(set(sizes[: i + 1])), (size, traces)
        if keras.backend.backend() == "tensorflow":  # one per size at most (it relaxes to any size)
            assert len(traces) <= len(set(sizes[: i + 1])), (size, traces)
    if keras.backend.backend() == "tensorflow":
        assert traces[-1][1] is None  # the relaxed graph: the sizes computed in the graph


def test_dynamic_model_trains_on_batches_of_two_sizes_and_reloads(tmp_path):
    model = keras_vit.VisionTransformer(image_size=32, dynamic_image_size=True, **SMALL_KERAS)
    rng = np.random.default_rng(0)
    batches = []
    for size in [(32, 32), (16, 48)]:
        x = rng.uniform(-1, 1, (8, *size, 3)).astype("float32")
        batches.append((x, (x[..., 0].mean(axis=(1, 2)) > 0).astype("int32")))  # a learnable target

    def cycle():
        while True:
            yield from batches

    model.compile(keras.optimizers.Adam(1e-3), keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    before = to_numpy(model.get_layer("position_embedding").embedding).copy()
    history = model.fit(cycle(), steps_per_epoch=2, epochs=4, shuffle=False, verbose=0)
    assert history.history["loss"][-1] < history.history["loss"][0]
    assert not np.allclose(to_numpy(model.get_layer("position_embedding").embedding), before)  # trained through
    path = str(tmp_path / "dynamic.keras")
    model.save(path)
    loaded = keras.saving.load_model(path)
    assert loaded.spec.dynamic_image_size
    x = batches[1][0][:2]
    np.testing.assert_allclose(to_numpy(loaded(x)), to_numpy(model(x)), atol=1e-5)


@not_on("jax", "from JAX as from PyTorch, a TensorFlow child process converts the model's .keras file")
def test_dynamic_savedmodel_serves_two_sizes(tmp_path, rng):
    from keras_vit.export import export_model
    from keras_vit.export.runtime import load_exported

    model = randomize_keras(keras_vit.VisionTransformer(image_size=32, dynamic_image_size=True, **SMALL_KERAS))
    result = export_model(model, str(tmp_path / "export"), formats="savedmodel")
    serve = load_exported(result.paths["savedmodel"], signature="serving_preprocessed")
    for size in [(32, 32), (16, 48)]:
        x = images(rng, size)
        served = serve(x)["probabilities"]
        # Log-probabilities: every class's score, not only how sure the top one is.
        assert_close_to_scale(np.log(served), log_softmax(to_numpy(model(x))), 1e-5, err_msg=size)
    with pytest.raises(Exception, match=r"positive multiples of 8 pixels \(one patch of this model\)"):
        serve(images(rng, (20, 32)))


def test_dynamic_images_the_model_cannot_take_are_clear_errors():
    model = keras_vit.VisionTransformer(image_size=32, dynamic_image_size=True, **SMALL_KERAS)
    with pytest.raises(ValueError, match=r"image height 4 is smaller than one 8-pixel patch"):
        model(np.zeros((1, 4, 32, 3), "float32"))
    with pytest.raises(ValueError, match=r"image width 36 is not a multiple of one 8-pixel patch"):
        model(np.zeros((1, 32, 36, 3), "float32"))
    hybrid = keras_hybrid((1, 1), 8, 32, hidden_size=32, depth=1, num_heads=2, mlp_dim=64, resnet_num_groups=4,
                          dynamic_image_size=True)  # fmt: skip
    with pytest.raises(ValueError, match=r"smaller than one 8-pixel patch \(ResNet stride x patch size\)"):
        hybrid(np.zeros((1, 32, 4, 3), "float32"))
    fixed = keras_vit.VisionTransformer(image_size=32, **SMALL_KERAS)
    with pytest.raises(ValueError, match="expected shape=.*32, 32, 3"):
        fixed(np.zeros((1, 32, 48, 3), "float32"))
