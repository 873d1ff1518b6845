"""keras-hub's ViTImageClassifier on a Keras backend (``keras-hub:<backend>``)."""

from engines import keras_steps

NAMES = tuple(f"keras-hub:{b}" for b in keras_steps.BACKENDS)
FRAMEWORK = "keras"
SETTINGS = ()  # keras-hub computes its own numerics and attention

backend = keras_steps.backend


def model(arch):
    import keras
    import keras_hub

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


def steps(engine, arch, precision, batch, device):
    built = keras_steps.compiled_model(lambda: model(arch), precision)
    x, y = keras_steps.batch_of(arch, batch)
    return (*keras_steps.steps(built, x, y, device), built)
