"""One record per upstream checkpoint layout: everything that one source of files means.

A record says how a file of that layout is recognised (its signature key, the prefixes that
training wrappers add, and the layouts whose signature its files carry too, which it
refines), which column of ``table.py`` maps its keys, how its peer resamples position
embeddings at another size, the numerics its checkpoints were trained with (``ViTSpec`` and
``ResNetSpec`` fields), and its special cases (``special_cases.py``). Detection asks every
record and does not depend on their order: a file whose keys carry two signatures, neither
refining the other, is an error.

A new upstream source is a record here and its column in ``table.py`` (``keras_hub_table.py``
for keras-hub's), and where its files come with a config that says the architecture, that
config's reader: a ``ModelType`` in ``transformers_config.py``, a backbone's reader in
``keras_hub_config.py``, an architecture's options in ``timm_config.py``.
"""

import dataclasses
import json
import os
import re
import typing

from keras_vit.checkpoints import cells, keras_hub_table, open_clip_table, special_cases, table, timm_config

# HF transformers' ViTConfig names for the spec's fields (``ViTSpec`` field: HF name).
HF_CONFIG_NAMES = dict(
    image_size="image_size", patch_size="patch_size", num_channels="num_channels", hidden_size="hidden_size",
    depth="num_hidden_layers", num_heads="num_attention_heads", mlp_dim="intermediate_size",
    layer_norm_epsilon="layer_norm_eps",
)  # fmt: skip


def spec_options_from_hf_config(hf):
    """The ``ViTSpec`` fields that an HF ``ViTConfig`` (as a dict, e.g. its ``config.json``) states.

    >>> spec_options_from_hf_config({"num_hidden_layers": 2, "hidden_act": "gelu"})
    {'depth': 2, 'gelu_approximate': False}
    """
    options = {field: hf[name] for field, name in HF_CONFIG_NAMES.items() if name in hf}
    if "id2label" in hf:  # config.json keeps the classes' names, not their number
        options["num_classes"] = len(hf["id2label"])
    if "hidden_act" in hf:
        options["gelu_approximate"] = hf["hidden_act"] != "gelu"  # "gelu" is the exact erf form
    return options


def _hf_config_numerics(path):
    """HF files sit beside a ``config.json`` that states the numerics they were trained with."""
    config = _json_beside(os.path.dirname(path), "config.json")
    if config is None:
        return {}
    options = spec_options_from_hf_config({"hidden_act": "gelu", **config})
    return {k: v for k, v in options.items() if k in ("gelu_approximate", "layer_norm_epsilon")}


def _timm_config_numerics(path):
    """A timm hub folder's ``config.json`` names its architecture, whose numerics are known;
    so does an open_clip repository's ``open_clip_config.json`` for its timm image tower."""
    folder = os.path.dirname(path)
    config = _json_beside(folder, "config.json")
    if config is None:
        vision = ((_json_beside(folder, "open_clip_config.json") or {}).get("model_cfg") or {}).get("vision_cfg")
        config = {"architecture": vision["timm_model_name"]} if (vision or {}).get("timm_model_name") else None
    if config is None:
        return {}
    try:
        options = timm_config.from_hub_config(config)[0]
    except ValueError:  # not timm's, or an architecture keras-vit does not build
        return {}
    return {k: options[k] for k in ("gelu_approximate", "layer_norm_epsilon", "mlp_activation")}


def _json_beside(folder, name):
    """The JSON file ``name`` in ``folder``, or None where there is none."""
    path = os.path.join(folder, name)
    if not os.path.isfile(path):
        return None
    with open(path) as f:
        return json.load(f)


def _hf_grid(path):
    """An HF checkpoint's patch grid, from the ``config.json`` beside it."""
    config = _json_beside(os.path.dirname(path), "config.json") or {}
    if "image_size" not in config or "patch_size" not in config:
        return None
    sides = config["image_size"] if isinstance(config["image_size"], (list, tuple)) else [config["image_size"]] * 2
    return tuple(int(side) // int(config["patch_size"]) for side in sides)


def _keras_grid(path):
    """A keras-vit file's patch grid, from the spec in its config."""
    from keras_vit.checkpoints.readers import keras_config
    from keras_vit.models.spec import ViTSpec

    try:
        config = keras_config(path)
    except KeyError:  # keras-vit's names in another container (an .npz): no config states the grid
        return None
    names = {*ViTSpec.options(), "resnet"}
    try:
        return ViTSpec.from_config({k: v for k, v in config.items() if k in names}).grid_size
    except (ValueError, TypeError):  # not a keras-vit model
        return None


@dataclasses.dataclass(frozen=True)
class Layout:
    """What one upstream layout means (see the module docstring).

    Attributes:
        name: the layout's name in a ``LoadReport``.
        signature: a key that only this layout's files have.
        prefixes: prefixes that wrappers add to every key (``module.``, ``opt/target/``).
        rows: ``(Keras path regex, Source)`` pairs (``table.py``), None for the identity.
        class_token_key: the key of the class token, to check the model has one too.
        resampling: ``(method, antialias)`` with which its peer resizes position embeddings.
        numerics: ``ViTSpec`` fields its checkpoints were trained with.
        resnet_numerics: ``ResNetSpec`` fields its hybrids were trained with.
        ignorable: key prefixes that may go unused without a warning.
        prepare: ``(spec, arrays) -> arrays``: its special cases, before any row is read.
        file_numerics: ``path -> dict`` of numerics that files beside the checkpoint state.
        file_grid: ``path -> (h, w)`` of the position embeddings' patch grid, where the
            file (or one beside it) states it; None where it must be assumed square.
        refines: the layouts whose signature this one's files carry too (DINOv2's keys
            include ViT's): where both match, the file is this layout's.
    """

    name: str
    signature: str
    prefixes: tuple
    rows: list | None
    class_token_key: str
    resampling: tuple
    numerics: dict = dataclasses.field(default_factory=dict)
    resnet_numerics: dict = dataclasses.field(default_factory=dict)
    ignorable: tuple = ()
    prepare: typing.Callable = special_cases.no_special_cases
    file_numerics: typing.Callable = lambda path: {}
    file_grid: typing.Callable = lambda path: None
    refines: tuple = ()

    def find_source(self, path):
        """The ``Source`` and regex groups for one Keras variable path, or ``(None, None)``."""
        if self.rows is None:
            return cells.Source(path, lambda a: a), ()
        for pattern, source in self.rows:
            match = re.fullmatch(pattern, path)
            if match:
                return source, match.groups()
        return None, None


# The keys of open_clip's text tower and scores, which its image tower leaves unused: a
# CLIP's at the top level, a CustomTextCLIP's under text.
_OPEN_CLIP_TEXT = ("text.", "token_embedding.", "positional_embedding", "transformer.", "ln_final.")
_OPEN_CLIP_TEXT += ("text_projection", "logit_scale", "logit_bias", "attn_mask")


def _column(index, resnet=()):
    return [(row[0], row[index]) for row in table.VIT if row[index] is not None] + list(resnet)


LAYOUTS = {
    layout.name: layout
    for layout in (
        # google-research/vision_transformer .npz files. (Resampled as timm's loader for
        # them does; the original code itself resizes with scipy's zoom, order 1.)
        Layout(
            "original",
            "embedding/kernel",
            ("", "opt/target/"),
            _column(1, table.RESNET_ORIGINAL),
            "cls",
            resampling=("bilinear", False),
            numerics={"gelu_approximate": True, "layer_norm_epsilon": 1e-6},
            # Its StdConv divides by (std + 1e-5); flax's GroupNorm epsilon is 1e-6.
            resnet_numerics={"std_conv_form": "std_eps", "std_conv_epsilon": 1e-5, "group_norm_epsilon": 1e-6},
            ignorable=("pre_logits/",),
        ),
        Layout(
            "timm",
            "patch_embed.proj.weight",
            ("", "module.", "model.", "visual.trunk."),  # open_clip's timm image towers: visual.trunk.
            _column(2, table.RESNET_TIMM),
            "cls_token",
            resampling=("bicubic", True),  # checkpoint_filter_fn
            numerics={"gelu_approximate": False, "layer_norm_epsilon": 1e-6},
            # StdConv2dSame(eps=1e-8) and torch's GroupNorm.
            resnet_numerics={"std_conv_form": "var_eps", "std_conv_epsilon": 1e-8, "group_norm_epsilon": 1e-5},
            ignorable=_OPEN_CLIP_TEXT,
            prepare=special_cases.timm_prepare,
            file_numerics=_timm_config_numerics,
        ),
        # open_clip's own ViT (its CLIP and CustomTextCLIP files), beside its text tower.
        Layout(
            "open_clip",
            "visual.conv1.weight",
            ("", "module."),
            open_clip_table.OPEN_CLIP,
            "visual.class_embedding",
            resampling=("bicubic", True),  # open_clip's resize_pos_embed
            numerics={"layer_norm_epsilon": 1e-5},
            ignorable=_OPEN_CLIP_TEXT,
        ),
        Layout(
            "hf_siglip",
            "head.probe",
            ("vision_model.", ""),
            table.HF_SIGLIP,
            "embeddings.class_embedding",  # none: SigLIP has no class token
            resampling=("bicubic", False),  # interpolate_pos_encoding
            ignorable=("text_model.", "logit_scale", "logit_bias"),  # a whole SiglipModel's
        ),
        Layout(
            "hf_clip",
            "embeddings.class_embedding",
            ("vision_model.", ""),
            table.HF_CLIP,
            "embeddings.class_embedding",
            resampling=("bicubic", False),  # interpolate_pos_encoding
            ignorable=("text_model.", "text_projection.", "logit_scale"),  # a whole CLIPModel's
        ),
        Layout(
            "hf_dinov3",
            "embeddings.patch_embeddings.weight",
            ("",),
            table.HF_DINOV3,
            "embeddings.cls_token",
            resampling=("bicubic", False),  # no table to resample: rotary embeddings fit any grid
            numerics={"gelu_approximate": False, "layer_norm_epsilon": 1e-5},
            ignorable=("embeddings.mask_token",),
            prepare=special_cases.hf_dinov3_prepare,
            file_numerics=_hf_config_numerics,
            file_grid=_hf_grid,
            refines=("hf_dinov2_registers",),  # its keys include the register tokens
        ),
        Layout(
            "hf_dinov2_registers",
            "embeddings.register_tokens",
            ("", "dinov2_with_registers."),
            [*table.HF_DINOV2, (r"register_tokens/tokens", cells.same("embeddings.register_tokens"))],
            "embeddings.cls_token",
            resampling=("bicubic", True),  # its interpolate_pos_encoding antialiases
            numerics={"gelu_approximate": False, "layer_norm_epsilon": 1e-6},
            ignorable=("embeddings.mask_token",),
            prepare=special_cases.hf_registers_prepare,
            file_numerics=_hf_config_numerics,
            file_grid=_hf_grid,
            refines=("hf_dinov2", "hf"),
        ),
        Layout(
            "hf_dinov2",
            "encoder.layer.0.layer_scale1.lambda1",
            ("", "dinov2."),
            table.HF_DINOV2,
            "embeddings.cls_token",
            resampling=("bicubic", False),  # interpolate_pos_encoding
            numerics={"gelu_approximate": False, "layer_norm_epsilon": 1e-6},
            ignorable=("embeddings.mask_token",),
            file_numerics=_hf_config_numerics,
            file_grid=_hf_grid,
            refines=("hf",),
        ),
        Layout(
            "hf_beit",
            "encoder.layer.0.lambda_1",
            ("beit.", "data2vec_vision.", ""),
            [*_column(3), *table.HF_BEIT],
            "embeddings.cls_token",
            resampling=("bicubic", False),
            numerics={"gelu_approximate": False, "layer_norm_epsilon": 1e-12},
            ignorable=("embeddings.mask_token",),
            prepare=special_cases.hf_beit_prepare,
            file_numerics=_hf_config_numerics,
            file_grid=_hf_grid,
            refines=("hf",),  # BeitModel's keys, without a prefix, include ViT's
        ),
        Layout(
            "hf",
            "embeddings.patch_embeddings.projection.weight",
            ("", "vit.", "deit."),
            _column(3),
            "embeddings.cls_token",
            resampling=("bicubic", False),  # interpolate_pos_encoding
            numerics={"gelu_approximate": False, "layer_norm_epsilon": 1e-12},
            ignorable=("pooler.", "decoder."),  # ViTMAEForPreTraining's decoder: not the encoder's
            prepare=special_cases.hf_prepare,
            file_numerics=_hf_config_numerics,
            file_grid=_hf_grid,
        ),
        # keras-hub's DINOv2 and DINOv3 preset folders (keras_hub_config.read_weights).
        Layout(
            "keras_hub_dinov3",
            "encoder/layers_0/attention/q_proj/kernel",
            ("",),
            keras_hub_table.KERAS_HUB_DINOV3,
            "embeddings/cls_token",
            resampling=("bicubic", False),  # no table: rotary embeddings
            numerics={"gelu_approximate": False, "layer_norm_epsilon": 1e-5},
            ignorable=("embeddings/mask_token",),
            prepare=special_cases.keras_hub_dinov3_prepare,
        ),
        Layout(
            "keras_hub_dinov2",
            "embeddings/interpolated_position_embeddings",
            ("",),
            keras_hub_table.KERAS_HUB_DINOV2,
            "embeddings/cls_token",
            resampling=("bicubic", False),
            numerics={"gelu_approximate": False, "layer_norm_epsilon": 1e-6},
            ignorable=("embeddings/mask_token", "embeddings/position_embeddings"),
            prepare=special_cases.keras_hub_registers_prepare,
        ),
        # keras-hub's SigLIP and CLIP vision towers (keras_hub_config.read_weights): of a
        # two-tower backbone, the text tower, its projection and the similarity head go unused.
        Layout(
            "keras_hub_siglip",
            "head/attention/query/kernel",
            ("",),
            keras_hub_table.KERAS_HUB_SIGLIP,
            "embedding/class_embedding",  # none: SigLIP has no class token
            resampling=("bicubic", False),
            numerics={"layer_norm_epsilon": 1e-6},  # its final norm's, fixed
            ignorable=("embedding/position_ids", "siglip_head/", keras_hub_table.TEXT_PREFIX),
            prepare=special_cases.keras_hub_siglip_prepare,
        ),
        Layout(
            "keras_hub_clip",
            "embedding/class_embedding",
            ("",),
            keras_hub_table.KERAS_HUB_CLIP,
            "embedding/class_embedding",
            resampling=("bicubic", False),
            numerics={"layer_norm_epsilon": 1e-5},  # fixed in its layers
            ignorable=("embedding/position_ids", "text_projection/", "clip_head/", keras_hub_table.TEXT_PREFIX),
            prepare=special_cases.keras_hub_positions_prepare,
        ),
        # keras-hub's ViT preset folders (keras_hub_config.read_weights).
        Layout(
            "keras_hub_vit",
            "vit_patching_and_embedding/patch_embedding/kernel",
            ("",),
            keras_hub_table.KERAS_HUB_VIT,
            "vit_patching_and_embedding/class_token",
            resampling=("bicubic", False),
            numerics={"gelu_approximate": False, "layer_norm_epsilon": 1e-6},
        ),
        # keras-vit's own .keras files: the identity.
        Layout(
            "keras",
            "patch_embedding/kernel",
            ("",),
            None,
            "class_token/token",
            resampling=("bicubic", True),
            ignorable=("pre_logits/",),
            file_grid=_keras_grid,
        ),
    )
}


def _prefix(layout, arrays):
    """The wrapper prefix under which ``arrays`` carry ``layout``'s signature, or None."""
    return next((prefix for prefix in layout.prefixes if prefix + layout.signature in arrays), None)


def detect_layout(arrays):
    """``(Layout, arrays without the wrapper prefix)`` from the key names alone."""
    matches = {name: prefix for name, layout in LAYOUTS.items() if (prefix := _prefix(layout, arrays)) is not None}
    refined = {general for name in matches for general in LAYOUTS[name].refines}
    meant = sorted(name for name in matches if name not in refined)
    if len(meant) > 1:
        raise ValueError(
            f"The checkpoint's keys carry the signatures of the layouts {', '.join(meant)}, and no layout's "
            "record refines the others (Layout.refines): which one it is cannot be told from its keys."
        )
    if not meant:
        sample = ", ".join(sorted(arrays)[:6])
        raise ValueError(
            "Unrecognised checkpoint layout: expected the original ViT .npz, a timm or an HF "
            f"transformers ViT state dict, or a keras-vit model; its first keys are: {sample}."
        )
    layout, prefix = LAYOUTS[meant[0]], matches[meant[0]]
    stripped = {k[len(prefix) :]: v for k, v in arrays.items() if k.startswith(prefix)}
    # Keys outside the prefix (HF's `classifier.*`) are kept as they are.
    stripped.update({k: v for k, v in arrays.items() if not k.startswith(prefix)})
    return layout, stripped
