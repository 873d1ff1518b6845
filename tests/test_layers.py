"""One harness over every public layer of ``keras_vit.layers``, in the spirit of keras-hub's
``run_layer_test``: config round trip, ``.keras`` round trip, mixed precision, and the
inline and full sublayer-call paths agreeing. Then Keras quantization surviving a save.

Runs on the backend of KERAS_BACKEND (one process each).
"""

import inspect
import warnings

import keras
import numpy as np
import pytest
from helpers import to_numpy

import keras_vit.layers
import keras_vit.layers.inline as inline_module

SEED = 0

# Model.quantize warns once for every layer that has no quantized form (norms, dropouts).
pytestmark = pytest.mark.filterwarnings("ignore:Layer .* does not have a `quantize` method")

# Every public layer class of keras_vit.layers, found by inspection, so that a new layer is
# tested (and fails until it has a case below).
PUBLIC_LAYERS = sorted(
    name
    for name, obj in vars(keras_vit.layers).items()
    if not name.startswith("_") and inspect.isclass(obj) and issubclass(obj, keras.layers.Layer)
)

# name -> (constructor arguments, input shape). Tiny, so the file runs in seconds.
CASES = {
    "AttentionPooling": (dict(num_heads=2, mlp_dim=16, num_prefix_tokens=1, gelu_approximate=False), (2, 5, 8)),
    "BottleneckUnit": (dict(filters=4, strides=2, num_groups=4), (2, 8, 8, 8)),
    "ClassToken": ({}, (2, 4, 8)),
    "DistillationToken": ({}, (2, 4, 8)),
    "Dense": (dict(units=4, activation="gelu"), (2, 5, 8)),
    "DropPath": (dict(rate=0.5, seed=3), (2, 5, 8)),
    # With LayerScale: its two scales saved, reloaded and cast as the block's other weights.
    "EncoderBlock": (
        dict(num_heads=2, mlp_dim=16, mlp_options=dict(gelu_approximate=False), layer_scale_init=0.5),
        (2, 5, 8),
    ),
    # Downsampling with a center crop: both resize matrices and the crop are exercised.
    "ImagePreprocessing": (dict(image_size=4, crop_fraction=0.875), (2, 7, 6, 3)),
    "LayerNorm": (dict(epsilon=1e-6), (2, 5, 8)),
    "LayerScale": (dict(init_value=0.5), (2, 5, 8)),
    # Gated (SwiGLU): the plain MLP is the EncoderBlock case's.
    # With a norm on the hidden state (EVA-02's).
    "MlpBlock": (dict(mlp_dim=16, gated=True, activation="silu", use_bias=False, hidden_norm="layernorm"), (2, 5, 8)),
    # With a norm before the projection.
    "MultiHeadSelfAttention": (dict(num_heads=2, output_norm="layernorm"), (2, 5, 8)),
    # BEiT's relative position bias (a class token and a 2x2 grid).
    "RelativePositionAttention": (dict(num_heads=2, relative_position_grid=(2, 2)), (2, 5, 8)),
    "DifferentialAttention": (dict(num_heads=2, lambda_init=0.3), (2, 5, 8)),
    "CausalAttention": (dict(num_heads=2), (2, 5, 8)),
    "PatchEmbedding": (dict(hidden_size=8, patch_size=4, num_channels=3), (2, 8, 8, 3)),
    "PatchTokens": (dict(num_prefix_tokens=1, grid_size=(2, 2)), (2, 5, 8)),
    "PositionEmbedding": (dict(grid_size=(2, 2), num_prefix_tokens=1), (2, 5, 8)),
    "RegisterTokens": (dict(count=2), (2, 4, 8)),
    "RotaryEmbedding": (dict(grid_size=(2, 2), head_dim=4, num_prefix_tokens=1), (2, 5, 8)),
    # One group: the root's GroupNorm then has 2x2x4 values per group, not 2x2x1, whose
    # statistics would turn bfloat16 rounding into 8% output differences.
    "ResNetBackbone": (dict(block_units=(1,), width=4, num_groups=1), (2, 8, 8, 3)),
    "ResNetStage": (dict(num_units=2, filters=4, strides=2, num_groups=4), (2, 8, 8, 8)),
    "StdConv2D": (dict(filters=4, kernel_size=3, strides=2), (2, 9, 9, 3)),
    "TokenPooling": (dict(mode="gap", num_prefix_tokens=1), (2, 5, 8)),
    # Variants, "<class>[<what>]": the options that add weights or change the computation.
    "EncoderBlock[parallel, differential]": (
        dict(
            num_heads=2,
            mlp_dim=16,
            form="parallel",
            layer_scale_init=0.5,
            attention_options=dict(kind="differential", lambda_init=0.3),
        ),
        (2, 5, 8),
    ),  # fmt: skip
    "EncoderBlock[post-norm]": (dict(num_heads=2, mlp_dim=16, form="post_norm"), (2, 5, 8)),
    "MultiHeadSelfAttention[grouped, qk norm]": (dict(num_heads=4, num_kv_heads=2, qk_norm="rmsnorm"), (2, 5, 8)),
    "RotaryEmbedding[mixed]": (
        dict(grid_size=(2, 2), head_dim=4, num_prefix_tokens=1, form="mixed", depth=2, num_heads=2),
        (2, 5, 8),
    ),
}

# Layers whose Keras sublayers `model.quantize` can quantize (their Dense layers).
QUANTIZABLE = ("EncoderBlock", "MlpBlock", "MultiHeadSelfAttention")


def _class_name(case):
    return case.split("[")[0]


def _make(case, dtype=None, **extra):
    kwargs, shape = CASES[case]
    if dtype is not None:
        extra["dtype"] = dtype
    return getattr(keras_vit.layers, _class_name(case))(**kwargs, **extra), shape


def _inputs(shape, seed=SEED):
    return np.random.default_rng(seed).standard_normal(shape).astype("float32")


def _randomize(layer, seed=SEED):
    # Zero and one initialisers (biases, class token, norms) would hide swapped or
    # unloaded weights: move every float weight by seeded noise.
    rng = np.random.default_rng(seed)
    for variable in layer.weights:
        if keras.backend.is_float_dtype(variable.dtype):
            value = to_numpy(variable)
            variable.assign(value + 0.1 * rng.standard_normal(value.shape).astype(value.dtype))


def _built_layer(class_name, dtype=None, **extra):
    layer, shape = _make(class_name, dtype, **extra)
    x = _inputs(shape)
    layer(x)
    _randomize(layer)
    return layer, x


def _functional(layer, shape):
    inputs = keras.Input(shape[1:])
    return keras.Model(inputs, layer(inputs))


def _declares_output(layer_class):
    base = keras.layers.Layer
    return layer_class.compute_output_spec is not base.compute_output_spec or (
        layer_class.compute_output_shape is not base.compute_output_shape
    )


def _float32(x):
    return to_numpy(keras.ops.cast(x, "float32"))


def test_every_public_layer_has_a_case():
    assert PUBLIC_LAYERS, "no layers found in keras_vit.layers"
    assert sorted({_class_name(case) for case in CASES}) == PUBLIC_LAYERS


def test_each_layer_takes_at_most_twelve_arguments_and_names_all_but_its_first_three():
    # A layer's options are named at the call (keyword-only after the first few), and a layer
    # with more than twelve has options that belong in a group or a kind of its own.
    import importlib
    import pkgutil

    for module_info in pkgutil.iter_modules(keras_vit.layers.__path__):
        module = importlib.import_module(f"keras_vit.layers.{module_info.name}")
        for name, cls in vars(module).items():
            if not (inspect.isclass(cls) and issubclass(cls, keras.layers.Layer) and "__init__" in vars(cls)):
                continue
            if cls.__module__ != module.__name__:
                continue
            parameters = list(inspect.signature(cls.__init__).parameters.values())[1:]
            named = [p for p in parameters if p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)]
            positional = [p.name for p in named if p.kind is p.POSITIONAL_OR_KEYWORD]
            assert len(named) <= 12, f"{name} takes {len(named)} arguments"
            assert len(positional) <= 3, f"{name} takes {positional} by position"


@pytest.fixture
def force_inline(monkeypatch):
    """Sets whether call_inline takes the direct `layer.call` path, on any backend."""

    def force(value):
        monkeypatch.setattr(inline_module, "_inline_pays", lambda: value)

    return force


@pytest.mark.parametrize("name", sorted(CASES))
def test_layer(name, tmp_path, force_inline):
    keras.utils.set_random_seed(SEED)
    layer, x = _built_layer(name)
    layer_class = type(layer)
    expected = to_numpy(layer(x))

    # Built with every sublayer: predict_on_batch reruns the model eagerly while any
    # layer reports itself unbuilt, and call_inline never builds them.
    assert all(sublayer.built for sublayer in layer._flatten_layers())

    # get_config -> from_config: the same config, and (same weights, same math) the same
    # output, exactly.
    config = layer.get_config()
    clone = layer_class.from_config(config)
    assert clone.get_config() == config
    clone(x)
    clone.set_weights(layer.get_weights())
    np.testing.assert_array_equal(to_numpy(clone(x)), expected)

    # A .keras file of a small functional model reloads to the same outputs, exactly.
    model = _functional(layer, x.shape)
    path = str(tmp_path / "model.keras")
    model.save(path)
    reloaded = keras.saving.load_model(path)
    assert reloaded.layers[-1].get_config() == config  # through JSON: tuples became lists
    np.testing.assert_array_equal(to_numpy(reloaded(x)), to_numpy(model(x)))
    np.testing.assert_array_equal(to_numpy(reloaded(x)), expected)

    # The inline and the full sublayer calls agree bit for bit, dtypes included, in
    # float32 and mixed_bfloat16 (call_inline's exactness conditions).
    for policy in ("float32", "mixed_bfloat16"):
        keras.utils.set_random_seed(SEED)
        layer, x = _built_layer(name, dtype=policy)
        force_inline(True)
        inline = layer(x)
        force_inline(False)
        full = layer(x)
        assert keras.backend.standardize_dtype(inline.dtype) == keras.backend.standardize_dtype(full.dtype)
        np.testing.assert_array_equal(_float32(inline), _float32(full))
        # Where a layer declares what it returns (its output shape or spec, instead of Keras
        # tracing its call to build a functional model), that is what it returns.
        if _declares_output(layer_class):
            spec = layer.compute_output_spec(keras.KerasTensor(x.shape, dtype="float32"))
            assert tuple(spec.shape) == tuple(full.shape)
            assert keras.backend.standardize_dtype(spec.dtype) == keras.backend.standardize_dtype(full.dtype)


@pytest.mark.parametrize("name", sorted(CASES))
def test_layer_mixed_precision(name):
    keras.utils.set_random_seed(SEED)
    reference, x = _built_layer(name, dtype="float32")
    layer, _ = _make(name, dtype="mixed_bfloat16")
    layer(x)
    layer.set_weights(reference.get_weights())
    out = layer(x)
    # Every layer here computes and returns the compute dtype (the rotary table float32, the
    # precision its angles need: the attention turns in float32, then casts back); weights
    # stay float32.
    assert keras.backend.standardize_dtype(out.dtype) == (
        "float32" if name.startswith("RotaryEmbedding") else "bfloat16"
    )
    assert {keras.backend.standardize_dtype(w.dtype) for w in layer.weights} <= {"float32"}
    # bfloat16 keeps 8 significant bits (relative rounding 2**-9 per operation) and a
    # layer chains a few dozen operations, normalisations amplifying the rounding: so the
    # bound is relative to the output's scale, not elementwise (values near zero have large
    # relative errors). Measured worst 1.9% of the scale (ResNetStage, 3 seeds, 3
    # backends); 4% still fails for a wrong cast or a dropped term, which move the output
    # by a sizeable fraction of its scale.
    want = to_numpy(reference(x))
    np.testing.assert_allclose(_float32(out), want, rtol=0, atol=0.04 * np.abs(want).max())


# Each layer in int8; the other modes in the block, which holds the other two layers' Dense
# layers (a mode's own weights and their saving are Keras', the same for every Dense layer).
QUANTIZED_CASES = [(name, "int8") for name in QUANTIZABLE] + [("EncoderBlock", "float8"), ("EncoderBlock", "int4")]


@pytest.mark.parametrize("name, mode", [pytest.param(*case, id="-".join(case)) for case in QUANTIZED_CASES])
def test_quantized_layer_survives_a_keras_file(name, mode, tmp_path):
    keras.utils.set_random_seed(SEED)
    layer, x = _built_layer(name)
    model = _functional(layer, x.shape)
    float_out = to_numpy(model(x))
    model.quantize(mode)
    quantized = [sublayer.path for sublayer in layer._flatten_layers() if sublayer.quantization_mode == mode]
    assert quantized and all(
        isinstance(sublayer, keras.layers.Dense) for sublayer in layer._flatten_layers() if sublayer.quantization_mode
    )
    out = to_numpy(model(x))
    assert not np.array_equal(out, float_out)  # quantization took effect
    path = str(tmp_path / "model.keras")
    model.save(path)
    reloaded = keras.saving.load_model(path)
    reloaded_layer = reloaded.layers[-1]
    again = [sublayer.path for sublayer in reloaded_layer._flatten_layers() if sublayer.quantization_mode == mode]
    assert sorted(again) == sorted(quantized)
    np.testing.assert_array_equal(to_numpy(reloaded(x)), out)
    assert reloaded_layer.get_config() == layer.get_config()


def test_quantized_mixed_precision_block_survives_a_keras_file(tmp_path):
    keras.utils.set_random_seed(SEED)
    layer, x = _built_layer("EncoderBlock", dtype="mixed_bfloat16", name="block_0")
    model = _functional(layer, x.shape)
    model.quantize("int8")
    out = model(x)
    assert keras.backend.standardize_dtype(out.dtype) == "bfloat16"
    path = str(tmp_path / "model.keras")
    model.save(path)
    reloaded = keras.saving.load_model(path)
    policies = {sublayer.path: inline_module.own_policy(sublayer).name for sublayer in layer._flatten_layers()}
    assert policies["block_0/mlp/fc1"] == "int8_from_mixed_bfloat16"
    assert policies["block_0/norm1"] == "mixed_bfloat16"
    again = {
        sublayer.path: inline_module.own_policy(sublayer).name for sublayer in reloaded.layers[-1]._flatten_layers()
    }
    assert again == policies
    np.testing.assert_array_equal(_float32(reloaded(x)), _float32(out))


def test_unquantizable_layers_stay_float_and_reload(tmp_path):
    # PatchEmbedding (a convolution on its own weights) has no Keras quantized form: the
    # model quantizes around it, warning, and still saves and reloads.
    keras.utils.set_random_seed(SEED)
    embedding, x = _built_layer("PatchEmbedding")
    inputs = keras.Input(x.shape[1:])
    block = keras_vit.layers.EncoderBlock(num_heads=2, mlp_dim=16, name="block_0")
    model = keras.Model(inputs, block(keras_vit.layers.ClassToken()(embedding(inputs))))
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        model.quantize("int8")
    assert embedding.quantization_mode is None
    assert block.attention.qkv.quantization_mode == "int8"
    path = str(tmp_path / "model.keras")
    model.save(path)
    np.testing.assert_array_equal(to_numpy(keras.saving.load_model(path)(x)), to_numpy(model(x)))


def test_block_takes_its_policies_from_a_model_wide_map():
    # What a model rebuilt from its config hands its blocks (see VisionTransformer).
    policy_map = keras.dtype_policies.DTypePolicyMap(
        "float32",
        {
            "block_0/attention/qkv": "int8_from_float32",
            "block_0/mlp/fc2": "float8_from_float32",
            "head": "int8_from_float32",
        },
    )
    block = keras_vit.layers.EncoderBlock(num_heads=2, mlp_dim=16, name="block_0", dtype=policy_map)
    block(keras.Input((5, 8)))
    modes = {
        sublayer.path: sublayer.quantization_mode for sublayer in block._flatten_layers() if sublayer.quantization_mode
    }
    assert modes == {"block_0/attention/qkv": "int8", "block_0/mlp/fc2": "float8"}
    # Keras' own sublayers hold plain policies (Dense.quantize fails on a map): the rest
    # still quantizes, and the block's config keeps its own entries only.
    assert not isinstance(block.mlp.fc1.dtype_policy, keras.dtype_policies.DTypePolicyMap)
    block.mlp.fc1.quantize("int8")
    config_map = keras.dtype_policies.get(block.get_config()["dtype"])
    assert sorted(config_map) == ["block_0/attention/qkv", "block_0/mlp/fc1", "block_0/mlp/fc2"]


@pytest.mark.parametrize("policy", ["float32", "mixed_bfloat16"])
def test_layer_norm_equals_keras_layer_normalization(policy):
    # keras_vit's LayerNorm is Keras' under its own name: same weights, same numbers,
    # same output dtype, in both precisions, and in training.
    ours, _ = _make("LayerNorm", dtype=policy)
    theirs = keras.layers.LayerNormalization(epsilon=1e-6, dtype=policy)
    x = _inputs((2, 5, 8)) * 3.0 + 1.5  # away from zero mean and unit variance
    ours.build(x.shape)
    theirs.build(x.shape)
    _randomize(ours)
    theirs.set_weights(ours.get_weights())
    got, want = ours(x, training=True), theirs(x, training=True)
    assert keras.backend.standardize_dtype(got.dtype) == keras.backend.standardize_dtype(want.dtype)
    tolerance = 1e-5 if policy == "float32" else 2e-2
    np.testing.assert_allclose(to_numpy(got).astype("float32"), to_numpy(want).astype("float32"), atol=tolerance)


@pytest.mark.parametrize("policy", ["float32", "mixed_bfloat16"])
@pytest.mark.parametrize("activation", [None, "relu", "tanh", "gelu", "gelu_tanh", "gelu_erf", "sigmoid"])
def test_dense_equals_keras_dense(policy, activation):
    # keras_vit's Dense is Keras' under its own name: same weights, same numbers, same
    # output dtype, in inference and in a training call.
    activation = getattr(keras_vit.layers, activation) if activation in ("gelu_tanh", "gelu_erf") else activation
    ours = keras_vit.layers.Dense(6, activation=activation, dtype=policy)
    theirs = keras.layers.Dense(6, activation=activation, dtype=policy)
    x = _inputs((2, 5, 8))
    for layer in (ours, theirs):
        layer.build(x.shape)
    _randomize(ours)
    theirs.set_weights(ours.get_weights())
    tolerance = 1e-5 if policy == "float32" else 3e-2
    mine, keras_own = _functional(ours, x.shape), _functional(theirs, x.shape)
    for got, want in ((mine.predict_on_batch(x), keras_own.predict_on_batch(x)), (ours(x, training=True), theirs(x))):
        assert keras.backend.standardize_dtype(got.dtype) == keras.backend.standardize_dtype(want.dtype)
        np.testing.assert_allclose(_float32(got), _float32(want), atol=tolerance * np.abs(_float32(want)).max())


@pytest.mark.parametrize("name", ["gelu_tanh", "gelu_erf"])
def test_gelu_in_bfloat16_rounds_once(name):
    # Both GELU forms of the MLP, on bfloat16 inputs: bfloat16 out, within one rounding of
    # the float32 result. On JAX and TensorFlow they compute in float32, so the result is
    # that float32 result rounded once, exactly.
    gelu = getattr(keras_vit.layers, name)
    x = keras.ops.cast(_inputs((64, 96)) * 3.0, "bfloat16")
    got = gelu(x)
    assert keras.backend.standardize_dtype(got.dtype) == "bfloat16"
    rounded = keras.ops.cast(keras.ops.gelu(keras.ops.cast(x, "float32"), approximate=name == "gelu_tanh"), "bfloat16")
    if keras.config.backend() in ("jax", "tensorflow"):
        np.testing.assert_array_equal(_float32(got), _float32(rounded))
    np.testing.assert_allclose(_float32(got), _float32(rounded), rtol=2**-7, atol=2**-7)


@pytest.mark.skipif(keras.config.backend() != "torch", reason="PyTorch's autograd")
def test_dense_gradients_are_keras_own(rng):
    import torch

    ours = keras_vit.layers.Dense(6, activation=keras_vit.layers.gelu_tanh)
    theirs = keras.layers.Dense(6, activation=keras_vit.layers.gelu_tanh)
    x = torch.tensor(rng.standard_normal((7, 8)).astype("float32"))
    for layer in (ours, theirs):
        layer.build(x.shape)
    _randomize(ours)
    theirs.set_weights(ours.get_weights())
    gradients = []
    for layer in (ours, theirs):
        (layer(x) ** 2).sum().backward()
        gradients.append([variable.value.grad.numpy() for variable in layer.trainable_variables])
    for got, want in zip(*gradients):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(
    "old, new_case",
    [
        # MultiHeadSelfAttention and EncoderBlock took every kind and form as flags before.
        (dict(num_heads=2, relative_position_grid=(2, 2), differential_lambda_init=None), "RelativePositionAttention"),
        (dict(num_heads=2, mlp_dim=16, layer_scale_init=0.5, parallel=True, post_norm=False,
              differential_lambda_init=0.3, gelu_approximate=True, qk_norm=False),
         "EncoderBlock[parallel, differential]"),
        (dict(num_heads=2, mlp_dim=16, post_norm=True, parallel=False, relative_position_grid=None),
         "EncoderBlock[post-norm]"),
    ],
)  # fmt: skip
def test_a_config_written_before_the_kinds_were_classes_builds_the_same_layer(old, new_case):
    keras.utils.set_random_seed(SEED)
    layer, x = _built_layer(new_case)
    rebuilt = type(layer).from_config(old)
    rebuilt(x)
    # The same sublayers and weights (the form's norms and scales, the kind's own weights).
    assert [w.path.split("/", 1)[1] for w in rebuilt.weights] == [w.path.split("/", 1)[1] for w in layer.weights]
    rebuilt.set_weights(layer.get_weights())
    np.testing.assert_allclose(to_numpy(rebuilt(x)), to_numpy(layer(x)), atol=1e-6, rtol=0)
