"""Named models: configs, parameter counts against timm, options, errors, training."""

import re

import keras
import numpy as np
import pytest
from helpers import assert_informative, once_on, to_numpy

import keras_vit
from keras_vit.inspect import count_parameters

# keras-vit name -> timm name, for every size/patch pair that timm registers.
TIMM_NAMES = {
    "vit_ti16": "vit_tiny_patch16_224",
    "vit_s16": "vit_small_patch16_224",
    "vit_s32": "vit_small_patch32_224",
    "vit_s8": "vit_small_patch8_224",
    "vit_b8": "vit_base_patch8_224",
    "vit_b16": "vit_base_patch16_224",
    "vit_b32": "vit_base_patch32_224",
    "vit_l16": "vit_large_patch16_224",
    "vit_l32": "vit_large_patch32_224",
    "vit_l14": "vit_large_patch14_224",
    "vit_h14": "vit_huge_patch14_224",
}


def test_list_models_covers_every_size_and_patch():
    names = keras_vit.list_models("vit_*")
    assert len([n for n in names if "_patch" not in n]) == 5 * 4  # timm's family names have one
    for size in ("ti", "s", "b", "l", "h"):
        for patch in (8, 14, 16, 32):
            assert f"vit_{size}{patch}" in names


@once_on("torch", "the count comes from the spec, the peer is timm's: no backend's code is in it")
@pytest.mark.parametrize("name", sorted(TIMM_NAMES))
def test_parameter_count_matches_timm(timm, name):
    import torch

    with torch.device("meta"):
        peer = timm.create_model(TIMM_NAMES[name], pretrained=False, num_classes=1000)
    expected = sum(p.numel() for p in peer.parameters())
    assert count_parameters(name) == expected


def test_parameter_counts_of_the_paper():
    assert count_parameters("vit_b16") == 86_567_656
    assert count_parameters("vit_l16") == 304_326_632
    assert count_parameters("vit_h14") == 632_045_800


@pytest.mark.parametrize("name", ["vit_ti16", "vit_s32", "r26_vit_s32"])
def test_extrapolated_count_equals_full_build(name):
    assert count_parameters(name) == keras_vit.create_model(name).count_params()


def test_any_image_size_divisible_by_the_patch(rng):
    model = keras_vit.create_model("vit_ti16", image_size=(48, 80), num_classes=3, depth=1)
    assert model.get_layer("position_embedding").grid_size == (3, 5)
    assert to_numpy(model(rng.random((2, 48, 80, 3), dtype="float32"))).shape == (2, 3)


def test_features_and_tokens_without_top(rng):
    x = rng.random((2, 32, 32, 3), dtype="float32")
    pooled = keras_vit.create_model("vit_ti16", image_size=32, include_top=False, depth=1)
    assert pooled.output_shape == (None, 192)
    tokens = keras_vit.create_model("vit_ti16", image_size=32, include_top=False, pooling=None, depth=1)
    assert to_numpy(tokens(x)).shape == (2, 5, 192)
    gap = keras_vit.create_model("vit_ti16", image_size=32, include_top=False, pooling="gap", depth=1)
    assert not any(layer.name == "class_token" for layer in gap.layers)


def test_representation_layer_is_dense_tanh(rng):
    model = keras_vit.create_model(
        "vit_ti16", image_size=32, num_classes=4, depth=1, representation_size=24, include_top=False
    )
    out = to_numpy(model(rng.random((2, 32, 32, 3), dtype="float32")))
    assert out.shape == (2, 24) and np.abs(out).max() <= 1.0


def test_zero_initialised_head_outputs_zeros(rng):
    model = keras_vit.create_model("vit_ti16", image_size=32, num_classes=4, depth=1, head_zero_init=True)
    assert np.all(to_numpy(model(rng.random((1, 32, 32, 3), dtype="float32"))) == 0)
    model = keras_vit.create_model("vit_ti16", image_size=32, num_classes=4, depth=1, head_zero_init=False)
    assert np.any(to_numpy(model(rng.random((1, 32, 32, 3), dtype="float32"))) != 0)


def test_attention_model_returns_every_block(rng):
    model = keras_vit.create_model("vit_ti16", image_size=32, num_classes=4, depth=3, head_zero_init=False)
    x = rng.random((2, 32, 32, 3), dtype="float32")
    maps = [to_numpy(m) for m in model.attention_model()(x)]
    assert len(maps) == 3 and maps[0].shape == (2, 3, 5, 5)
    np.testing.assert_allclose(maps[1].sum(-1), 1.0, atol=1e-5)
    # The shared weights are the model's: changing the model changes the maps.
    block = model.get_layer("block_0")
    block.attention.qkv.kernel.assign(block.attention.qkv.kernel * 3.0)
    assert not np.allclose(to_numpy(model.attention_model()(x)[0]), maps[0])


def _reference_attention(layer, x, causal=False):
    """Softmax(Q K^T / sqrt(d)) V with the layer's weights, in numpy (float64 products);
    ``causal``: each token's logits of the tokens after it at minus infinity."""
    from keras_vit.export.verify import softmax

    batch, length, width = x.shape
    heads, dim = layer.num_heads, width // layer.num_heads
    qkv = x.astype("float64") @ to_numpy(layer.qkv.kernel) + to_numpy(layer.qkv.bias)
    q, k, v = qkv.reshape(batch, length, 3, heads, dim).transpose(2, 0, 3, 1, 4)
    later = np.triu(np.ones((length, length), bool), k=1) if causal else np.zeros((length, length), bool)
    weights = softmax(np.where(later, -np.inf, q @ k.transpose(0, 1, 3, 2) / np.sqrt(dim)))
    out = (weights @ v).transpose(0, 2, 1, 3).reshape(batch, length, width)
    return out @ to_numpy(layer.out.kernel) + to_numpy(layer.out.bias), weights


@pytest.mark.parametrize("policy", ["float32", "mixed_bfloat16"])
@pytest.mark.parametrize("head_dim", [16, 20])  # a power-of-two scale (1/4), and one that is not
@pytest.mark.parametrize("fused", [True, False])
@pytest.mark.parametrize("kind", ["plain", "causal"])
def test_fused_and_explicit_attention_equal_the_formula(rng, policy, head_dim, fused, kind):
    # Both forms, forced on every backend through the one switch (the fused op, and the
    # written-out one that also returns weights), and in bfloat16 both places the scale can go;
    # the causal kind (CLIP's text tower) with the later tokens masked.
    from keras_vit.layers.attention import attention_layer
    from keras_vit.layers.fused_attention import set_fused_attention

    layer = attention_layer(kind, num_heads=2, dtype=policy)
    x = rng.standard_normal((2, 9, 2 * head_dim)).astype("float32")
    layer.build(x.shape)
    layer.qkv.bias.assign(rng.standard_normal(layer.qkv.bias.shape).astype("float32"))
    want, want_weights = _reference_attention(layer, x, causal=kind == "causal")
    tolerance = 1e-5 if policy == "float32" else 0.05
    set_fused_attention(fused)
    try:
        got = to_numpy(layer(x)).astype("float64")
        explicit, weights = layer(x, return_attention_scores=True)
    finally:
        set_fused_attention(None)
    np.testing.assert_allclose(got, want, atol=tolerance * np.abs(want).max())
    np.testing.assert_allclose(to_numpy(explicit).astype("float64"), want, atol=tolerance * np.abs(want).max())
    np.testing.assert_allclose(to_numpy(weights).astype("float64"), want_weights, atol=tolerance / 5)


@pytest.mark.parametrize("setting, fused", [("0", False), ("1", True), ("auto", None), ("", None)])
def test_one_switch_chooses_the_attention_form(monkeypatch, setting, fused):
    # KERAS_VIT_FUSED_ATTN forces either form; set_fused_attention wins over it; the weights,
    # when asked for, always come from the written-out form; a wrong value is a clear error.
    from keras_vit.layers import fused_attention as attention

    default = keras.backend.backend() == "torch" or (
        keras.backend.backend() == "jax" and attention._jax_platform() != "cpu"
    )
    monkeypatch.setenv(attention.FUSED_ATTENTION_ENV, setting)
    assert attention.use_fused_attention() == (default if fused is None else fused)
    assert attention.use_fused_attention(needs_weights=True) is False
    attention.set_fused_attention(not attention.use_fused_attention())
    try:
        assert attention.use_fused_attention() == (not (default if fused is None else fused))
    finally:
        attention.set_fused_attention(None)
    monkeypatch.setenv(attention.FUSED_ATTENTION_ENV, "maybe")
    with pytest.raises(ValueError, match="KERAS_VIT_FUSED_ATTN must be 0, 1 or auto; got 'maybe'"):
        attention.use_fused_attention()
    with pytest.raises(ValueError, match="takes True, False or None"):
        attention.set_fused_attention("yes")


@pytest.mark.parametrize("length, training", [(9, True), (8, True), (9, False), (9, None)])
def test_flash_attention_is_declined_only_where_jax_gpus_have_no_backward_pass(rng, monkeypatch, length, training):
    # JAX's cuDNN attention has no backward pass at an odd token count: there (JAX on a GPU,
    # training) the layer asks Keras for XLA's attention, instead of letting Keras try cuDNN's
    # in every block, log a traceback and fall back. Everywhere else Keras chooses (None).
    import keras_vit.layers.attention as attention_module
    import keras_vit.layers.fused_attention as switch
    from keras_vit.layers import MultiHeadSelfAttention

    monkeypatch.setattr(switch, "_jax_platform", lambda: "gpu")  # as JAX on a GPU says
    monkeypatch.setattr(switch, "_override", [True])
    asked, fused = [], keras.ops.dot_product_attention

    def spy(*args, flash_attention=None, **kwargs):
        asked.append(flash_attention)
        return fused(*args, flash_attention=flash_attention, **kwargs)

    monkeypatch.setattr(attention_module.ops, "dot_product_attention", spy)
    layer = MultiHeadSelfAttention(num_heads=2)
    x = rng.standard_normal((2, length, 8)).astype("float32")
    out = to_numpy(layer(x, training=training))
    declined = keras.backend.backend() == "jax" and bool(training) and length % 2 == 1
    assert asked == [False if declined else None]
    want, _ = _reference_attention(layer, x)
    np.testing.assert_allclose(out, want, atol=1e-5 * np.abs(want).max())


@pytest.mark.parametrize("policy", ["float32", "mixed_bfloat16"])
def test_inline_sublayer_calls_equal_full_keras_calls(rng, monkeypatch, policy):
    # The encoder block runs its parts through call_inline; Keras' own __call__ must give
    # the same numbers, dtypes included, so the shortcut changes speed only.
    import keras_vit.layers.attention as attention_module
    import keras_vit.layers.encoder_block as block_module
    import keras_vit.layers.inline as inline_module
    from keras_vit.layers import EncoderBlock

    # The direct path is taken on every backend here, not only in eager torch where it pays.
    monkeypatch.setattr(inline_module, "_inline_pays", lambda: True)
    block = EncoderBlock(num_heads=4, mlp_dim=64, mlp_options=dict(gelu_approximate=False), dtype=policy)
    x = rng.standard_normal((2, 9, 32)).astype("float32")
    inline, weights = block(x, return_attention_scores=True)
    assert keras.backend.standardize_dtype(inline.dtype) == block.compute_dtype
    full_path = lambda layer, *args, **kwargs: layer(*args, **kwargs)  # noqa: E731
    monkeypatch.setattr(block_module, "call_inline", full_path)
    monkeypatch.setattr(attention_module, "call_inline", full_path)
    full, full_weights = block(x, return_attention_scores=True)
    assert keras.backend.standardize_dtype(full.dtype) == block.compute_dtype
    np.testing.assert_array_equal(to_numpy(inline).astype("float32"), to_numpy(full).astype("float32"))
    np.testing.assert_array_equal(to_numpy(weights).astype("float32"), to_numpy(full_weights).astype("float32"))


def test_inline_dropout_is_active_only_in_training(rng):
    from keras_vit.layers import EncoderBlock

    block = EncoderBlock(num_heads=2, mlp_dim=32, dropout_rate=0.5, drop_path_rate=0.5)
    x = rng.standard_normal((8, 5, 16)).astype("float32")
    inference = to_numpy(block(x, training=False))
    np.testing.assert_array_equal(inference, to_numpy(block(x, training=False)))
    assert not np.allclose(inference, to_numpy(block(x, training=True)))


def test_stochastic_depth_drops_whole_images_of_the_residual_stream(rng):
    # The block adds its branches to 2-D token rows; stochastic depth must still drop a
    # branch for a whole image (every token of it), never token by token.
    from keras_vit.layers import EncoderBlock

    block = EncoderBlock(num_heads=2, mlp_dim=32, drop_path_rate=0.5)
    x = rng.standard_normal((32, 5, 16)).astype("float32")
    unchanged = np.all(to_numpy(block(x, training=True)) == x, axis=-1)  # (image, token)
    both_dropped, something_kept = unchanged.all(axis=1), ~unchanged.any(axis=1)
    assert np.all(both_dropped | something_kept), unchanged
    assert both_dropped.any() and something_kept.any()


def test_inline_call_of_a_quantized_layer_takes_the_full_path(rng):
    from keras_vit.layers.inline import call_inline

    dense = keras.layers.Dense(8)
    dense.build((None, 16))
    dense.quantize("int8")
    x = keras.ops.convert_to_tensor(rng.standard_normal((3, 16)).astype("float32"))
    np.testing.assert_array_equal(to_numpy(call_inline(dense, x)), to_numpy(dense(x)))


def test_sincos2d_position_embedding_has_no_weights(rng):
    model = keras_vit.create_model("vit_ti16", image_size=32, depth=1, position_embedding="sincos2d")
    assert not model.get_layer("position_embedding").weights
    learned = keras_vit.create_model("vit_ti16", image_size=32, depth=1)
    assert model.count_params() == learned.count_params() - 5 * 192


def test_fit_reduces_loss_on_every_backend(rng):
    model = keras_vit.create_model(
        "vit_ti16", image_size=16, num_classes=2, depth=1, patch_size=8, dropout_rate=0.1, drop_path_rate=0.1
    )
    x = rng.random((16, 16, 16, 3), dtype="float32")
    y = (x.mean(axis=(1, 2, 3)) > 0.5).astype("int32")
    model.compile(
        optimizer=keras.optimizers.Adam(1e-3), loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    )
    history = model.fit(x, y, epochs=8, batch_size=8, verbose=0)
    assert history.history["loss"][-1] < history.history["loss"][0]


# --- bad input ------------------------------------------------------------------------


def test_image_size_not_divisible_by_patch_is_an_error():
    with pytest.raises(ValueError, match=r"image size \(30, 30\) is not divisible by the patch size 16"):
        keras_vit.create_model("vit_ti16", image_size=30)


def test_wrong_channel_count_is_an_error(rng):
    model = keras_vit.create_model("vit_ti16", image_size=32, depth=1)
    with pytest.raises(ValueError, match=r"expected images with 3 channels.*got input shape \(1, 32, 32, 1\)"):
        model(rng.random((1, 32, 32, 1), dtype="float32"))
    with pytest.raises(ValueError, match=r"expected shape=\(None, 32, 32, 3\), found shape=\(1, 64, 64, 3\)"):
        model(rng.random((1, 64, 64, 3), dtype="float32"))
    with pytest.raises(ValueError, match=r"expected 5 tokens.*got 17"):
        model.get_layer("position_embedding")(np.zeros((1, 17, 192), "float32"))
    with pytest.raises(ValueError, match="expected images with 1 channels.*got input shape"):
        keras_vit.layers.PatchEmbedding(8, 4, num_channels=1)(np.zeros((1, 8, 8, 3), "float32"))


def test_images_of_the_wrong_shape_are_refused_before_any_work_and_the_model_stays_usable(rng):
    # On JAX an error inside Keras' predict function used to leave the model's variables purged.
    import tensorflow as tf

    model = keras_vit.create_model("vit_ti16", image_size=32, depth=1, num_classes=3, head_zero_init=False)
    model.compile("adam", "sparse_categorical_crossentropy")
    good = rng.random((2, 32, 32, 3), dtype="float32")
    before = to_numpy(model(good))
    assert_informative(before)
    for shape in [(2, 48, 48, 3), (2, 32, 32, 1), (32, 32, 3)]:
        with pytest.raises(
            ValueError, match=rf"Expected images of shape \(batch, 32, 32, 3\).*got shape {re.escape(str(shape))}"
        ):
            model.predict(np.zeros(shape, "float32"), verbose=0)
    wrong = tf.data.Dataset.from_tensor_slices((np.zeros((4, 16, 16, 3), "float32"), np.zeros(4))).batch(2)
    with pytest.raises(ValueError, match=r"got shape \(None, 16, 16, 3\)"):
        model.fit(wrong, verbose=0)
    with pytest.raises(ValueError, match=r"got shape \(2, 16, 16, 3\)"):
        model.evaluate(np.zeros((2, 16, 16, 3), "float32"), np.zeros(2), verbose=0)
    np.testing.assert_allclose(model.predict(good, verbose=0), before, atol=1e-5 * np.abs(before).max())
    dynamic = keras_vit.create_model("vit_ti16", image_size=32, depth=1, num_classes=3, dynamic_image_size=True)
    with pytest.raises(ValueError, match="image width 40 is not a multiple of one 16-pixel patch"):
        dynamic.predict(np.zeros((1, 32, 40, 3), "float32"), verbose=0)
    assert dynamic.predict(np.zeros((1, 48, 16, 3), "float32"), verbose=0).shape == (1, 3)


@pytest.mark.parametrize("name", ["vit_ti16", "r26_vit_s32"])
def test_every_layer_is_built_after_creation(name):
    # Parts called through call_inline never pass through Keras' __call__, which is what
    # marks a layer built; predict_on_batch reruns the model eagerly while any is unbuilt
    # (on jax that made inference 3x slower).
    model = keras_vit.create_model(name, image_size=64, depth=1, num_classes=3)
    unbuilt = [layer.path for layer in model._flatten_layers() if not layer.built]
    assert not unbuilt
