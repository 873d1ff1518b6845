"""Tests of the BiT-style ResNet backbone of the hybrid ViT models.

Reference: timm's `_resnetv2` (vision_transformer_hybrid.py), i.e.
ResNetV2(preact=False, stem_type='same', conv_layer=StdConv2dSame(eps=1e-8)).
Run per backend: KERAS_BACKEND=jax python -m pytest tests/test_resnet.py
"""

import copy
from functools import partial

import keras
import numpy as np
import pytest
import torchvision_stub  # noqa: E402  (tests/ is on sys.path via conftest)
from keras import ops

from keras_vit.checkpoints.layouts import LAYOUTS
from keras_vit.layer_rules import check_block_units, resnet_feature_stride, resnet_out_channels
from keras_vit.layers.resnet import BottleneckUnit, ResNetBackbone, ResNetStage, StdConv2D

torchvision_stub.install()
import timm  # noqa: E402
import torch  # noqa: E402
from timm.layers import GroupNormAct, StdConv2dSame  # noqa: E402
from timm.models.resnetv2 import ResNetV2  # noqa: E402
from timm.models.vision_transformer_hybrid import _resnetv2  # noqa: E402

ATOL = 1e-4


@pytest.fixture(autouse=True)
def _seeded():
    """Every random source starts each test in the same state: Keras' initialisers (and
    Python's, numpy's global and TF's) and torch's global generator, which timm's
    initialisers draw from."""
    keras.utils.set_random_seed(0)
    torch.manual_seed(0)


# --------------------------------------------------------------------------
# helpers
# --------------------------------------------------------------------------


def _timm_tiny(block_units, width, num_groups):
    """ResNetV2 exactly as `_resnetv2` builds it, but with a small width."""
    return ResNetV2(
        layers=block_units,
        channels=tuple(4 * width * 2**i for i in range(4)),
        stem_chs=width,
        num_classes=0,
        global_pool="",
        in_chans=3,
        preact=False,
        stem_type="same",
        conv_layer=partial(StdConv2dSame, eps=1e-8),
        norm_layer=partial(GroupNormAct, num_groups=num_groups),
    )


def _randomize_timm(model, seed=0):
    """Random convs (with a per-channel offset, so standardisation matters)
    and random GroupNorm affine parameters."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.ndim == 4:
                offset = 0.05 * torch.randn(p.shape[0], 1, 1, 1, generator=gen)
                p.copy_(torch.randn(p.shape, generator=gen) * 0.1 + offset)
            elif name.endswith("weight"):
                p.copy_(1.0 + 0.3 * torch.randn(p.shape, generator=gen))
            else:
                p.copy_(0.3 * torch.randn(p.shape, generator=gen))
    return model.eval()


def _timm_arrays(timm_model):
    # The hybrid nests timm's ResNetV2 under its patch embedding; standalone it has no prefix.
    return {"patch_embed.backbone." + k: v.detach().numpy() for k, v in timm_model.state_dict().items()}


def _timm_source(keras_path, keras_name="resnet"):
    """The loader's own timm row for a backbone variable: ``(Source, groups)``."""
    source, groups = LAYOUTS["timm"].find_source("resnet/" + keras_path[len(keras_name) + 1 :])
    assert source is not None, f"unmapped Keras variable path {keras_path}"
    return source, groups


def _load_timm_into_keras(timm_model, keras_layer):
    """Copy a timm ResNetV2 state dict into the Keras backbone through the checkpoint table."""
    arrays, used = _timm_arrays(timm_model), set()
    for var in keras_layer.weights:
        source, groups = _timm_source(var.path, keras_layer.name)
        value = source(arrays, groups)  # OIHW -> HWIO where it is a convolution
        assert tuple(var.shape) == value.shape, var.path
        var.assign(value)
        used.update(source.resolve(groups))
    assert used == set(arrays), set(arrays) ^ used  # every tensor mapped exactly once


def _compare(timm_model, keras_layer, images_nhwc):
    """fp32 Keras vs fp32 timm, and vs timm in fp64 (the exact function)."""
    nchw = torch.from_numpy(images_nhwc.transpose(0, 3, 1, 2))
    with torch.no_grad():
        ref = timm_model(nchw).numpy().transpose(0, 2, 3, 1)
        ref64 = copy.deepcopy(timm_model).double()(nchw.double())
    ref64 = ref64.numpy().transpose(0, 2, 3, 1)
    out = ops.convert_to_numpy(keras_layer(images_nhwc))
    assert out.dtype == np.float32
    assert out.shape == ref.shape
    diff = np.max(np.abs(out - ref))
    assert diff <= ATOL, f"max abs diff to timm fp32 {diff}"
    diff64 = np.max(np.abs(out - ref64))
    assert diff64 <= ATOL, f"max abs diff to timm fp64 {diff64}"
    return out


def _images(h, w, n=2, seed=0):
    return np.random.default_rng(seed).normal(size=(n, h, w, 3)).astype("float32")


# --------------------------------------------------------------------------
# parity with timm
# --------------------------------------------------------------------------


@pytest.mark.parametrize("block_units", [(1, 1, 1), (1, 1, 1, 1), (2, 1)])
def test_parity_tiny_width(block_units):
    width, groups = 16, 8
    tm = _randomize_timm(_timm_tiny(block_units, width, groups))
    kl = ResNetBackbone(block_units, width=width, num_groups=groups)
    kl.build((None, 64, 64, 3))
    _load_timm_into_keras(tm, kl)
    stride = resnet_feature_stride(block_units)
    # even/odd sizes: asymmetric SAME pads (e.g. 64 -> root (2, 3), pool (0, 1))
    sizes = [(64, 64), (50, 72)] + ([(37, 37)] if block_units == (1, 1, 1) else [])
    for h, w in sizes:
        out = _compare(tm, kl, _images(h, w))
        channels = resnet_out_channels(block_units, width)
        assert out.shape == (2, -(-h // stride), -(-w // stride), channels)


@pytest.mark.parametrize("block_units", [(1, 1, 1), (1, 1, 1, 1)])
def test_parity_timm_resnetv2_helper(block_units):
    # the very function timm's hybrid models use, at the paper's width 64
    tm = _randomize_timm(_resnetv2(block_units), seed=1)
    kl = ResNetBackbone(block_units)
    kl.build((None, 50, 50, 3))
    _load_timm_into_keras(tm, kl)
    _compare(tm, kl, _images(50, 50, seed=1))
    _compare(tm, kl, _images(64, 48, seed=2))


def test_parity_r26_from_hybrid_vit():
    # R26 (2, 2, 2, 2) backbone of R26+ViT-S/32, taken from the timm model.
    vit = timm.create_model("vit_small_r26_s32_224", pretrained=False, img_size=64, num_classes=0)
    tm = _randomize_timm(vit.patch_embed.backbone, seed=2)
    del vit
    kl = ResNetBackbone((2, 2, 2, 2))
    kl.build((None, 64, 64, 3))
    _load_timm_into_keras(tm, kl)
    out = _compare(tm, kl, _images(64, 64, seed=3))
    assert out.shape == (2, 2, 2, 2048)
    _compare(tm, kl, _images(50, 50, seed=4))


def test_r50_3_stage_matches_timm_structure():
    tm = _resnetv2((3, 4, 9))
    kl = ResNetBackbone((3, 4, 9))
    kl.build((None, 32, 32, 3))
    n_timm = sum(p.numel() for p in tm.parameters())
    assert kl.count_params() == n_timm == 11894848
    assert len(kl.weights) == len(tm.state_dict())
    # every Keras variable maps onto a timm tensor of the same (transposed) shape
    arrays = _timm_arrays(tm)
    for var in kl.weights:
        source, groups = _timm_source(var.path)
        assert tuple(var.shape) == source(arrays, groups).shape, var.path
    # stride / channels agree with timm's feature_info
    assert tm.feature_info[-1]["reduction"] == resnet_feature_stride((3, 4, 9)) == 16
    assert tm.feature_info[-1]["num_chs"] == resnet_out_channels((3, 4, 9), 64) == 1024


def test_variable_paths_r50():
    kl = ResNetBackbone((3, 4, 9))
    kl.build((None, 32, 32, 3))
    paths = {v.path for v in kl.weights}
    expected = {"resnet/conv_root/kernel", "resnet/gn_root/gamma", "resnet/gn_root/beta"}
    for i, n in enumerate((3, 4, 9)):
        for j in range(n):
            p = f"resnet/stage_{i}/unit_{j}/"
            for k in (1, 2, 3):
                expected |= {p + f"conv{k}/kernel", p + f"gn{k}/gamma", p + f"gn{k}/beta"}
            if j == 0:
                expected |= {p + "conv_proj/kernel", p + "gn_proj/gamma", p + "gn_proj/beta"}
    assert paths == expected
    assert len(kl.weights) == len(expected)
    assert tuple(kl.stages[2].units[8].conv2.kernel.shape) == (3, 3, 256, 256)
    assert tuple(kl.stages[1].units[0].conv_proj.kernel.shape) == (1, 1, 256, 512)
    assert kl.stages[1].units[0].conv2.strides == (2, 2)  # stride in the 3x3
    assert kl.stages[1].units[0].conv1.strides == (1, 1)


@pytest.mark.parametrize(
    "size,kernel,stride",
    [(50, 7, 2), (64, 7, 2), (13, 3, 2), (16, 3, 2), (9, 3, 1), (10, 1, 2), (11, 4, 3)],
)
def test_std_conv_matches_timm(size, kernel, stride):
    tconv = StdConv2dSame(5, 6, kernel, stride=stride, eps=1e-8)
    gen = torch.Generator().manual_seed(size * 100 + kernel * 10 + stride)
    with torch.no_grad():
        tconv.weight.copy_(torch.randn(tconv.weight.shape, generator=gen) + 0.3)
    x = _images(size, size + 3, n=2, seed=size)[..., :1].repeat(5, axis=-1)
    x = x + np.arange(5, dtype="float32")
    kconv = StdConv2D(6, kernel, strides=stride)
    kconv.build((None, size, size + 3, 5))
    kconv.kernel.assign(tconv.weight.detach().numpy().transpose(2, 3, 1, 0))
    with torch.no_grad():
        ref = tconv(torch.from_numpy(x.transpose(0, 3, 1, 2))).numpy().transpose(0, 2, 3, 1)
    out = ops.convert_to_numpy(kconv(x))
    assert out.shape == ref.shape
    # Outputs reach ~50 (unit-variance kernels over up to 245 inputs offset by up to 4).
    # float32 keeps ~7 digits, so there an absolute 1e-4 asks for 2e-6 relative, which two
    # sums in different orders can miss by rounding alone: judge 1e-4 of the values' scale.
    np.testing.assert_allclose(out, ref, atol=ATOL * max(1.0, np.max(np.abs(ref))), rtol=0)


def test_std_conv_valid_and_epsilon():
    w = np.random.default_rng(0).normal(size=(3, 3, 2, 4)).astype("float32")
    conv = StdConv2D(4, 3, padding="valid", epsilon=1e-3)
    conv.build((None, 6, 6, 2))
    conv.kernel.assign(w)
    ws = (w - w.mean(axis=(0, 1, 2))) / np.sqrt(w.var(axis=(0, 1, 2)) + 1e-3)
    np.testing.assert_allclose(ops.convert_to_numpy(conv.standardized_kernel()), ws, atol=1e-5)
    x = np.ones((1, 6, 6, 2), "float32")
    assert ops.convert_to_numpy(conv(x)).shape == (1, 4, 4, 4)


def test_std_conv_standardisation_is_accurate():
    # a channel mean far from zero relative to its spread: the kernel is
    # standardised accurately (checked against float64 numpy)
    rng = np.random.default_rng(0)
    w = (5.0 + 0.1 * rng.normal(size=(3, 3, 16, 4))).astype("float32")
    conv = StdConv2D(4, 3)
    conv.build((None, 8, 8, 16))
    conv.kernel.assign(w)
    w64 = w.astype("float64")
    ref = (w64 - w64.mean(axis=(0, 1, 2))) / np.sqrt(w64.var(axis=(0, 1, 2)) + 1e-8)
    got = ops.convert_to_numpy(conv.standardized_kernel())
    np.testing.assert_allclose(got, ref, atol=1e-5, rtol=0)


def _std_eps_reference(w, epsilon):
    """The original BiT code's standardisation in float64 numpy: (w - mean) / (std + eps),
    the biased std over (kh, kw, in) of each output channel."""
    w = w.astype("float64")
    return (w - w.mean(axis=(0, 1, 2))) / (w.std(axis=(0, 1, 2)) + epsilon)


@pytest.mark.parametrize("epsilon", [1e-5, 1e-1])
def test_std_conv_std_eps_form_matches_numpy(epsilon):
    rng = np.random.default_rng(1)
    w = (0.3 + rng.normal(size=(3, 3, 4, 6)) * rng.uniform(0.01, 2.0, size=6)).astype("float32")
    conv = StdConv2D(6, 3, padding="valid", epsilon=epsilon, std_conv_form="std_eps")
    conv.build((None, 5, 7, 4))
    conv.kernel.assign(w)
    ref = _std_eps_reference(w, epsilon)
    np.testing.assert_allclose(ops.convert_to_numpy(conv.standardized_kernel()), ref, atol=1e-5, rtol=0)
    # ... and it is that kernel the layer convolves with (here "valid": a plain correlation).
    x = rng.normal(size=(2, 5, 7, 4)).astype("float32")
    patches = np.lib.stride_tricks.sliding_window_view(x.astype("float64"), (3, 3), axis=(1, 2))
    expected = np.einsum("bhwcyx,yxco->bhwo", patches, ref)
    np.testing.assert_allclose(ops.convert_to_numpy(conv(x)), expected, atol=1e-4, rtol=0)
    # The two forms differ: eps adds to the std here, to the variance in "var_eps".
    var_eps = StdConv2D(6, 3, padding="valid", epsilon=epsilon)
    var_eps.build((None, 5, 7, 4))
    var_eps.kernel.assign(w)
    assert not np.allclose(ops.convert_to_numpy(var_eps.standardized_kernel()), ref, atol=1e-5, rtol=0)


def test_bad_std_conv_form_is_a_clear_error():
    message = r"`std_conv_form` must be 'var_eps' .* or 'std_eps' .*Received: std_conv_form='std'"
    with pytest.raises(ValueError, match=message):
        StdConv2D(4, 3, std_conv_form="std")
    for layer in (partial(BottleneckUnit, 16), partial(ResNetStage, 1, 16), ResNetBackbone):
        with pytest.raises(ValueError, match=message):
            layer(std_conv_form="std")


def test_original_numerics_reach_every_sublayer():
    # The fields of a model spec are splatted into the backbone; every conv and norm gets them.
    fields = dict(
        block_units=(1, 2),
        width=16,
        std_conv_form="std_eps",
        std_conv_epsilon=1e-5,
        group_norm_epsilon=1e-6,
        num_groups=8,
    )
    backbone = ResNetBackbone(**fields, name="resnet", dtype="float32")
    backbone.build((None, 32, 32, 3))
    convs = [layer for layer in backbone._flatten_layers() if isinstance(layer, StdConv2D)]
    norms = [layer for layer in backbone._flatten_layers() if isinstance(layer, keras.layers.GroupNormalization)]
    assert len(convs) == len(norms) == 1 + 3 * 3 + 2  # root, three per unit, two projections
    assert {(c.std_conv_form, c.epsilon) for c in convs} == {("std_eps", 1e-5)}
    assert {(n.epsilon, n.groups) for n in norms} == {(1e-6, 8)}
    config = backbone.get_config()
    assert {k: config[k] for k in fields} == {**fields, "block_units": [1, 2]}
    assert ResNetBackbone.from_config(config).get_config() == config


def test_check_block_units():
    assert check_block_units([3, 4, 9]) == (3, 4, 9)
    assert check_block_units(range(1, 5)) == (1, 2, 3, 4)
    with pytest.raises(ValueError, match=r"`block_units` must be 1 to 4 ints >= 1.*Received: block_units=\(0, 1\)"):
        check_block_units((0, 1))


@pytest.mark.parametrize("h,w", [(8, 8), (7, 10)])
def test_max_pool_same_pads_with_minus_inf(h, w):
    from timm.layers.pool2d_same import MaxPool2dSame

    from keras_vit.layers.padding import max_pool_same

    x = -np.abs(_images(h, w, seed=h)) - 1.0  # all negative: zero padding would win
    with torch.no_grad():
        ref = MaxPool2dSame(3, 2)(torch.from_numpy(x.transpose(0, 3, 1, 2)))
    ref = ref.numpy().transpose(0, 2, 3, 1)
    out = ops.convert_to_numpy(max_pool_same(ops.convert_to_tensor(x), 3, 2))
    np.testing.assert_array_equal(out, ref)


@pytest.mark.parametrize("h,w", [(8, 8), (7, 10)])
def test_max_pool_zero_padding_is_exact_after_relu(h, w):
    # The root pools ReLU outputs; padding them with 0 (which full-integer LiteRT can
    # represent) must give timm's -inf-padded result bit for bit, zeros at the border included.
    from timm.layers.pool2d_same import MaxPool2dSame

    from keras_vit.layers.padding import max_pool_same

    x = np.maximum(_images(h, w, seed=h) - 0.5, 0.0).astype("float32")
    x[:, -1, :, :] = 0.0  # a border of exact zeros, where a padded 0 ties
    with torch.no_grad():
        ref = MaxPool2dSame(3, 2)(torch.from_numpy(x.transpose(0, 3, 1, 2)))
    ref = ref.numpy().transpose(0, 2, 3, 1)
    out = ops.convert_to_numpy(max_pool_same(ops.convert_to_tensor(x), 3, 2, pad_value=0.0))
    np.testing.assert_array_equal(out, ref)


@pytest.mark.parametrize("policy", ["float32", "mixed_bfloat16"])
def test_inline_sublayer_calls_equal_full_keras_calls(monkeypatch, policy):
    # Units, stages and the root run their parts through call_inline; Keras' own
    # __call__ must give the same numbers and dtype.
    import keras_vit.layers.inline as inline_module
    import keras_vit.layers.resnet as resnet_module

    # The direct path is taken on every backend here, not only in eager torch where it pays.
    monkeypatch.setattr(inline_module, "_inline_pays", lambda: True)
    backbone = ResNetBackbone(block_units=(2, 1), width=8, num_groups=4, dtype=policy)
    x = np.random.default_rng(0).standard_normal((2, 32, 24, 3)).astype("float32")
    inline = backbone(x)
    monkeypatch.setattr(resnet_module, "call_inline", lambda layer, *a, **k: layer(*a, **k))
    full = backbone(x)
    assert keras.backend.standardize_dtype(inline.dtype) == backbone.compute_dtype
    assert keras.backend.standardize_dtype(full.dtype) == backbone.compute_dtype
    np.testing.assert_array_equal(
        ops.convert_to_numpy(ops.cast(inline, "float32")), ops.convert_to_numpy(ops.cast(full, "float32"))
    )


def test_dynamic_spatial_shape_functional():
    # None spatial dims: graph tracing (TF) falls back to the native "SAME".
    layer = ResNetBackbone((1, 1), width=16, num_groups=8)
    inp = keras.Input((None, None, 3))
    model = keras.Model(inp, layer(inp))
    _randomize_keras(layer)
    for h, w in [(50, 72), (64, 64)]:
        x = _images(h, w)
        eager = ops.convert_to_numpy(layer(x))
        pred = model.predict(x, verbose=0)
        np.testing.assert_allclose(pred, eager, atol=ATOL, rtol=0)
    if keras.backend.backend() == "tensorflow":
        import tensorflow as tf

        # a graph traced with unknown H, W takes the native-"SAME" path
        fn = tf.function(
            layer.call,
            input_signature=[tf.TensorSpec((None, None, None, 3), tf.float32)],
        )
        for h, w in [(50, 72), (64, 64)]:
            x = _images(h, w)
            np.testing.assert_allclose(fn(x).numpy(), ops.convert_to_numpy(layer(x)), atol=ATOL, rtol=0)


# --------------------------------------------------------------------------
# serialisation
# --------------------------------------------------------------------------


def _randomize_keras(layer, seed=0):
    rng = np.random.default_rng(seed)
    for v in layer.weights:
        base = 1.0 if v.path.endswith("gamma") else 0.0
        v.assign(base + 0.3 * rng.normal(size=v.shape).astype("float32"))


def test_keras_save_load_round_trip(tmp_path):
    inp = keras.Input((40, 36, 3))
    backbone = ResNetBackbone((1, 2), width=16, num_groups=8, std_conv_epsilon=1e-6, group_norm_epsilon=1e-6)
    x = backbone(inp)
    x = keras.layers.GlobalAveragePooling2D()(x)
    model = keras.Model(inp, keras.layers.Dense(3)(x))
    _randomize_keras(backbone)
    images = _images(40, 36)
    before = ops.convert_to_numpy(model(images))

    path = str(tmp_path / "resnet.keras")
    model.save(path)
    loaded = keras.saving.load_model(path)
    after = ops.convert_to_numpy(loaded(images))
    np.testing.assert_allclose(after, before, atol=1e-6, rtol=0)

    lb = loaded.get_layer("resnet")
    assert isinstance(lb, ResNetBackbone)
    assert lb.block_units == (1, 2)
    assert lb.std_conv_epsilon == 1e-6 and lb.group_norm_epsilon == 1e-6
    assert lb.conv_root.epsilon == 1e-6
    assert sorted(v.path for v in lb.weights) == sorted(v.path for v in backbone.weights)


def test_get_config_round_trips():
    layers = [
        StdConv2D(
            8,
            (3, 5),
            strides=(2, 1),
            padding="valid",
            epsilon=1e-5,
            use_bias=True,
            name="c",
        ),
        BottleneckUnit(
            16,
            strides=2,
            std_conv_epsilon=1e-7,
            group_norm_epsilon=1e-6,
            num_groups=4,
            name="u",
        ),
        ResNetStage(3, 16, strides=2, num_groups=4, name="stage_1"),
        ResNetBackbone((2, 2, 2, 2), width=32, num_groups=16, name="r26"),
    ]
    for layer in layers:
        config = layer.get_config()
        clone = layer.__class__.from_config(config)
        assert clone.get_config() == config
        restored = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(layer))
        assert restored.get_config() == config


# --------------------------------------------------------------------------
# helpers and errors
# --------------------------------------------------------------------------


def test_stride_and_channel_helpers():
    assert resnet_feature_stride((3, 4, 9)) == 16
    assert resnet_feature_stride((2, 2, 2, 2)) == 32
    assert resnet_feature_stride((3, 4, 6, 3)) == 32
    assert resnet_out_channels((3, 4, 9), 64) == 1024
    assert resnet_out_channels((2, 2, 2, 2), 64) == 2048
    assert resnet_out_channels((1,), 16) == 64
    layer = ResNetBackbone((1, 1), width=16, num_groups=8)
    assert layer.compute_output_shape((None, 50, 72, 3)) == (None, 7, 9, 128)
    assert layer.compute_output_shape((None, None, None, 3)) == (None, None, None, 128)


@pytest.mark.parametrize("bad", [(), [], (1, 0, 1), (1, -2), (1, 1, 1, 1, 1), (1.5, 2), "349", None, (True, 1)])
def test_bad_block_units(bad):
    with pytest.raises(ValueError, match="block_units"):
        ResNetBackbone(bad)
    with pytest.raises(ValueError, match="block_units"):
        resnet_feature_stride(bad)
    with pytest.raises(ValueError, match="block_units"):
        resnet_out_channels(bad, 64)


def test_empty_feature_map_errors():
    layer = ResNetBackbone((1, 1), width=16, num_groups=8)
    with pytest.raises(ValueError, match="empty"):
        layer.build((None, 0, 32, 3))
    with pytest.raises(ValueError, match="empty"):
        ResNetBackbone((1,), width=16, num_groups=8)(np.zeros((1, 32, 0, 3), "float32"))
    with pytest.raises(ValueError, match="empty"):
        StdConv2D(4, 7, padding="valid").build((None, 5, 5, 3))


def test_other_errors():
    with pytest.raises(ValueError, match="padding"):
        StdConv2D(4, 3, padding="causal")
    with pytest.raises(ValueError, match="rank-4"):
        ResNetBackbone((1,), width=16, num_groups=8).build((None, 32, 3))
    with pytest.raises(ValueError):
        # 32 groups cannot divide 16 channels
        ResNetBackbone((1,), width=16).build((None, 32, 32, 3))
