"""call_inline: the direct ``layer.call`` path only in eager PyTorch, exact where it runs,
and traced graphs that keep every sublayer's name scope.

The older inline-versus-full comparisons of an encoder block and a ResNet backbone live in
tests/test_models.py and tests/test_resnet.py; tests/test_layers.py runs the comparison
over every public layer.
"""

import keras
import numpy as np
import pytest
from helpers import to_numpy

import keras_vit.layers.encoder_block as encoder_block_module
import keras_vit.layers.inline as inline_module
from keras_vit.layers import EncoderBlock, MlpBlock, PatchEmbedding, TokenPooling
from keras_vit.layers.inline import call_inline

BACKEND = keras.backend.backend()


@pytest.fixture
def force_inline(monkeypatch):
    """Sets whether call_inline takes the direct `layer.call` path, on any backend."""

    def force(value):
        monkeypatch.setattr(inline_module, "_inline_pays", lambda: value)

    return force


def test_direct_calls_only_in_eager_torch():
    assert inline_module._inline_pays() == (BACKEND == "torch")


@pytest.mark.skipif(BACKEND != "torch", reason="tracing that call_inline detects is PyTorch's")
def test_torch_compile_and_export_take_the_full_path():
    import torch

    def probe(x):
        # 1 where call_inline would skip Layer.__call__ (and its module hierarchy).
        return x + (1.0 if inline_module._inline_pays() else 0.0)

    class Probe(torch.nn.Module):
        def forward(self, x):
            return probe(x)

    x = torch.zeros(2)
    assert probe(x).sum().item() == 2.0
    compiled = torch.compile(probe, backend="eager", fullgraph=True)
    assert compiled(x).sum().item() == 0.0
    exported = torch.export.export(Probe(), (x,))
    assert exported.module()(x).sum().item() == 0.0


@pytest.mark.parametrize("policy", ["float32", "mixed_bfloat16"])
def test_direct_and_full_calls_agree_with_attention_scores(rng, force_inline, policy):
    # Forced on every backend, so the exactness of the direct path is checked everywhere,
    # not only where it runs (eager PyTorch).
    block = EncoderBlock(num_heads=4, mlp_dim=64, mlp_options=dict(gelu_approximate=False), dtype=policy)
    x = rng.standard_normal((2, 9, 32)).astype("float32")
    force_inline(True)
    inline, weights = block(x, return_attention_scores=True)
    force_inline(False)
    full, full_weights = block(x, return_attention_scores=True)
    for a, b in ((inline, full), (weights, full_weights)):
        assert keras.backend.standardize_dtype(a.dtype) == block.compute_dtype
        assert keras.backend.standardize_dtype(b.dtype) == block.compute_dtype
        np.testing.assert_array_equal(to_numpy(keras.ops.cast(a, "float32")), to_numpy(keras.ops.cast(b, "float32")))


@pytest.mark.parametrize("mode", ["int8", "float8", "int4"])
def test_quantized_sublayer_takes_the_full_path(rng, force_inline, mode):
    # Dense.call on a quantized kernel would multiply by the raw integers: only the full
    # __call__ dispatches to the quantized computation.
    dense = keras.layers.Dense(8)
    dense.build((None, 16))
    dense.quantize(mode)
    x = keras.ops.convert_to_tensor(rng.standard_normal((3, 16)).astype("float32"))
    force_inline(True)
    np.testing.assert_array_equal(to_numpy(call_inline(dense, x)), to_numpy(dense(x)))


def _op_layer_paths(model, x):
    """The `/`-joined name scopes of every op of the model's traced TensorFlow graph, with
    TensorFlow's uniquifying `_<n>` suffixes removed."""
    import re

    import tensorflow as tf

    graph = tf.function(model).get_concrete_function(tf.TensorSpec(x.shape, "float32")).graph
    return {"/".join(re.sub(r"_\d+$", "", part) for part in op.name.split("/")[:-1]) for op in graph.get_operations()}


@pytest.mark.skipif(BACKEND != "tensorflow", reason="TensorFlow graphs carry the name scopes")
def test_traced_graph_keeps_every_sublayer_scope(rng):
    inputs = keras.Input((5, 16))
    model = keras.Model(inputs, EncoderBlock(2, 32, name="block_0")(inputs), name="m")
    paths = _op_layer_paths(model, rng.standard_normal((1, 5, 16)).astype("float32"))
    for scope in (
        "block_0/norm1",
        "block_0/attention/qkv",
        "block_0/attention/out",
        "block_0/norm2",
        "block_0/mlp/fc1",
        "block_0/mlp/fc2",
    ):
        assert any(scope in path for path in paths), (scope, sorted(paths))


@keras.saving.register_keras_serializable(package="keras_vit_inline_test")
class _ErfinvMlp(MlpBlock):
    """An MLP with an op (Erfinv) that neither LiteRT's built-ins nor tf2onnx express."""

    def call(self, x, training=None):
        return keras.ops.erfinv(keras.ops.tanh(super().call(x, training=training)) * 0.5)


@pytest.mark.skipif(BACKEND != "tensorflow", reason="the conversion runs in TensorFlow (elsewhere: a child process)")
def test_export_names_the_failing_layer_inside_a_block(tmp_path, monkeypatch):
    from keras_vit.export import UnconvertibleModelError, export_model

    monkeypatch.setattr(encoder_block_module, "MlpBlock", _ErfinvMlp)
    inputs = keras.Input((16, 16, 3), name="images")
    x = PatchEmbedding(16, 8, name="patch_embedding")(inputs)
    x = EncoderBlock(2, 32, name="block_0")(x)
    x = TokenPooling("gap", num_prefix_tokens=0, name="pooling")(x)
    model = keras.Model(inputs, keras.layers.Dense(3, name="head")(x), name="nested")
    with pytest.raises(UnconvertibleModelError) as error:
        export_model(model, tmp_path / "out", formats="tflite_float32")
    assert error.value.layers == ["block_0/mlp"] and "Erfinv" in error.value.ops
