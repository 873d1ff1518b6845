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
from conftest import to_numpy

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
    "BottleneckUnit": (dict(filters=4, strides=2, num_groups=4), (2, 8, 8, 8)),
    "ClassToken": ({}, (2, 4, 8)),
    "Dense": (dict(units=4, activation="gelu"), (2, 5, 8)),
    "DropPath": (dict(rate=0.5, seed=3), (2, 5, 8)),
    "EncoderBlock": (dict(num_heads=2, mlp_dim=16, gelu_approximate=False), (2, 5, 8)),
    # Downsampling with a center crop: both resize matrices and the crop are exercised.
    "ImagePreprocessing": (dict(image_size=4, crop_fraction=0.875), (2, 7, 6, 3)),
    "LayerNorm": (dict(epsilon=1e-6), (2, 5, 8)),
    "MlpBlock": (dict(mlp_dim=16), (2, 5, 8)),
    "MultiHeadSelfAttention": (dict(num_heads=2), (2, 5, 8)),
    "PatchEmbedding": (dict(hidden_size=8, patch_size=4, num_channels=3), (2, 8, 8, 3)),
    "PatchTokens": (dict(num_prefix_tokens=1, grid_size=(2, 2)), (2, 5, 8)),
    "PositionEmbedding": (dict(grid_size=(2, 2), num_prefix_tokens=1), (2, 5, 8)),
    # One group: the root's GroupNorm then has 2x2x4 values per group, not 2x2x1, whose
    # statistics would turn bfloat16 rounding into 8% output differences.
    "ResNetBackbone": (dict(block_units=(1,), width=4, num_groups=1), (2, 8, 8, 3)),
    "ResNetStage": (dict(num_units=2, filters=4, strides=2, num_groups=4), (2, 8, 8, 8)),
    "StdConv2D": (dict(filters=4, kernel_size=3, strides=2), (2, 9, 9, 3)),
    "TokenPooling": (dict(mode="gap", num_prefix_tokens=1), (2, 5, 8)),
}

# Layers whose Keras sublayers `model.quantize` can quantize (their Dense layers).
QUANTIZABLE = ("EncoderBlock", "MlpBlock", "MultiHeadSelfAttention")


def _make(class_name, dtype=None, **extra):
    kwargs, shape = CASES[class_name]
    if dtype is not None:
        extra["dtype"] = dtype
    return getattr(keras_vit.layers, class_name)(**kwargs, **extra), shape


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


def _float32(x):
    return to_numpy(keras.ops.cast(x, "float32"))


def test_every_public_layer_has_a_case():
    assert PUBLIC_LAYERS, "no layers found in keras_vit.layers"
    assert sorted(CASES) == PUBLIC_LAYERS


@pytest.fixture
def force_inline(monkeypatch):
    """Sets whether call_inline takes the direct `layer.call` path, on any backend."""

    def force(value):
        monkeypatch.setattr(inline_module, "_inline_pays", lambda: value)

    return force


@pytest.mark.parametrize("name", PUBLIC_LAYERS)
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


@pytest.mark.parametrize("name", PUBLIC_LAYERS)
def test_layer_mixed_precision(name):
    keras.utils.set_random_seed(SEED)
    reference, x = _built_layer(name, dtype="float32")
    layer, _ = _make(name, dtype="mixed_bfloat16")
    layer(x)
    layer.set_weights(reference.get_weights())
    out = layer(x)
    # Every layer here computes and returns the compute dtype; weights stay float32.
    assert keras.backend.standardize_dtype(out.dtype) == "bfloat16"
    assert {keras.backend.standardize_dtype(w.dtype) for w in layer.weights} <= {"float32"}
    # bfloat16 keeps 8 significant bits (relative rounding 2**-9 per operation) and a
    # layer chains a few dozen operations, normalisations amplifying the rounding: so the
    # bound is relative to the output's scale, not elementwise (values near zero have large
    # relative errors). Measured worst 1.9% of the scale (ResNetStage, 3 seeds, 3
    # backends); 4% still fails for a wrong cast or a dropped term, which move the output
    # by a sizeable fraction of its scale.
    want = to_numpy(reference(x))
    np.testing.assert_allclose(_float32(out), want, rtol=0, atol=0.04 * np.abs(want).max())


@pytest.mark.parametrize("mode", ["int8", "float8", "int4"])
@pytest.mark.parametrize("name", QUANTIZABLE)
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
    # keras_vit's LayerNorm is Keras' with a cheaper TensorFlow graph: same weights, same
    # numbers (to rounding), same output dtype, in both precisions, and in training. Only
    # TensorFlow runs its own form; elsewhere this checks that Keras' call is kept.
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


def _tensorflow_nodes(function, *args):
    """The nodes TensorFlow runs for a first call of ``function`` (its graph after
    Grappler and oneDNN's rewrites), from the run metadata."""
    from tensorflow.python.eager import context

    run_context = context.context()
    # The metadata also holds every function instantiated since the last export: drop those.
    run_context.export_run_metadata()
    run_context.enable_run_metadata()
    try:
        function(*args)
        metadata = run_context.export_run_metadata()
    finally:
        run_context.disable_run_metadata()
    return [node for graph in metadata.function_graphs for part in graph.partition_graphs for node in part.node]


def _tensorflow_kernels(function, *args):
    """The op types of ``_tensorflow_nodes``."""
    return {node.op for node in _tensorflow_nodes(function, *args)}


@pytest.mark.skipif(keras.config.backend() != "tensorflow", reason="TensorFlow's graph rewrite")
@pytest.mark.parametrize("policy", ["float32", "mixed_bfloat16"])
def test_layer_norm_is_one_onednn_kernel_in_tensorflow_inference_graphs(policy):
    # In a tf.function at inference, keras_vit's LayerNorm is written so that Grappler's
    # remapper fuses it into one _MklLayerNorm (where TensorFlow runs oneDNN on a CPU);
    # training keeps the centred form, and portable() (the exports) Keras' own ops.
    # Each equals Keras' LayerNormalization, gradients included.
    import tensorflow as tf

    from keras_vit import tensorflow_graph

    ours, _ = _make("LayerNorm", dtype=policy)
    theirs = keras.layers.LayerNormalization(epsilon=1e-6, dtype=policy)
    x = tf.constant(_inputs((2, 5, 8)) * 3.0 + 1.5)
    ours.build(x.shape)
    theirs.build(x.shape)
    _randomize(ours)
    theirs.set_weights(ours.get_weights())
    tolerance = 1e-5 if policy == "float32" else 2e-2
    want = _float32(theirs(x))

    def forward_and_gradient(training):
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = ours(x, training=training)
            loss = tf.reduce_sum(tf.cast(y, "float32") ** 2)
        return y, tape.gradient(loss, x)

    with tf.GradientTape() as tape:
        tape.watch(x)
        loss = tf.reduce_sum(tf.cast(theirs(x), "float32") ** 2)
    want_gradient = to_numpy(tape.gradient(loss, x))
    for training in (False, True):
        got, gradient = tf.function(forward_and_gradient)(training)
        assert got.dtype == theirs(x).dtype
        np.testing.assert_allclose(_float32(got), want, atol=tolerance)
        np.testing.assert_allclose(to_numpy(gradient), want_gradient, atol=tolerance * 10)

    inference = _tensorflow_kernels(tf.function(lambda t: ours(t, training=False)), x)
    training = _tensorflow_kernels(tf.function(lambda t: ours(t, training=True)), x)
    with tensorflow_graph.portable():
        portable = _tensorflow_kernels(tf.function(lambda t: ours(t, training=False)), x)
    fused = "_MklLayerNorm" in inference
    assert fused == tensorflow_graph._onednn_cpu(), inference
    for kernels in (training, portable):
        assert not any("LayerNorm" in op or "BatchNorm" in op for op in kernels), kernels


@pytest.mark.skipif(keras.config.backend() != "tensorflow", reason="TensorFlow's graph rewrite")
def test_residual_adds_and_norms_fuse_into_onednn_kernels_in_tensorflow_inference_graphs():
    # Two encoder blocks and a final norm, as in a ViT. The residual stream runs on 2-D
    # token rows, so Grappler fuses each residual add into the matmul before it (a oneDNN
    # Add post-op), and each norm is one kernel, the last one too (its input is the
    # block's rows reshaped into tokens). The result is the eager one.
    import tensorflow as tf

    from keras_vit import tensorflow_graph

    if not tensorflow_graph._onednn_cpu():
        pytest.skip("TensorFlow runs oneDNN's fusions on a CPU build with oneDNN only")
    blocks = [keras_vit.layers.EncoderBlock(num_heads=2, mlp_dim=16) for _ in range(2)]
    norm = keras_vit.layers.LayerNorm(epsilon=1e-6)
    x = tf.constant(_inputs((2, 5, 8)))

    def encoder(tokens):
        for block in blocks:
            tokens = block(tokens, training=False)
        return norm(tokens)

    encoder(x)  # builds the layers
    for layer in (*blocks, norm):
        _randomize(layer)
    want = to_numpy(encoder(x))  # eager: Keras' own ops
    # The layers' nodes: scoped names (ops run eagerly meanwhile, if any, are bare ones).
    nodes = [n for n in _tensorflow_nodes(tf.function(encoder), x) if "/" in n.name]
    np.testing.assert_allclose(to_numpy(tf.function(encoder)(x)), want, atol=1e-5)
    fused_ops = [tuple(op.decode() for op in n.attr["fused_ops"].list.s) for n in nodes if "FusedMatMul" in n.op]
    assert sorted(fused_ops).count(("BiasAdd", "Add")) == 4, fused_ops  # attention's out and fc2, per block
    assert [n.op for n in nodes].count("_MklLayerNorm") == 5
    assert not [n.name for n in nodes if n.op in ("AddV2", "Add", "FusedBatchNormV3", "_MklNativeFusedBatchNormV3")]


@pytest.mark.skipif(keras.config.backend() != "tensorflow", reason="TensorFlow's graph rewrite")
@pytest.mark.parametrize("qkv_bias", [True, False])
@pytest.mark.parametrize("num_heads", [2, 3])  # head_dim 4 (scale 1/2) and 3 (not a power of two)
def test_attention_projects_heads_first_in_tensorflow_inference_graphs(qkv_bias, num_heads):
    # In a float32 inference graph on a oneDNN CPU the query, key and value come out of one
    # batched matmul, heads first, with the bias as its post-op and the query's scale in
    # its kernel; graphs that record a gradient, portable() (the exports), bfloat16 and a
    # quantized projection keep the 2-D matmul. Each equals Keras' own ops, run eagerly.
    import tensorflow as tf

    from keras_vit import tensorflow_graph

    if not tensorflow_graph._onednn_cpu():
        pytest.skip("TensorFlow runs oneDNN's fusions on a CPU build with oneDNN only")
    # 4 x 9 token rows, at least 4 per unit of width: where the heads-first product pays
    x = tf.constant(_inputs((4, 9, 3 * num_heads)))

    def kernels(layer, gradient=False):
        def run(t):
            if not gradient:
                return layer(t, training=False)
            with tf.GradientTape() as tape:
                tape.watch(t)
                y = layer(t, training=True)
            return tape.gradient(tf.reduce_sum(y), t)

        return [n.op for n in _tensorflow_nodes(tf.function(run), x) if "/" in n.name]

    for policy in ("float32", "mixed_bfloat16", "int8"):
        layer = keras_vit.layers.MultiHeadSelfAttention(
            num_heads=num_heads, qkv_bias=qkv_bias, dtype="float32" if policy == "int8" else policy
        )
        layer.build(x.shape)
        _randomize(layer)
        if policy == "int8":
            layer.qkv.quantize("int8")
        want = _float32(layer(x, training=False))  # eager: Keras' ops
        tolerance = 3e-2 if policy == "mixed_bfloat16" else 1e-5
        for training in (False, True):
            got = _float32(tf.function(lambda t, training=training: layer(t, training=training))(x))
            np.testing.assert_allclose(got, want, atol=tolerance * np.abs(want).max())
        inference = kernels(layer)
        if policy == "float32":
            # the heads-first product (with the bias: fused), the two attention products, and
            # the output projection the one 2-D matmul
            assert inference.count("_MklFusedBatchMatMulV2") == int(qkv_bias), inference
            assert inference.count("_MklBatchMatMulV2") == 3 - int(qkv_bias), inference
            assert inference.count("_MklNativeFusedMatMul") == 1 and "_MklMatMul" not in inference, inference
            assert "AddV2" not in inference, inference  # the bias is a post-op
            with tensorflow_graph.portable():
                portable = kernels(layer)
            assert portable.count("_MklBatchMatMulV2") == 2, portable
            few_rows = [n.op for n in _tensorflow_nodes(tf.function(lambda t: layer(t, training=False)), x[:, :2])]
            for graph in (kernels(layer, gradient=True), portable, few_rows):
                assert "_MklFusedBatchMatMulV2" not in graph and "Merge" not in graph, graph
            # Batch size unknown: both, chosen at run time.
            unknown = tf.function(
                lambda t: layer(t, training=False), input_signature=[tf.TensorSpec((None, *x.shape[1:]))]
            )
            either = [n.op for n in _tensorflow_nodes(unknown, x)]
            assert "Merge" in either and either.count("_MklFusedBatchMatMulV2") == int(qkv_bias), either
            np.testing.assert_allclose(_float32(unknown(x)), want, atol=tolerance * np.abs(want).max())
        else:
            assert "_MklFusedBatchMatMulV2" not in inference and inference.count("_MklBatchMatMulV2") <= 2, inference


def _linear_kernels(run):
    """The names of the linear-algebra kernels PyTorch runs in ``run()`` (eager PyTorch only)."""
    import torch

    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as profile:
        run()
    return {event.key for event in profile.key_averages() if "linear" in event.key or "mm" in event.key}


@pytest.mark.parametrize("policy", ["float32", "mixed_bfloat16"])
@pytest.mark.parametrize("activation", [None, "relu", "tanh", "gelu", "gelu_tanh", "gelu_erf", "sigmoid"])
def test_dense_equals_keras_dense(policy, activation):
    # keras_vit's Dense is Keras' with one PyTorch kernel in eager PyTorch: same weights,
    # same numbers (to rounding), same output dtype, with and without a gradient recorded
    # (predict: oneDNN's fused linear where it is faster; a training call: F.linear). On
    # TensorFlow and JAX this checks that Keras' call is kept. sigmoid has no fused form.
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
    if keras.config.backend() == "torch":
        import torch

        from keras_vit import torch_eager

        # The kernels that ran, so that a silent fallback to Keras' ops fails: oneDNN's fused
        # linear with an activation, or in bfloat16 (where this CPU has it); F.linear else.
        compute = {"float32": torch.float32, "mixed_bfloat16": torch.bfloat16}[policy]
        fused = activation != "sigmoid" and (activation is not None or policy != "float32")
        fused = fused and compute in torch_eager._onednn_dtypes()
        predicted = _linear_kernels(lambda: mine.predict_on_batch(x))
        assert ("mkldnn::_linear_pointwise" in predicted) == fused, predicted
        assert ("aten::linear" in predicted) != fused, predicted
        assert "aten::linear" in _linear_kernels(lambda: ours(x)), "no F.linear with a gradient recorded"


@pytest.mark.skipif(keras.config.backend() != "torch", reason="the memory order of PyTorch's kernels")
def test_dense_keeps_a_large_kernel_column_major_for_inference_and_row_major_for_training(rng):
    # A large kernel is built row-major, as Keras makes it (no copy while building and
    # loading), turns column-major at the first inference call, the order oneDNN's fused
    # linear reads without a slow path (torch_eager.order_kernel); a small one stays
    # row-major. A call with a gradient recorded turns it row-major (the optimizer's
    # slots' order) and inference back, and the values never change.
    large, small = keras_vit.layers.Dense(1024, activation="gelu"), keras_vit.layers.Dense(6)
    large.build((None, 512))
    small.build((None, 8))
    values = [rng.standard_normal(v.shape).astype("float32") * 0.05 for v in large.weights]
    large.set_weights(values)
    assert large.kernel.value.is_contiguous()
    x = rng.standard_normal((3, 512)).astype("float32")
    want = keras.ops.gelu(x @ values[0] + values[1], approximate=False)
    np.testing.assert_allclose(to_numpy(_functional(large, x.shape).predict_on_batch(x)), to_numpy(want), atol=1e-4)
    _functional(small, (3, 8)).predict_on_batch(x[:, :8])
    assert large.kernel.value.t().is_contiguous() and small.kernel.value.is_contiguous()
    np.testing.assert_array_equal(to_numpy(large.kernel), values[0])
    np.testing.assert_allclose(to_numpy(large(x, training=True)), to_numpy(want), atol=1e-4)
    assert large.kernel.value.is_contiguous()
    np.testing.assert_array_equal(to_numpy(large.kernel), values[0])
    np.testing.assert_allclose(to_numpy(_functional(large, x.shape).predict_on_batch(x)), to_numpy(want), atol=1e-4)
    assert large.kernel.value.t().is_contiguous()


@pytest.mark.parametrize("name", ["gelu_tanh", "gelu_erf"])
def test_gelu_in_bfloat16_rounds_once(name):
    # Both GELU forms of the MLP, on bfloat16 inputs: bfloat16 out, within one rounding of
    # the float32 result. On JAX, and on TensorFlow outside a graph that fuses them into
    # a matmul (here: eager), they compute in float32 (half-precision GELU is slow there),
    # so the result is that float32 result rounded once, exactly.
    gelu = getattr(keras_vit.layers, name)
    x = keras.ops.cast(_inputs((64, 96)) * 3.0, "bfloat16")
    got = gelu(x)
    assert keras.backend.standardize_dtype(got.dtype) == "bfloat16"
    rounded = keras.ops.cast(keras.ops.gelu(keras.ops.cast(x, "float32"), approximate=name == "gelu_tanh"), "bfloat16")
    if keras.config.backend() in ("jax", "tensorflow"):
        np.testing.assert_array_equal(_float32(got), _float32(rounded))
    np.testing.assert_allclose(_float32(got), _float32(rounded), rtol=2**-7, atol=2**-7)


@pytest.mark.skipif(keras.config.backend() != "tensorflow", reason="TensorFlow's graph rewrite")
@pytest.mark.parametrize("name, fused_op", [("gelu_tanh", "GeluApproximate"), ("gelu_erf", "GeluExact")])
def test_bfloat16_gelu_fuses_at_tensorflow_inference_and_computes_in_float32_where_a_gradient_is_recorded(
    name, fused_op, rng
):
    # At inference the GELU stays TensorFlow's bfloat16 op, which Grappler fuses into the
    # matmul (a oneDNN post-op); where a gradient is recorded nothing fuses, and the GELU
    # and its gradient compute in float32 (TensorFlow's bfloat16 element-wise ops are slow).
    import tensorflow as tf

    from keras_vit import tensorflow_graph

    if not tensorflow_graph._onednn_cpu():
        pytest.skip("TensorFlow runs oneDNN's fusions on a CPU build with oneDNN only")
    gelu = getattr(keras_vit.layers, name)
    ours = keras_vit.layers.Dense(16, activation=gelu, dtype="mixed_bfloat16", name=f"ours_{name}")
    theirs = keras.layers.Dense(16, activation="gelu", dtype="mixed_bfloat16")
    x = tf.constant(rng.standard_normal((6, 8)).astype("float32") * 2.0)
    for layer in (ours, theirs):
        layer.build(x.shape)
    theirs.set_weights(ours.get_weights())

    def forward_and_gradient(layer):
        def run(t):
            with tf.GradientTape() as tape:
                tape.watch(t)
                y = layer(t)
                loss = tf.reduce_sum(tf.cast(y, "float32") ** 2)
            return y, tape.gradient(loss, t)

        return run

    # The layer's nodes (the run metadata may hold other tests' graphs too).
    inference = [n for n in _tensorflow_nodes(tf.function(lambda t: ours(t)), x) if ours.name in n.name]
    fused = [tuple(op.decode() for op in n.attr["fused_ops"].list.s) for n in inference if "FusedMatMul" in n.op]
    assert fused == [("BiasAdd", fused_op)], fused
    training = [n for n in _tensorflow_nodes(tf.function(forward_and_gradient(ours)), x) if ours.name in n.name]
    transcendental = {(n.op, tf.as_dtype(n.attr["T"].type).name) for n in training if n.op in ("Tanh", "Erf", "Erfc")}
    assert transcendental and {dtype for _, dtype in transcendental} == {"float32"}, transcendental

    y, gradient = tf.function(forward_and_gradient(ours))(x)
    assert y.dtype == tf.bfloat16
    np.testing.assert_allclose(_float32(y), _float32(tf.function(lambda t: ours(t))(x)), rtol=2**-7, atol=2**-7)
    if name == "gelu_erf":  # Keras' "gelu" is the exact form
        want_y, want_gradient = tf.function(forward_and_gradient(theirs))(x)
        np.testing.assert_allclose(_float32(y), _float32(want_y), rtol=2**-7, atol=2**-7)
        np.testing.assert_allclose(to_numpy(gradient), to_numpy(want_gradient), rtol=2e-2, atol=5e-2)


@pytest.mark.skipif(keras.config.backend() != "torch", reason="PyTorch's gradients and export of the torch kernels")
def test_dense_gradients_and_exported_graph_are_keras_own(rng):
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

    # A traced graph holds Keras' portable ops, not the eager oneDNN kernel.
    class Module(torch.nn.Module):
        def forward(self, x):
            return ours(x)

    with torch.no_grad():
        program = torch.export.export(Module(), (x,))
    targets = {str(node.target) for node in program.graph.nodes if node.op == "call_function"}
    assert not any("mkldnn" in target for target in targets), targets
    np.testing.assert_allclose(program.module()(x).numpy(), to_numpy(theirs(x)), rtol=1e-5, atol=1e-6)
