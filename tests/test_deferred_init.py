"""Deferred initialisation: every weight of a model built in the block starts as zeros
and is drawn later; the layers' configs are unchanged; the block is its thread's alone."""

import json
import threading

import keras
import numpy as np
from helpers import to_numpy

import keras_vit
from keras_vit.models.deferred_init import deferred_initialization, initialize_unloaded

TINY = dict(image_size=16, num_classes=3, depth=1, hidden_size=32, num_heads=2, mlp_dim=64)
# Every kind of weight the builder makes: the plain ViT with a pre-logits layer and a head,
# and a hybrid's ResNet stem (StdConv2D, GroupNormalization).
MODELS = {
    "vit": dict(name="vit_ti16", representation_size=8, head_zero_init=False, **TINY),
    "hybrid": dict(name="r26_vit_s32", resnet_block_units=(1,), resnet_width=32, **{**TINY, "image_size": 32}),
}


def build(kind):
    options = dict(MODELS[kind])
    return keras_vit.create_model(options.pop("name"), **options)


def layer_configs(model):
    """Every layer's serialized config, the nested ones too, by path."""
    return {
        layer.path or layer.name: keras.saving.serialize_keras_object(layer)
        for layer in model._flatten_layers(include_self=False)
    }


def test_every_weight_starts_as_zeros_and_is_drawn_if_not_loaded():
    for kind in MODELS:
        with deferred_initialization():
            model = build(kind)
        paths = [v.path for v in model.weights]
        assert all(not np.any(to_numpy(v)) for v in model.weights), kind
        assert initialize_unloaded(model, loaded=paths[1:]) == paths[:1], kind
        assert initialize_unloaded(model, loaded=[]) == [], kind  # each weight is drawn once, then ordinary


def test_the_drawn_values_are_the_initializers():
    with deferred_initialization():
        model = build("vit")
    initialize_unloaded(model, loaded=[])
    block = model.get_layer("block_0")
    np.testing.assert_array_equal(to_numpy(block.norm1.gamma), 1.0)
    kernel = to_numpy(model.get_layer("head").kernel)
    limit = np.sqrt(6 / sum(kernel.shape))  # glorot_uniform's bound
    assert 0.3 * limit < np.abs(kernel).max() <= limit
    assert 0.005 < to_numpy(model.get_layer("position_embedding").embedding).std() < 0.05  # stddev 0.02


def test_the_layers_configs_are_those_of_a_model_built_outside_the_block():
    for kind in MODELS:
        outside = build(kind)
        with deferred_initialization():
            inside = build(kind)
        assert inside.get_config() == outside.get_config(), kind
        configs = layer_configs(inside)
        assert configs == layer_configs(outside), kind
        assert "Deferred" not in json.dumps(configs), kind


def test_a_layer_made_in_the_block_and_built_after_it_draws_as_usual():
    with deferred_initialization():
        unit = keras_vit.layers.BottleneckUnit(8, num_groups=4, name="unit")
    unit.build((None, 8, 8, 16))
    np.testing.assert_array_equal(to_numpy(unit.gn1.gamma), 1.0)
    assert np.abs(to_numpy(unit.conv1.kernel)).max() > 0
    assert "Deferred" not in json.dumps(keras.saving.serialize_keras_object(unit.gn1))


def test_a_model_built_in_another_thread_meanwhile_draws_its_weights():
    # One thread opens the block and waits in it while another builds a model: that model
    # is built as usual. Then the first builds its own, which is deferred.
    inside, built, results = threading.Event(), threading.Event(), {}

    def deferred():
        with deferred_initialization():
            inside.set()
            built.wait(timeout=300)
            results["deferred"] = build("vit")

    def ordinary():
        inside.wait(timeout=300)
        try:
            results["ordinary"] = build("vit")
        finally:
            built.set()

    threads = [threading.Thread(target=deferred), threading.Thread(target=ordinary)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=600)
    kernel = "block_0/mlp/fc1/kernel"
    ordinary, deferred = ({v.path: to_numpy(v) for v in results[k].weights} for k in ("ordinary", "deferred"))
    assert np.abs(ordinary[kernel]).max() > 0 and np.abs(ordinary["patch_embedding/kernel"]).max() > 0
    assert not any(np.any(value) for value in deferred.values())
    assert initialize_unloaded(results["ordinary"], loaded=[]) == []  # nothing of it was deferred
