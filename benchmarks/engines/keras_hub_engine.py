"""keras-hub's ViTImageClassifier on a Keras backend (``keras-hub:<backend>``); for a DINOv3
row, its ``DINOV3Backbone`` with a classifier on the class token (keras-hub has no DINOv3
classifier)."""

from engines import keras_steps

NAMES = tuple(f"keras-hub:{b}" for b in keras_steps.BACKENDS)
FRAMEWORK = "keras"
SETTINGS = ()  # keras-hub computes its own numerics and attention

backend = keras_steps.backend


def model(arch):
    import keras
    import keras_hub

    if arch.family == "dinov3":
        return _dinov3(arch)
    backbone = keras_hub.models.ViTBackbone(
        image_shape=(arch.image_size, arch.image_size, 3),
        patch_size=arch.patch_size,
        num_layers=arch.depth,
        num_heads=arch.num_heads,
        hidden_dim=arch.hidden_size,
        mlp_dim=arch.mlp_dim,
    )
    classifier = keras_hub.models.ViTImageClassifier(backbone=backbone, num_classes=1000)
    assert isinstance(classifier, keras.Model)
    return classifier


def _dinov3(arch):
    import keras
    import keras_hub

    bias = dict(use_query_bias=arch.qkv_bias, use_key_bias=arch.qkv_bias, use_value_bias=arch.qkv_bias)
    backbone = keras_hub.models.DINOV3Backbone(
        patch_size=arch.patch_size, num_layers=arch.depth, hidden_dim=arch.hidden_size, num_heads=arch.num_heads,
        intermediate_dim=arch.mlp_dim, num_register_tokens=arch.num_register_tokens, layer_scale_init_value=1e-5,
        image_shape=(arch.image_size, arch.image_size, 3), apply_layernorm=True, **bias,
    )  # fmt: skip
    inputs = keras.Input((arch.image_size, arch.image_size, 3))
    tokens = backbone(inputs)
    logits = keras.layers.Dense(1000, dtype="float32")(tokens[:, 0])
    return keras.Model(inputs, logits)


def steps(engine, arch, precision, batch, device):
    built = keras_steps.compiled_model(lambda: model(arch), precision)
    x, y = keras_steps.batch_of(arch, batch)
    return (*keras_steps.steps(built, x, y, device), built)
