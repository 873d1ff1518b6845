"""Keras' own quantization on keras-vit models: in memory, saved, and reloaded on every backend."""

import textwrap
import warnings

import keras
import numpy as np
import pytest
from helpers import TINY_ENCODER, run_on_next_backend, to_numpy

import keras_vit

TASK = dict(image_size=32, num_classes=5, head_zero_init=False, **TINY_ENCODER)
VIT = dict(name="vit_ti16", patch_size=8, depth=2, **TASK)
HYBRID = dict(name="r26_vit_s32", resnet_block_units=(1, 1), resnet_width=32, depth=1, **TASK)

OTHER_BACKEND_SCRIPT = textwrap.dedent("""
    import sys, numpy as np, keras, keras_vit
    images, out = sys.argv[1:3]
    outputs = [keras.ops.convert_to_numpy(keras_vit.load_model(path)(np.load(images))) for path in sys.argv[3:]]
    np.savez(out, *outputs)
""")


def _quantized(options, mode, dtype=None):
    options = dict(options)
    model = keras_vit.create_model(options.pop("name"), dtype=dtype, **options)
    model.quantize(mode)
    return model


def _images(rng):
    return rng.uniform(-1, 1, (3, 32, 32, 3)).astype("float32")


def test_int8_changes_the_dense_layers_and_stays_close(rng, monkeypatch):
    import gc

    x = _images(rng)
    options = dict(VIT)
    model = keras_vit.create_model(options.pop("name"), **options)
    reference = to_numpy(model(x))
    collections = []
    monkeypatch.setattr(gc, "collect", lambda generation=2: collections.append(generation) or 0)
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        model.quantize("int8")
    assert not [str(w.message) for w in said if "quantize" in str(w.message)]  # nothing from Keras on the terminal
    # One garbage collection, not one for each float kernel let go (each walks the process).
    assert len(collections) == 1
    modes = {layer.path: layer.quantization_mode for layer in model._flatten_layers() if layer.quantization_mode}
    assert "block_0/attention/qkv" in modes and "head" in modes and set(modes.values()) == {"int8"}
    quantized = to_numpy(model(x))
    assert not np.array_equal(quantized, reference)
    # int8 weights with per-channel scales: close to float32 at these magnitudes.
    np.testing.assert_allclose(quantized, reference, atol=0.05 * np.abs(reference).max())


@pytest.mark.parametrize("mode", ["int8", "float8", "int4"])
def test_quantized_vit_file_reloads_quantized(tmp_path, rng, mode):
    x = _images(rng)
    model = _quantized(VIT, mode)
    expected = to_numpy(model(x))
    path = str(tmp_path / "model.keras")
    keras_vit.save_model(model, path)
    reloaded = keras_vit.load_model(path)
    policies = lambda m: {layer.path: layer.quantization_mode for layer in m._flatten_layers()}  # noqa: E731
    assert policies(reloaded) == policies(model)
    np.testing.assert_array_equal(to_numpy(reloaded(x)), expected)


def test_quantized_mixed_precision_file_keeps_its_float32_head(tmp_path, rng):
    model = _quantized(VIT, "int8", dtype="mixed_bfloat16")
    path = str(tmp_path / "model.keras")
    keras_vit.save_model(model, path)
    reloaded = keras_vit.load_model(path)
    assert reloaded.get_layer("block_0").compute_dtype == "bfloat16"
    assert reloaded.get_layer("head").quantization_mode == "int8"
    x = _images(rng)
    np.testing.assert_array_equal(to_numpy(reloaded(x)), to_numpy(model(x)))


def test_quantized_file_is_refused_by_a_float_model(tmp_path):
    # Its int8 kernels read as floats would load without a shape error, and be wrong.
    path = str(tmp_path / "model.keras")
    keras_vit.save_model(_quantized(VIT, "int8"), path)
    options = dict(VIT)
    model = keras_vit.create_model(options.pop("name"), **options)
    with pytest.raises(
        ValueError, match=r"block_0/attention/qkv/kernel: key .* holds int8 \(a quantized model's file\?\)"
    ):
        keras_vit.load_weights(model, path)
    with pytest.raises(ValueError, match="quantized model's file"):
        keras_vit.load_model(path, image_size=64)  # rebuilt at another size: loaded into a float model


def test_int8_vit_and_hybrid_saved_here_reload_on_the_next_backend(tmp_path, rng):
    x = _images(rng)
    np.save(tmp_path / "x.npy", x)
    paths, expected = [], []
    for options in (VIT, HYBRID):
        model = _quantized(options, "int8")
        expected.append(to_numpy(model(x)))
        paths.append(str(tmp_path / f"{options['name']}.keras"))
        keras_vit.save_model(model, paths[-1])
    here = keras.backend.backend()
    out = tmp_path / "out.npz"
    backend = run_on_next_backend(OTHER_BACKEND_SCRIPT, tmp_path / "x.npy", out, *paths)
    with np.load(out) as outputs:
        for name, want, got in zip(("vit", "hybrid"), expected, (outputs["arr_0"], outputs["arr_1"])):
            # The int8 matmuls accumulate in another order on each backend: float32
            # rounding at the outputs' scale, not a different model.
            np.testing.assert_allclose(
                got, want, atol=1e-5 * max(1.0, np.abs(want).max()), rtol=0, err_msg=f"{name}: {here} -> {backend}"
            )
