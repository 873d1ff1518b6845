"""open_clip's hub layout: an ``open_clip_config.json`` (its ``model_cfg``, the tower configs
open_clip builds from, and its ``preprocess_cfg``) beside the weights of both towers.

The image tower is open_clip's own ViT (``vision_cfg``: ``width``, ``layers``, ...) or a timm
model (``timm_model_name``, as ``timm/ViT-B-16-SigLIP`` has it); the text tower is open_clip's
``TextTransformer`` as ``text_cfg`` names it (``pool_type``, ``proj_type``, ``no_causal_mask``).
What keras-vit does not build is refused, naming the option.
"""

import json
import os

from keras_vit.checkpoints import timm_config
from keras_vit.checkpoints.open_clip_table import open_clip_text_rows
from keras_vit.checkpoints.timm_pretrained import PRETRAINED, default_tag
from keras_vit.checkpoints.transformers_config import UnsupportedModelTypeError
from keras_vit.models.text_spec import TextSpec

CONFIG_FILE = "open_clip_config.json"
# The weights files open_clip reads, in its order of preference: safetensors first.
WEIGHTS_FILES = ("open_clip_model.safetensors", "open_clip_pytorch_model.bin")
# open_clip's defaults (CLIPVisionCfg, CLIPTextCfg) of what keras-vit reads, and the options
# of its towers keras-vit does not build with the value that is their absence: data.
with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "open_clip_defaults.json"), encoding="utf-8") as f:
    _DEFAULTS = json.load(f)
_VISION, _TEXT, _NOT_BUILT = _DEFAULTS["vision"], _DEFAULTS["text"], _DEFAULTS["not_built"]
# text_cfg's pool_type -> TextSpec's pooling: the highest id (OpenAI's end of text), the
# first end-of-text id, the last position.
_TEXT_POOLING = {"argmax": "highest_id", "eos": "first_id", "last": "last"}
# open_clip's default mean and std (OpenAI's), where a config states none.
OPENAI_MEAN, OPENAI_STD = (0.48145466, 0.4578275, 0.40821073), (0.26862954, 0.26130258, 0.27577711)
# open_clip's ``resize_mode`` -> ImagePreprocessing's crop_mode.
_RESIZE_MODES = {"shortest": "center", "squash": "squash"}


def _refuse_unbuilt(tower, config):
    unbuilt = sorted(k for k, absent in _NOT_BUILT.items() if config.get(k, absent) not in (absent, None, False))
    if unbuilt:
        raise UnsupportedModelTypeError(
            f"open_clip's {tower} with {', '.join(f'{k}={config[k]!r}' for k in unbuilt)}: keras-vit does not "
            "build it yet."
        )


def _activation(model_cfg, tower_cfg):
    """The MLP activation options: OpenAI's quick GELU where ``quick_gelu``; else torch's GELU,
    in its tanh form where ``act_kwargs`` say ``approximate: tanh``."""
    if model_cfg.get("quick_gelu"):
        return dict(mlp_activation="quick_gelu", gelu_approximate=False)
    approximate = (tower_cfg.get("act_kwargs") or {}).get("approximate", "none")
    return dict(mlp_activation="gelu", gelu_approximate=approximate == "tanh")


def _epsilon(tower_cfg):
    return float((tower_cfg.get("norm_kwargs") or {}).get("eps", 1e-5))  # torch's LayerNorm default


def image_options(model_cfg):
    """The ``ViTSpec`` options of ``model_cfg``'s image tower: its output is the image
    embedding (open_clip's ``proj``, here the head without a bias)."""
    vision = model_cfg.get("vision_cfg") or {}
    if vision.get("timm_model_name"):
        return _timm_image_options(vision, int(model_cfg["embed_dim"]))
    _refuse_unbuilt("vision tower", vision)
    vision = {**_VISION, **vision}
    if vision["pool_type"] != "tok" or vision.get("final_ln_after_pool"):
        raise UnsupportedModelTypeError(
            f"open_clip's vision tower with pool_type={vision['pool_type']!r}, final_ln_after_pool="
            f"{vision.get('final_ln_after_pool', False)}: keras-vit builds the class token's pooling ('tok')."
        )
    size = vision["image_size"]
    return dict(
        image_size=tuple(size) if isinstance(size, (list, tuple)) else (size, size),
        patch_size=int(vision["patch_size"]),
        hidden_size=int(vision["width"]),
        depth=int(vision["layers"]),
        num_heads=int(vision["width"]) // int(vision["head_width"]),
        mlp_dim=int(vision["width"] * vision["mlp_ratio"]),
        layer_norm_epsilon=_epsilon(vision),
        pre_norm=not vision.get("no_ln_pre", False),
        patch_bias=False,
        num_classes=int(model_cfg["embed_dim"]),
        head_zero_init=False,
        **_activation(model_cfg, vision),
    )


def _timm_image_options(vision, embed_dim):
    """A timm image tower (``timm_model_name``): timm's architecture with open_clip's pooling
    and, as open_clip's ``TimmModel`` makes it, no classifier (``timm_proj: "none"``: the
    pooled features are the embedding) or timm's own head of ``embed_dim`` outputs as the
    projection (no ``timm_proj``, as Perception Encoder's); a projection after the trunk
    (``"linear"``, ``"mlp"``) is not built yet."""
    name, projection = vision["timm_model_name"], vision.get("timm_proj", "linear")
    if projection not in ("none", None, ""):
        raise UnsupportedModelTypeError(
            f"open_clip's timm image tower {name!r} with timm_proj={projection!r}: keras-vit builds timm towers "
            "whose pooled features or own head are the embedding (timm_proj 'none', or none)."
        )
    num_classes = 0 if projection == "none" else embed_dim
    args = dict(
        timm_config.architecture_args(name), num_classes=num_classes, global_pool=vision.get("timm_pool", "avg")
    )
    # open_clip passes timm no image size: the trunk has its default tag's (timm's pretrained_cfg).
    tag = default_tag(name)
    return dict(timm_config.spec_options(args), **({"image_size": PRETRAINED[name][tag][2]} if tag else {}))


def _text_cfg(model_cfg):
    """``model_cfg``'s ``text_cfg`` over open_clip's defaults."""
    return {**_TEXT, **(model_cfg.get("text_cfg") or {})}


def text_spec(model_cfg):
    """The ``TextSpec`` of ``model_cfg``'s text tower (``text_cfg``, open_clip's ``TextTransformer``)."""
    _refuse_unbuilt("text tower", model_cfg.get("text_cfg") or {})
    text = _text_cfg(model_cfg)
    if text["pool_type"] not in _TEXT_POOLING or text["proj_type"] not in ("linear", "none"):
        raise UnsupportedModelTypeError(
            f"open_clip's text tower with pool_type={text['pool_type']!r}, proj_type={text['proj_type']!r}: "
            f"keras-vit builds the pool types {sorted(_TEXT_POOLING)} and the projections 'linear' and 'none'."
        )
    pooling = _TEXT_POOLING[text["pool_type"]]
    return TextSpec(
        vocabulary_size=int(text["vocab_size"]),
        context_length=int(text["context_length"]),
        hidden_size=int(text["width"]),
        depth=int(text["layers"]),
        num_heads=int(text["heads"]),
        mlp_dim=int(text["width"] * text["mlp_ratio"]),
        causal=not text["no_causal_mask"],
        pooling=pooling,
        end_id=int(text["eos_id"]) if pooling == "first_id" else None,
        projection_dim=int(model_cfg["embed_dim"]) if text["proj_type"] == "linear" else None,
        projection_bias=bool(text["proj_bias"]),
        layer_norm_epsilon=_epsilon(text),
        **_activation(model_cfg, text),
    )


def text_rows(model_cfg):
    """``(rows, prefix)`` of the text tower's weights: open_clip's ``CLIP`` keeps them at the
    top level, its ``CustomTextCLIP`` (``custom_text``, as SigLIP's) under ``text.``."""
    return open_clip_text_rows(bool(_text_cfg(model_cfg)["proj_bias"])), "text." if model_cfg.get("custom_text") else ""


def scoring(model_cfg):
    """SigLIP's sigmoid where the config starts a bias (``init_logit_bias``), else CLIP's softmax."""
    return "sigmoid" if model_cfg.get("init_logit_bias") is not None else "softmax"


def tokenizer_options(model_cfg):
    """``(hub name of the tokenizer's files or None, clean-up, context length)``: open_clip's
    ``HFTokenizer`` where ``text_cfg`` names ``hf_tokenizer_name`` (its ``clean``, by default
    whitespace only), else its ``SimpleTokenizer`` on the built-in CLIP vocabulary (None;
    lower case by default). The clean-up is a name in ``keras_vit.text.cleaning.CLEANUPS``."""
    text = _text_cfg(model_cfg)
    name = text.get("hf_tokenizer_name") or None
    clean = (text.get("tokenizer_kwargs") or {}).get("clean", "whitespace" if name else "lower")
    return name, f"open_clip_{clean}", int(text["context_length"])


def preprocessing_options(preprocess_cfg):
    """``ImagePreprocessing`` arguments (but the size) of a ``preprocess_cfg``: mean, std,
    the interpolation and the resize mode (the shorter side then a centre crop, or squash)."""
    mode = preprocess_cfg.get("resize_mode", "shortest")
    if mode not in _RESIZE_MODES:
        raise UnsupportedModelTypeError(
            f"open_clip's resize_mode {mode!r}: keras-vit resizes as {sorted(_RESIZE_MODES)} do."
        )
    return dict(
        interpolation=preprocess_cfg.get("interpolation", "bicubic"),
        mean=tuple(float(m) for m in preprocess_cfg.get("mean") or OPENAI_MEAN),
        std=tuple(float(s) for s in preprocess_cfg.get("std") or OPENAI_STD),
        crop_fraction=1.0,
        crop_mode=_RESIZE_MODES[mode],
    )
