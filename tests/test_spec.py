"""The model spec: one frozen dataclass that every other place reads the architecture from."""

import dataclasses

import numpy as np
import pytest
from helpers import assert_informative, randomize_keras, to_numpy

import keras_vit
from keras_vit.commands.recipe_flags import parse_args
from keras_vit.models.rotary_spec import RotarySpec
from keras_vit.models.spec import ARCHITECTURE, REGULARIZATION, TASK, TRAINING, ResNetSpec, ViTSpec
from keras_vit.training.config import MODEL_OPTIONS, make_config

pytestmark = pytest.mark.backend_free  # Python alone: runs once (tests/backend_free.py)


def test_every_field_has_one_role():
    roles = [ViTSpec.fields_with_role(role) for role in (ARCHITECTURE, TASK, REGULARIZATION, TRAINING)]
    names = [name for group in roles for name in group]
    assert sorted(names) == sorted(ViTSpec.options())
    assert "dropout_rate" in roles[2] and "num_classes" in roles[1] and "gelu_approximate" in roles[0]
    assert roles[3] == ["remat"]


def test_variants_are_specs_and_resizing_is_replace():
    spec = keras_vit.get_spec("vit_b16")
    resized = spec.replace(image_size=384)
    assert resized.image_size == (384, 384) and resized.grid_size == (24, 24)
    assert dataclasses.replace(resized, image_size=(224, 224)) == spec
    hybrid = keras_vit.get_spec("r50_vit_b16")
    assert hybrid.resnet == ResNetSpec((3, 4, 9)) and hybrid.stride == 16 and hybrid.embedding_channels == 1024


@pytest.mark.backend_free(False)  # builds a model
def test_model_config_is_keras_config_plus_the_spec(rng):
    # Numerics other than the defaults (exact GELU, HF's epsilon), so that a clone built
    # without them computes something else; informative weights, so that it shows (the
    # initial zero head gives every model logits of exactly 0).
    model = keras_vit.create_model("vit_ti16", image_size=(32, 48), num_classes=3, depth=1, pooling="gap",
                                   gelu_approximate=False, layer_norm_epsilon=1e-12)  # fmt: skip
    randomize_keras(model)
    config = model.get_config()
    assert {"name", "trainable", "dtype"} <= set(config)
    assert (
        ViTSpec.from_config({k: v for k, v in config.items() if k not in ("name", "trainable", "dtype")}) == model.spec
    )
    clone = keras_vit.VisionTransformer.from_config(config)
    clone.set_weights(model.get_weights())
    x = rng.random((2, 32, 48, 3), dtype="float32")
    expected = to_numpy(model(x))
    assert_informative(expected, "the model's logits")
    np.testing.assert_array_equal(to_numpy(clone(x)), expected)


def test_resnet_fields_by_prefix_and_nested_config():
    spec = keras_vit.get_spec("r26_vit_s32").replace(resnet_width=32, resnet_group_norm_epsilon=1e-6)
    assert spec.resnet.width == 32 and spec.resnet.group_norm_epsilon == 1e-6
    assert spec.resnet.block_units == (2, 2, 2, 2)
    config = spec.to_config()
    assert config["resnet"]["block_units"] == [2, 2, 2, 2]
    assert ViTSpec.from_config(config) == spec
    assert spec.replace(resnet_block_units=None).resnet is None


def test_rotary_fields_are_a_nested_group_and_flat_configs_of_older_files_load():
    spec = keras_vit.get_spec("vit_ti16").replace(rope="axial", rope_temperature=100, rope_reference_grid=14,
                                                   position_embedding="none")  # fmt: skip
    assert spec.rope == RotarySpec("axial", temperature=100.0, reference_grid=(14, 14))
    config = spec.to_config()
    assert config["rope"] == {"form": "axial", "temperature": 100.0, "reference_grid": [14, 14],
                              "grid_indexing": "ij", "grid_offset": 0.0}  # fmt: skip
    assert ViTSpec.from_config(config) == spec
    # A file written before the group: the form as rope, its fields flat beside it.
    flat = {k: v for k, v in config.items() if k != "rope"}
    flat.update(rope="axial", rope_temperature=100.0, rope_reference_grid=[14, 14], rope_grid_indexing="ij",
                rope_grid_offset=0.0)  # fmt: skip
    assert ViTSpec.from_config(flat) == spec
    # The form alone keeps the rest of the group; None removes it, with its fields at their defaults.
    assert spec.replace(rope="dinov3", rope_reference_grid=None).rope.temperature == 100.0
    assert spec.replace(rope=None, rope_grid_offset=0.0).rope is None
    assert (spec.option("rope"), spec.option("rope_temperature")) == ("axial", 100.0)
    assert ViTSpec().option("rope_grid_indexing") == "ij"
    with pytest.raises(ValueError, match=r"unknown option\(s\) \['tempreature'\].*Did you mean 'temperature'"):
        spec.replace(rope_tempreature=1.0)


@pytest.mark.parametrize(
    "options, message",
    [
        (dict(hiden_size=3), r"unknown option\(s\) \['hiden_size'\].*Did you mean 'hidden_size'"),
        (dict(image_size=0), "image_size must be a positive integer"),
        (dict(num_classes=0), "num_classes must be a positive integer"),
        (dict(depth=1.5), "depth must be a positive integer"),
        (dict(resnet_widht=8), r"unknown option\(s\) \['widht'\].*Did you mean 'width'"),
        (dict(num_kv_heads=2), "num_kv_heads 2 does not divide num_heads 3"),
        (dict(num_kv_heads=(3, 1)), r"num_kv_heads has 2 counts; expected one per block \(12\)"),
        (dict(num_kv_heads=0), "num_kv_heads must be a positive integer"),
        (dict(map_num_heads=4), "map_num_heads is map pooling's; got pooling='token'"),
        (dict(pooling="map", map_mlp_dim=-1), "map_mlp_dim must be a positive integer"),
        (dict(parallel_blocks=True, residual_post_norm=True), "parallel_blocks=True has one norm"),
        (
            dict(differential_attention=True, rope="axial", position_embedding="none"),
            "differential_attention=True takes no rotary embeddings.*; got rope='axial'",
        ),
        (
            dict(differential_attention=True, hidden_size=15, num_heads=5),
            "differential attention takes an even head width; got head width 3",
        ),
        (dict(rope="mixed", num_kv_heads=1), "rope='mixed' turns each query head apart: it takes no num_kv_heads"),
    ],
)
def test_bad_options_name_what_was_expected(options, message):
    with pytest.raises(ValueError, match=message):
        keras_vit.get_spec("vit_ti16").replace(**options)


@pytest.mark.backend_free(False)  # builds a model
def test_mixed_precision_is_a_constructor_argument(rng):
    model = keras_vit.create_model("vit_ti16", image_size=32, num_classes=3, depth=1, dtype="mixed_bfloat16")
    assert model.get_layer("block_0").compute_dtype == "bfloat16"
    assert model.get_layer("head").compute_dtype == "float32"  # logits in float32 for the loss
    assert all(v.dtype == "float32" for v in model.weights)
    assert str(to_numpy(model(rng.random((1, 32, 32, 3), dtype="float32"))).dtype) == "float32"
    reloaded = keras_vit.VisionTransformer.from_config(model.get_config())
    assert reloaded.get_layer("block_0").compute_dtype == "bfloat16"


def test_recipes_take_every_spec_option_as_a_flag():
    assert set(MODEL_OPTIONS) == set(ViTSpec.options()) - {"image_size", "num_classes", "resnet"}
    assert {"rope", "rope_temperature", "rope_grid_offset"} <= set(MODEL_OPTIONS)
    config = parse_args(["--depth", "2", "--gelu_approximate", "false", "--pooling", "gap"], "digits_pretrain")
    assert config.model_options["depth"] == 2 and config.model_options["gelu_approximate"] is False
    assert config.model_options["pooling"] == "gap"
    assert make_config("digits_pretrain").model_options["hidden_size"] == 128
