"""keras-hub preset folders (what ``save_to_preset`` writes) as keras-vit specs.

A keras-hub preset folder holds the backbone's ``config.json`` (its class, registered as
``keras_hub><Class>``, and its arguments), its weights (``model.weights.h5``), and for a
task its ``task.json`` (the classifier's arguments) and ``preprocessor.json``; a model's
preset may hold its image converter alone (``image_converter.json``). ``BACKBONES`` maps a
backbone class keras-vit builds to the function that reads its arguments: ``ViTBackbone``
(and its ``ViTImageClassifier``), ``DINOV2Backbone``, ``DINOV3Backbone``, and the vision
towers of SigLIP and CLIP (``SigLIPBackbone``, ``CLIPBackbone``, or their vision encoders
saved alone; their text towers are ``keras_hub_text``'s). The weights are read by keras-hub itself
(``read_weights``), by their variable paths, which the ``keras_hub_*`` tables of
``table.py`` map.
"""

import json
import os

from keras_vit.checkpoints import special_cases
from keras_vit.checkpoints.dinov3_options import dinov3_options
from keras_vit.checkpoints.keras_hub_table import TEXT_PREFIX

CONFIG_FILE, TASK_FILE, PREPROCESSOR_FILE = "config.json", "task.json", "preprocessor.json"
CONVERTER_FILE = "image_converter.json"  # a preprocessor's converter, saved beside it or alone
WEIGHTS_FILE = "model.weights.h5"


class UnsupportedKerasHubModelError(ValueError):
    """A keras-hub model keras-vit does not build (yet)."""


def is_keras_hub_config(config):
    """Whether a ``config.json`` (as a dict) is a keras-hub backbone's."""
    return isinstance(config, dict) and str(config.get("registered_name", "")).startswith("keras_hub>")


def _pair(value):
    return tuple(value) if isinstance(value, (list, tuple)) else (value, value)


def _vit(config, task):
    """``ViTBackbone`` (and a ``ViTImageClassifier`` on it): the paper's ViT with the exact
    GELU; the classifier reads the class token (``pooling="token"``) or the mean of all the
    tokens, the class token's too, through an optional pre-logits layer (``intermediate_dim``, tanh)."""
    if config.get("use_mha_bias", True) != config.get("use_mlp_bias", True):
        raise UnsupportedKerasHubModelError(
            f"a ViTBackbone with use_mha_bias={config.get('use_mha_bias')} and use_mlp_bias="
            f"{config.get('use_mlp_bias')}: keras-vit builds the biases all on or all off."
        )
    class_token = bool(config.get("use_class_token", True))
    options = dict(
        _sizes(config, "mlp_dim"),
        layer_norm_epsilon=float(config.get("layer_norm_epsilon", 1e-6)),
        gelu_approximate=False,
        qkv_bias=bool(config.get("use_mha_bias", True)),
        proj_bias=bool(config.get("use_mha_bias", True)),
        patch_bias=bool(config.get("use_patch_bias", True)),
        class_token=class_token,
        pooling="token" if class_token else "gap",
    )
    if task is None:
        return dict(options, include_top=False, pooling=None)
    pooling = task.get("pooling", "token")
    return dict(
        options,
        pooling=pooling,
        pool_include_prefix=pooling == "gap" and class_token,  # its mean takes the class token in
        num_classes=int(task["num_classes"]),
        representation_size=task.get("intermediate_dim"),
        classifier_activation=task.get("activation"),
    )


def _backbone_only(name, task):
    if task is not None:
        raise UnsupportedKerasHubModelError(f"a keras-hub task on a {name}: keras-vit reads the backbone's folder.")


def _sizes(config, mlp_key):
    """The image size, channels, patch and the Transformer's sizes of a backbone's arguments
    (the MLP's width under ``mlp_key``)."""
    patch = _pair(config["patch_size"])
    if patch[0] != patch[1]:
        raise UnsupportedKerasHubModelError(f"patch_size={config['patch_size']}: keras-vit builds square patches.")
    shape = config.get("image_shape") or (224, 224, 3)
    return dict(
        image_size=tuple(shape[:2]), num_channels=int(shape[2]), patch_size=patch[0], hidden_size=config["hidden_dim"],
        depth=config["num_layers"], num_heads=config["num_heads"], mlp_dim=config[mlp_key],
    )  # fmt: skip


def _dinov2(config, task):
    """``DINOV2Backbone``: DINOv2 with LayerScale (and registers, outside the position table),
    its position table as keras-hub interpolated it to the backbone's size; the output, the
    tokens after the final norm."""
    _backbone_only("DINOV2Backbone", task)
    if config.get("use_swiglu_ffn"):
        raise UnsupportedKerasHubModelError("a DINOV2Backbone with use_swiglu_ffn=True (giant): not built yet.")
    registers = int(config.get("num_register_tokens", 0))
    return dict(
        _sizes(config, "intermediate_dim"),
        layer_norm_epsilon=1e-6,
        gelu_approximate=False,
        layer_scale_init=float(config.get("layer_scale_init_value", 1.0)),
        num_register_tokens=registers,
        embed_prefix_tokens=not registers,  # the registers come after the table is added
        pooling=None,
        include_top=False,
    )


def _dinov3(config, task):
    """``DINOV3Backbone``: DINOv3's rotary embeddings, registers, LayerScale, a plain or gated
    MLP; the output, the tokens after the final norm."""
    _backbone_only("DINOV3Backbone", task)
    act = config.get("hidden_activation", "gelu")
    biases = [bool(config.get(name, True)) for name in ("use_proj_bias", "use_mlp_bias")]
    dinov3 = dinov3_options(
        act,
        biases,
        described=(
            f"a DINOV3Backbone with hidden_activation={act!r}, use_proj_bias={biases[0]}, use_mlp_bias={biases[1]}"
        ),
        error=UnsupportedKerasHubModelError,
        qkv_bias=any(config.get(f"use_{n}_bias", True) for n in ("query", "key", "value")),
        layer_scale_init=config.get("layer_scale_init_value", 1.0),
        num_register_tokens=config.get("num_register_tokens", 4),
        rope_temperature=config.get("rope_theta", 100.0),
    )
    return dict(
        _sizes(config, "intermediate_dim"),
        **dinov3,
        layer_norm_epsilon=float(config.get("layer_norm_eps", 1e-5)),
        gated_mlp=bool(config.get("use_gated_mlp", False)),
        pooling=None,
        include_top=False,
    )


# keras-hub's MLP activations (a Keras name, or keras-hub's own) as keras-vit's options, for the
# image towers' ViTSpec and the text towers' TextSpec (keras_hub_text) alike.
ACTIVATIONS = {
    "gelu_approximate": dict(mlp_activation="gelu", gelu_approximate=True),  # keras-hub's: Keras' gelu in its tanh form
    "gelu": dict(mlp_activation="gelu", gelu_approximate=False),  # Keras' gelu is the exact erf form unless told
    "quick_gelu": dict(mlp_activation="quick_gelu"),  # CLIP's layers' own, x * sigmoid(1.702 x)
}


def _activation(name, config, default, built):
    """The MLP's activation of a vision encoder's ``intermediate_activation``, one of ``built``."""
    act = config.get("intermediate_activation", default)
    if act not in built:
        raise UnsupportedKerasHubModelError(
            f"a {name} with intermediate_activation={act!r}: keras-vit builds {', '.join(map(repr, built))}."
        )
    return ACTIVATIONS[act]


def _vision_encoder(config, expected):
    """A two-tower backbone's (SigLIP's, CLIP's) vision encoder's arguments; it must be ``expected``."""
    encoder = config.get("vision_encoder") or {}
    name = str(encoder.get("registered_name", "")).removeprefix("keras_hub>")
    if name != expected:
        raise UnsupportedKerasHubModelError(f"a vision encoder {name or None}: keras-vit builds a {expected} there.")
    return encoder["config"]


def _siglip_vision(config, task, name="SigLIPVisionEncoder"):
    """``SigLIPVisionEncoder``: no class token, the patch tokens after the final norm read by
    attention pooling (its ``head``, a probe and an MLP, with the blocks' heads and width);
    the output, the pooled vector (what the ``SigLIPBackbone`` compares with the text)."""
    _backbone_only(name, task)
    epsilon = float(config.get("layer_norm_epsilon", 1e-6))
    if epsilon != 1e-6:  # keras-hub's final norm keeps 1e-6 whatever the config says
        raise UnsupportedKerasHubModelError(
            f"a {name} with layer_norm_epsilon={epsilon:g}: its final norm's is 1e-6, and keras-vit builds "
            "one epsilon for every norm (1e-6)."
        )
    return dict(
        _sizes(config, "intermediate_dim"),
        **_activation(name, config, "gelu_approximate", ("gelu_approximate", "gelu")),
        layer_norm_epsilon=epsilon,
        class_token=False,
        pooling="map",
        include_top=False,
    )


def _siglip(config, task):
    """``SigLIPBackbone``: its vision tower (``_siglip_vision``); the output, the backbone's
    vision embedding (``get_vision_embeddings``)."""
    return _siglip_vision(_vision_encoder(config, "SigLIPVisionEncoder"), task, "SigLIPBackbone")


def _clip_vision(config, task, name="CLIPVisionEncoder"):
    """``CLIPVisionEncoder``: a norm before the blocks, no bias in the patch embedding, every
    norm's epsilon 1e-5 (fixed in keras-hub's layers); the output, the tokens after the final
    norm (its ``sequence_output``)."""
    _backbone_only(name, task)
    return dict(
        _sizes(config, "intermediate_dim"),
        **_activation(name, config, "quick_gelu", ("quick_gelu", "gelu")),
        layer_norm_epsilon=1e-5,
        pre_norm=True,
        patch_bias=False,
        pooling=None,
        include_top=False,
    )


def _clip(config, task):
    """``CLIPBackbone``: its vision tower (``_clip_vision``) read at the class token, then its
    ``vision_projection`` (no bias) as the head, as for transformers' ``CLIPModel``: the
    output, the backbone's image embedding (``get_vision_embeddings``). Built with
    ``include_top=False``, the class token after the final norm (before the projection)."""
    options = _clip_vision(_vision_encoder(config, "CLIPVisionEncoder"), task, "CLIPBackbone")
    return dict(options, pooling="token", include_top=True, num_classes=int(config["projection_dim"]),
                head_zero_init=False)  # fmt: skip


BACKBONES = {
    "ViTBackbone": _vit,
    "DINOV2Backbone": _dinov2,
    "DINOV3Backbone": _dinov3,
    "SigLIPBackbone": _siglip,
    "SigLIPVisionEncoder": _siglip_vision,
    "CLIPBackbone": _clip,
    "CLIPVisionEncoder": _clip_vision,
}


def read_json(folder, filename):
    """The JSON file ``filename`` of a preset folder, or None where it is missing or not JSON."""
    path = os.path.join(folder, filename)
    if not os.path.isfile(path):
        return None
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except ValueError:
        return None


def from_preset_folder(folder):
    """``(ViTSpec options, ImagePreprocessing arguments but the size, or None)`` of a keras-hub
    preset folder (the converter resizes to the backbone's size)."""
    config = read_json(folder, CONFIG_FILE)
    name = str(config.get("registered_name", "")).removeprefix("keras_hub>")
    if name not in BACKBONES:
        raise UnsupportedKerasHubModelError(
            f"{folder}: a keras-hub {name}; keras-vit builds {', '.join(sorted(BACKBONES))}."
        )
    task = read_json(folder, TASK_FILE)
    options = BACKBONES[name](config["config"], None if task is None else task["config"])
    return options, _preprocessing(_converter(folder))


def _per_channel(value, default):
    value = default if value is None else value
    return tuple(float(v) for v in value) if isinstance(value, (list, tuple)) else (float(value),) * 3


def _converter(folder):
    """The arguments of a folder's image converter: its preprocessor's (a task's, SigLIP's and
    CLIP's with their tokenizer), else one saved alone; ``{}`` where it has none."""
    preprocessor = read_json(folder, PREPROCESSOR_FILE) or {}
    converter = preprocessor.get("config", {}).get("image_converter") or read_json(folder, CONVERTER_FILE) or {}
    return converter.get("config", {})


def _preprocessing(converter):
    """The image converter's resize and ``x * scale + offset`` (on 0-255 pixels) as keras-vit's
    ``(x / 255 - mean) / std``; None where the folder has no preprocessor or converter."""
    if converter.get("scale") is None:
        return None
    std = tuple(1.0 / (255.0 * s) for s in _per_channel(converter["scale"], None))
    mean = tuple(-o * s for o, s in zip(_per_channel(converter.get("offset"), 0.0), std))
    return dict(
        mean=mean,
        std=std,
        interpolation=converter.get("interpolation", "bilinear"),
        antialias=bool(converter.get("antialias", False)),
        crop_fraction=1.0,
        crop_mode="center" if converter.get("crop_to_aspect_ratio", True) else "squash",
    )


def is_preset_folder(path):
    """Whether ``path`` is a folder keras-hub's ``save_to_preset`` wrote."""
    config = read_json(path, CONFIG_FILE) if os.path.isdir(path) else None
    return is_keras_hub_config(config) and os.path.isfile(os.path.join(path, WEIGHTS_FILE))


def read_weights(folder):
    """``{variable path: array}`` of a keras-hub preset folder's model, as keras-hub loads it
    (its task's, head included, where the folder has one)."""
    try:
        import keras_hub  # registers its classes, which the folder's files name
    except ImportError as error:
        from keras_vit.dependencies import MissingDependencyError

        raise MissingDependencyError(
            f"{folder} is a keras-hub preset folder, which keras-hub reads: pip install keras-hub."
        ) from error
    import keras

    task = read_json(folder, TASK_FILE)
    # The task's own class loads it (keras-hub's Task refuses to guess one); else the backbone.
    loader = keras_hub.models.Backbone if task is None else keras.saving.get_registered_object(task["registered_name"])
    model = loader.from_preset(folder)
    backbone = getattr(model, "backbone", model)
    # SigLIP's and CLIP's backbones hold a vision and a text encoder, whose paths may be the
    # same: the text encoder's go under TEXT_PREFIX.
    vision = getattr(backbone, "vision_encoder", backbone)
    text = getattr(backbone, "text_encoder", None)
    text_weights = {id(variable) for variable in text.weights} if text is not None else set()
    # Some backbones (DINOv2's, DINOv3's, the encoders) name their layers after themselves:
    # paths without it.
    arrays = {
        variable.path.removeprefix(f"{backbone.name}_").removeprefix(f"{vision.name}_"): keras.ops.convert_to_numpy(
            variable
        )
        for variable in model.weights
        if id(variable) not in text_weights
    }
    if text is not None:
        own = {v.path.removeprefix(f"{text.name}_"): keras.ops.convert_to_numpy(v) for v in text.weights}
        own = special_cases.keras_hub_positions_prepare(None, own)  # SigLIP's position_ids pick its table's rows
        arrays.update({TEXT_PREFIX + path: value for path, value in own.items()})
    return arrays
