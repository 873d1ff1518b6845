"""HF transformers checkpoints by their ``config.json``: the ``ViTSpec`` each model type means,
the pre-processing of its ``preprocessor_config.json`` and the class names of its ``id2label``.

``MODEL_TYPES`` maps a ``model_type`` to its record (``ModelType``): the function that reads
its config, what it loads as, or why it is not built yet. A
checkpoint with a classifier (``...ForImageClassification``) keeps it; one without loads
as a backbone whose output is the upstream model's pooled output (``pooler_output``).
"""

import dataclasses

from keras_vit.checkpoints.dinov3_options import dinov3_options
from keras_vit.checkpoints.layouts import LAYOUTS, spec_options_from_hf_config

PROCESSOR_FILE = "preprocessor_config.json"  # the image processor's settings, beside config.json
# PIL's resampling filters by the numbers the image processors store.
_RESAMPLE = {0: "nearest", 2: "bilinear", 3: "bicubic"}


class UnsupportedModelTypeError(ValueError):
    """A transformers model type keras-vit does not build (yet)."""


def _vit(config):
    """``ViTModel`` / ``ViTForImageClassification``: the paper's ViT. ``ViTModel``'s pooler
    (a dense layer and tanh on the class token) is the paper's pre-logits layer."""
    options = {**LAYOUTS["hf"].numerics, **spec_options_from_hf_config(config)}  # what a config leaves out
    options["qkv_bias"] = bool(config.get("qkv_bias", True))
    if is_classifier(config):
        return options
    options.pop("num_classes", None)  # a backbone's id2label is transformers' default, not classes
    return dict(
        options, include_top=False, representation_size=config.get("pooler_output_size") or config["hidden_size"]
    )


def _encoder(config):
    """A ViT encoder without a pooler (MAE's, MSN's): a backbone whose output is the class
    token after the final norm; its classifier (MSN's) reads the same."""
    return dict(_vit(config), representation_size=None)


def masked_autoencoder_options(config):
    """``MaskedAutoencoder``'s own options (beside the encoder's spec) of a ``vit_mae``
    ``config.json``: its decoder, mask ratio and loss, with transformers' defaults. A ratio
    outside (0, 1) (0 is how a config asks transformers to see every patch, for features) says
    nothing of pre-training, so MAE's 0.75 stands for it.

    >>> masked_autoencoder_options({"model_type": "vit_mae", "decoder_hidden_size": 64})["decoder_width"]
    64
    >>> masked_autoencoder_options({"model_type": "vit_mae", "mask_ratio": 0.0})["mask_ratio"]
    0.75
    """
    ratio = float(config.get("mask_ratio", 0.75))
    return dict(
        mask_ratio=ratio if 0 < ratio < 1 else 0.75,
        decoder_width=int(config.get("decoder_hidden_size", 512)),
        decoder_depth=int(config.get("decoder_num_hidden_layers", 8)),
        decoder_heads=int(config.get("decoder_num_attention_heads", 16)),
        decoder_mlp_dim=int(config.get("decoder_intermediate_size", 2048)),
        norm_pix_loss=bool(config.get("norm_pix_loss", False)),
    )


def _ijepa(config):
    """I-JEPA's encoder: no class token; the patch tokens' mean after the final norm (what
    ``IJepaForImageClassification`` classifies, and the backbone's output here)."""
    return dict(_encoder(config), pooling="gap", class_token=False)


def _deit(config):
    """DeiT: the ViT with a distillation token after the class token.
    ``DeiTForImageClassificationWithTeacher`` reads it with a second head, the logits the
    mean of the two heads' (as keras-vit's distilled models, and timm's);
    ``DeiTForImageClassification``'s head and ``DeiTModel``'s pooler read the class token
    alone (``distillation_head=False``). DeiT's checkpoints without distillation are ``vit``
    on the hub."""
    teacher = "DeiTForImageClassificationWithTeacher" in (config.get("architectures") or ())
    return dict(_vit(config), distillation_token=True, distillation_head=teacher)


def _dinov2(config):
    """``Dinov2Model``: the ViT with LayerScale, the exact GELU and epsilon 1e-6, its MLP
    ``mlp_ratio`` times as wide; a backbone whose output is ``pooler_output`` (the class
    token after the final norm). ``Dinov2ForImageClassification``'s head reads the class
    token beside the patch tokens' mean (``pooling="token_gap"``)."""
    options = {**LAYOUTS["hf_dinov2"].numerics, **spec_options_from_hf_config(config)}
    if config.get("use_swiglu_ffn"):
        raise UnsupportedModelTypeError(
            "a dinov2 checkpoint with a SwiGLU MLP (giant): keras-vit builds the others (timm's "
            "vit_giant_patch14_dinov2 loads by hub name)."
        )
    hidden = options.get("hidden_size", 768)
    options.update(
        mlp_dim=int(hidden * config.get("mlp_ratio", 4)),
        qkv_bias=bool(config.get("qkv_bias", True)),
        layer_scale_init=float(config.get("layerscale_value", 1.0)),
    )
    if is_classifier(config):
        return dict(options, pooling="token_gap")
    options.pop("num_classes", None)
    return dict(options, include_top=False)


def _dinov2_with_registers(config):
    """``Dinov2WithRegistersModel``: DINOv2 with register tokens after the class token, which
    get no position embedding (the class token's is folded into it at load)."""
    return dict(
        _dinov2(config), num_register_tokens=int(config.get("num_register_tokens", 4)), embed_prefix_tokens=False
    )


def _dinov3_vit(config):
    """``DINOv3ViTModel``: rotary embeddings (DINOv3's, ``rope_theta`` their period) and no
    position table, register tokens, LayerScale, a plain or gated (SwiGLU) MLP; a backbone
    whose output is ``pooler_output`` (the class token after the final norm). Its rotary
    coordinates' training-time jitter (``pos_embed_*``) changes nothing at inference."""
    options = {**LAYOUTS["hf_dinov3"].numerics, **spec_options_from_hf_config(config)}
    options.pop("num_classes", None)
    act = config.get("hidden_act", "gelu")
    biases = [bool(config.get(name, True)) for name in ("proj_bias", "mlp_bias")]
    qkv_bias = any(config.get(name, default) for name, default in (("query_bias", True), ("key_bias", False),
                                                                  ("value_bias", True)))  # fmt: skip
    dinov3 = dinov3_options(
        act,
        biases,
        described=f"a dinov3_vit checkpoint with hidden_act={act!r}, proj_bias={biases[0]}, mlp_bias={biases[1]}",
        error=UnsupportedModelTypeError,
        qkv_bias=qkv_bias,
        layer_scale_init=config.get("layerscale_value", 1.0),
        num_register_tokens=config.get("num_register_tokens", 0),
        rope_temperature=config.get("rope_theta", 100.0),
    )
    return dict(
        options,
        **dinov3,
        gated_mlp=bool(config.get("use_gated_mlp", False)),
        dynamic_image_size=True,
        include_top=False,
    )


def _beit(config):
    """``BeitModel`` / ``BeitForImageClassification`` (and data2vec-vision's, the same
    network): a class token, LayerScale, a relative position bias in each block's attention
    (or a learned table), the query and value biases (the key's zeros); with mean pooling
    (its default) the patch tokens' mean normed after pooling, else the class token after
    the final norm (``pooler_output`` either way)."""
    if config.get("use_shared_relative_position_bias"):
        raise UnsupportedModelTypeError(
            f"a {config.get('model_type')} checkpoint with one relative position bias shared by the blocks "
            "(BEiT's pre-training): keras-vit builds the per-block bias of its fine-tuned checkpoints."
        )
    options = {**LAYOUTS["hf_beit"].numerics, **spec_options_from_hf_config(config)}
    mean_pooling = bool(config.get("use_mean_pooling", True))
    layer_scale = float(config.get("layer_scale_init_value", 0.1))
    options.update(
        class_token=True,
        pooling="gap" if mean_pooling else "token",
        norm_after_pool=mean_pooling,
        layer_scale_init=layer_scale if layer_scale > 0 else None,
        position_embedding="learned" if config.get("use_absolute_position_embeddings") else "none",
        relative_position_bias=bool(config.get("use_relative_position_bias", False)),
    )
    if is_classifier(config):
        return options
    options.pop("num_classes", None)
    return dict(options, include_top=False)


# transformers' hidden_act names as keras-vit's MLP options (the vision and the text towers').
ACTIVATIONS = {
    "quick_gelu": dict(mlp_activation="quick_gelu"),
    "gelu": dict(gelu_approximate=False),
    "gelu_pytorch_tanh": dict(gelu_approximate=True),
}


def _clip(config):
    """CLIP's vision tower: ``CLIPVisionModel`` (``pooler_output``: the class token after
    the final norm), ``CLIPVisionModelWithProjection`` and ``CLIPModel`` (``image_embeds``:
    that projected, as the model's head without a bias). A norm before the blocks, no
    bias in the patch embedding, OpenAI's quick GELU."""
    vision = config.get("vision_config") or config
    act = vision.get("hidden_act", "quick_gelu")
    if act not in ACTIVATIONS:
        raise UnsupportedModelTypeError(
            f"a CLIP vision tower with hidden_act={act!r}: keras-vit builds {sorted(ACTIVATIONS)}."
        )
    options = spec_options_from_hf_config({"layer_norm_eps": 1e-5, **vision})
    options.pop("num_classes", None)
    options.update(ACTIVATIONS[act], pre_norm=True, patch_bias=False)
    names = config.get("architectures") or ()
    projection = config.get("projection_dim") or vision.get("projection_dim")
    if config.get("model_type") == "clip" or any(n.endswith("WithProjection") for n in names):
        return dict(options, num_classes=int(projection), head_zero_init=False)
    return dict(options, include_top=False)


def _siglip(config):
    """SigLIP's vision tower (``SiglipVisionModel``, a whole ``SiglipModel``'s): no class token,
    the patch tokens' final norm read by attention pooling (its ``head``); the output is
    ``pooler_output`` (``get_image_features``). SigLIP 2 at a fixed resolution is the same."""
    vision = config.get("vision_config") or config
    act = vision.get("hidden_act", "gelu_pytorch_tanh")
    if act not in ACTIVATIONS or not vision.get("vision_use_head", True):
        raise UnsupportedModelTypeError(
            f"a SigLIP vision tower with hidden_act={act!r}, vision_use_head={vision.get('vision_use_head', True)}: "
            f"keras-vit builds the attention-pooling head and {sorted(ACTIVATIONS)}."
        )
    options = spec_options_from_hf_config({"layer_norm_eps": 1e-6, **vision})
    options.pop("num_classes", None)
    return dict(options, **ACTIVATIONS[act], pooling="map", class_token=False, include_top=False)


@dataclasses.dataclass(frozen=True)
class ModelType:
    """A transformers ``model_type``: the function that reads its ``config.json`` into spec
    options and what it loads as (the docs' family table reads it), or, for one keras-vit
    does not build yet, why not (``read`` None)."""

    read: object = None
    loads_as: str = ""
    not_yet: str = ""


MODEL_TYPES = {
    "beit": ModelType(_beit, "BeitModel, BeitForImageClassification"),
    "clip": ModelType(_clip, "CLIPModel: both towers with load_model, the vision tower and projection alone"),
    "clip_vision_model": ModelType(_clip, "CLIPVisionModel, CLIPVisionModelWithProjection"),
    "data2vec-vision": ModelType(_beit, "Data2VecVisionModel, Data2VecVisionForImageClassification"),
    "deit": ModelType(_deit, "DeiTModel, DeiTForImageClassification, DeiTForImageClassificationWithTeacher"),
    "dinov2": ModelType(_dinov2, "Dinov2Model, Dinov2ForImageClassification"),
    "dinov2_with_registers": ModelType(
        _dinov2_with_registers, "Dinov2WithRegistersModel, Dinov2WithRegistersForImageClassification"
    ),
    "dinov3_vit": ModelType(_dinov3_vit, "DINOv3ViTModel"),
    "ijepa": ModelType(_ijepa, "IJepaModel"),
    "siglip": ModelType(_siglip, "SiglipModel, SigLIP 2 at a fixed resolution: both towers with load_model"),
    "siglip_vision_model": ModelType(_siglip, "SiglipVisionModel"),
    "siglip2_vision_model": ModelType(not_yet="NaFlex's variable patch grids"),
    "vit": ModelType(_vit, "ViTModel, ViTForImageClassification"),
    "vit_mae": ModelType(_encoder, "ViTMAEModel (the encoder)"),
    "vit_msn": ModelType(_encoder, "ViTMSNModel"),
}


def built_model_types():
    """``{model_type: ModelType}`` of the model types keras-vit builds."""
    return {name: record for name, record in MODEL_TYPES.items() if record.read is not None}


def is_classifier(config):
    return any("ForImageClassification" in name for name in config.get("architectures") or ())


def spec_options(config):
    """The ``ViTSpec`` options of a transformers ``config.json`` (as a dict).

    >>> options = spec_options({"model_type": "vit", "architectures": ["ViTForImageClassification"],
    ...                         "hidden_size": 64, "num_hidden_layers": 2, "id2label": {"0": "cat", "1": "dog"}})
    >>> options["depth"], options["num_classes"], options["layer_norm_epsilon"], options["gelu_approximate"]
    (2, 2, 1e-12, False)
    """
    model_type = config.get("model_type")
    record = MODEL_TYPES.get(model_type, ModelType())
    if record.read is None:
        why = f", which needs {record.not_yet} (not built yet)" if record.not_yet else ""
        raise UnsupportedModelTypeError(
            f"transformers model_type {model_type!r}{why}: keras-vit builds {', '.join(sorted(built_model_types()))} "
            "(docs/guide/timm-architectures.md lists what is built and what is not yet)."
        )
    return record.read(config)


def class_names(config):
    """The classifier's class names (``id2label`` in index order), None for a backbone."""
    labels = config.get("id2label")
    if not labels or not is_classifier(config):
        return None
    return tuple(str(labels.get(str(i), labels.get(i, i))) for i in range(len(labels)))


def preprocessing_options(processor, image_size):
    """``(image size, ImagePreprocessing arguments)`` of an image processor's
    ``preprocessor_config.json`` (as a dict): resize (to a size, or the shorter side then a
    centre crop), the resample filter, mean and std.

    >>> size, options = preprocessing_options({"size": {"height": 224, "width": 224}, "resample": 2,
    ...                                        "image_mean": [0.5] * 3, "image_std": [0.5] * 3}, (224, 224))
    >>> size, options["crop_mode"], options["crop_fraction"], options["interpolation"], options["mean"]
    ((224, 224), 'squash', 1.0, 'bilinear', (0.5, 0.5, 0.5))
    """
    size = processor.get("size") or {}
    if isinstance(size, int):
        size = {"shortest_edge": size}
    options = dict(
        interpolation=_RESAMPLE.get(processor.get("resample", 2), "bilinear"),
        mean=tuple(float(m) for m in processor.get("image_mean", (0.5, 0.5, 0.5))),
        std=tuple(float(s) for s in processor.get("image_std", (0.5, 0.5, 0.5))),
    )
    if processor.get("rescale_factor", 1 / 255) != 1 / 255 or not processor.get("do_normalize", True):
        raise UnsupportedModelTypeError(
            f"an image processor that rescales by {processor.get('rescale_factor')} or does not normalise: "
            "keras-vit's pre-processing computes (x / 255 - mean) / std."
        )
    crop = processor.get("crop_size") or {}
    if "height" in size:  # each side resized, then (DeiT's) a centre crop
        resized = (int(size["height"]), int(size["width"]))
        if not (processor.get("do_center_crop") and crop):
            return resized, dict(options, crop_fraction=1.0, crop_mode="squash")
        out = (int(crop["height"]), int(crop["width"]))
        return out, dict(options, crop_fraction=out[0] / resized[0], crop_mode="squash")
    out = (int(crop["height"]), int(crop["width"])) if processor.get("do_center_crop") and crop else tuple(image_size)
    edge = int(size.get("shortest_edge", out[0]))
    return out, dict(options, crop_fraction=min(out) / edge, crop_mode="center")
