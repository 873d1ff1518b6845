"""One record per upstream checkpoint layout: everything that one source of files means.

A record says how a file of that layout is recognised (a key only it has, and the prefixes
that training wrappers add), which column of ``table.py`` maps its keys, how its peer
resamples position embeddings at another size, the numerics its checkpoints were trained
with (``ViTSpec`` and ``ResNetSpec`` fields), and its special cases. A new upstream source
is one record here and one column in ``table.py``.
"""

import dataclasses
import json
import os
import re
import typing

import numpy as np

from keras_vit.checkpoints import table, timm_config


def _no_special_cases(spec, arrays):
    return arrays


def _timm_final_norm(spec, arrays):
    """timm names the final norm ``fc_norm`` when it follows the pooling; rename it to our
    single ``encoder_norm`` row once the model is known to pool the same way."""
    after = "fc_norm.weight" in arrays
    if spec is not None and after != spec.norm_after_pool:
        raise ValueError(
            "The timm checkpoint applies its final LayerNorm "
            + ("after pooling (`fc_norm`)" if after else "before pooling (`norm`)")
            + f" but the model has norm_after_pool={spec.norm_after_pool}: build it "
            f"with norm_after_pool={after}."
        )
    return {("norm." + k[len("fc_norm.") :] if k.startswith("fc_norm.") else k): v for k, v in arrays.items()}


def _timm_structure(spec, arrays):
    """The options a timm file's keys show (the distillation token, registers, the norms and their kind, the
    biases, LayerScale, a SwiGLU MLP) must be the model's: else it would load without
    error and compute another function, or leave weights unused."""
    if spec is None:
        return
    found = {
        "num_register_tokens": int(arrays["reg_token"].shape[1]) if "reg_token" in arrays else 0,
        "distillation_token": "dist_token" in arrays,
        "pre_norm": "norm_pre.weight" in arrays,
        "patch_bias": "patch_embed.proj.bias" in arrays,
        "layer_scale_init": "blocks.0.ls1.gamma" in arrays,
        "final_norm": "norm.weight" in arrays or "fc_norm.weight" in arrays,
        "patch_norm": "patch_embed.norm.weight" in arrays,
        "proj_bias": "blocks.0.attn.proj.bias" in arrays,
        "norm_type": "rmsnorm"
        if "blocks.0.norm1.weight" in arrays and "blocks.0.norm1.bias" not in arrays
        else "layernorm",
        "gated_mlp": "blocks.0.mlp.fc1_g.weight" in arrays or None,  # GluMlp's fused fc1: not told by its keys
        "qkv_bias": "blocks.0.attn.qkv.bias" in arrays,
        "attention_norm": "blocks.0.attn.norm.weight" in arrays,
        "mlp_norm": "blocks.0.mlp.norm.weight" in arrays,
        # A learned table, or none: a RoPE model's (a sincos2d one saves none either).
        "position_embedding": "learned"
        if "pos_embed" in arrays
        else ("none" if spec.position_embedding == "learned" else None),
    }
    has = {
        "num_register_tokens": spec.num_register_tokens,
        "distillation_token": spec.distillation_token,
        "pre_norm": spec.pre_norm,
        "patch_bias": spec.patch_bias,
        "layer_scale_init": spec.layer_scale_init is not None,
        "final_norm": spec.final_norm,
        "patch_norm": spec.patch_norm,
        "proj_bias": spec.proj_bias,
        "norm_type": spec.norm_type,
        "gated_mlp": spec.gated_mlp,
        "qkv_bias": spec.qkv_bias,
        "attention_norm": spec.attention_norm,
        "mlp_norm": spec.mlp_norm,
        "position_embedding": spec.position_embedding,
    }
    differ = [name for name in found if found[name] is not None and found[name] != has[name]]
    if differ:
        wanted = ", ".join(
            f"layer_scale_init={'a number' if found[n] else None}" if n == "layer_scale_init" else f"{n}={found[n]}"
            for n in differ
        )
        now = ", ".join(f"{n}={getattr(spec, n)!r}" for n in differ)
        raise ValueError(f"The timm checkpoint needs a model built with {wanted}; this one has {now}.")


def _timm_gated_mlps(arrays):
    """timm's SwiGLU keeps the gate and the value projections apart (``fc1_g``, ``fc1_x``);
    keras-vit's gated MLP has them in one ``fc1``, gate first (as timm's ``GluMlp`` with
    ``gate_last=False``)."""
    gates = [k for k in arrays if ".mlp.fc1_g." in k]
    if not gates:
        return arrays
    arrays = dict(arrays)
    for gate in gates:
        value = gate.replace(".fc1_g.", ".fc1_x.")
        arrays[gate.replace(".fc1_g.", ".fc1.")] = np.concatenate(
            [np.asarray(arrays.pop(gate)), np.asarray(arrays.pop(value))]
        )
    return arrays


_EVA_NAMES = re.compile(r"blocks\.(\d+)\.(gamma_[12]|attn\.[qv]_bias|attn\.q_proj\.weight)$")


def _timm_eva_names(arrays):
    """timm's ``Eva`` (DINOv3, EVA) and ``Beit`` name LayerScale ``gamma_1``/``gamma_2`` and
    keep the query and value biases apart (``q_bias``, ``v_bias``; the key has none, a zero
    buffer they do not save), or the three projections (EVA-02's ``q_proj``, ``k_proj``,
    ``v_proj``, the key's without a bias): said in ``VisionTransformer``'s names,
    ``ls1.gamma`` and one ``qkv`` with zeros for the key's bias."""
    if not any(_EVA_NAMES.match(k) for k in arrays):
        return arrays
    arrays = dict(arrays)
    for key in [k for k in arrays if _EVA_NAMES.match(k)]:
        block, what = _EVA_NAMES.match(key).groups()
        if what.startswith("gamma_"):
            arrays[f"blocks.{block}.ls{what[-1]}.gamma"] = arrays.pop(key)
        elif what == "attn.q_bias":
            query = np.asarray(arrays.pop(key))
            value = np.asarray(arrays.pop(f"blocks.{block}.attn.v_bias"))
            arrays[f"blocks.{block}.attn.qkv.bias"] = np.concatenate([query, np.zeros_like(query), value])
        elif what == "attn.q_proj.weight":  # separate projections (a v_bias went with its q_bias)
            attn = f"blocks.{block}.attn."
            weights = [np.asarray(arrays.pop(f"{attn}{n}_proj.weight")) for n in "qkv"]
            arrays[attn + "qkv.weight"] = np.concatenate(weights)
            if attn + "q_proj.bias" in arrays:
                query, value = (np.asarray(arrays.pop(f"{attn}{n}_proj.bias")) for n in "qv")
                arrays[attn + "qkv.bias"] = np.concatenate([query, np.zeros_like(query), value])
    return arrays


def _timm_prepare(spec, arrays):
    arrays = _timm_eva_names(arrays)
    _timm_structure(spec, arrays)
    return _timm_final_norm(spec, _timm_gated_mlps(arrays))


def _hf_prepare(spec, arrays):
    """DeiT's teacher model names its class-token head ``cls_classifier``: the ``classifier`` of the others."""
    renamed = {("classifier." + k[len("cls_classifier.") :] if k.startswith("cls_classifier.") else k): v
               for k, v in arrays.items()}  # fmt: skip
    return renamed


def _hf_registers_prepare(spec, arrays):
    """DINOv2 with registers adds the class token's position embedding before it inserts
    the registers, which get none: the same sum as the class token plus that row, and a
    table of the patches' rows alone (``embed_prefix_tokens=False``)."""
    table_key, token_key = "embeddings.position_embeddings", "embeddings.cls_token"
    if spec is not None and spec.embed_prefix_tokens:
        raise ValueError(
            "A DINOv2-with-registers checkpoint gives its registers no position embedding: build the model "
            "with embed_prefix_tokens=False."
        )
    arrays = dict(arrays)
    table = np.asarray(arrays[table_key])
    arrays[token_key] = np.asarray(arrays[token_key]) + table[:, :1]
    arrays[table_key] = table[:, 1:]
    return arrays


def _zero_biases(arrays, names, separator=".", weight="weight", out_axis=0):
    """Where some of an attention's query, key and value projections have a bias and others
    none (BEiT's and DINOv3's key), the missing ones as zeros. ``names``: the three
    projections' names (``("query", "key", "value")``), each followed by ``separator`` and
    ``weight``, whose axis ``out_axis`` is the outputs' (torch's 0, a Keras kernel's -1)."""
    arrays = dict(arrays)
    sep = re.escape(separator)
    pattern = re.compile(rf"(.*{sep})({'|'.join(names)}){sep}{weight}$")
    for key in list(arrays):
        match = pattern.match(key)
        if not match:
            continue
        biases = [f"{match.group(1)}{name}{separator}bias" for name in names]
        mine = f"{match.group(1)}{match.group(2)}{separator}bias"
        if mine not in arrays and any(b in arrays for b in biases):
            arrays[mine] = np.zeros(np.shape(arrays[key])[out_axis], np.asarray(arrays[key]).dtype)
    return arrays


def _hf_beit_prepare(spec, arrays):
    """BEiT's key has no bias (zeros), and with mean pooling its final norm follows the
    pooling (``pooler.layernorm``, timm's ``fc_norm``)."""
    arrays = _zero_biases(_hf_prepare(spec, arrays), ("query", "key", "value"))
    after = "pooler.layernorm.weight" in arrays
    if spec is not None and after != spec.norm_after_pool:
        raise ValueError(
            f"The BEiT checkpoint applies its final LayerNorm {'after' if after else 'before'} pooling but the model "
            f"has norm_after_pool={spec.norm_after_pool}: build it with norm_after_pool={after}."
        )
    return {("layernorm." + k[len("pooler.layernorm.") :] if k.startswith("pooler.layernorm.") else k): v
            for k, v in arrays.items()}  # fmt: skip


def _hf_dinov3_prepare(spec, arrays):
    """DINOv3's attention has a bias on the query and value alone (by default): the key's is
    zeros. Its MLP is ``up_proj`` then ``down_proj``, or gated, ``gate_proj`` beside
    ``up_proj``: keras-vit's ``fc1`` (gate first) and ``fc2``."""
    arrays = _zero_biases(arrays, ("q_proj", "k_proj", "v_proj"))
    for key in [k for k in arrays if ".mlp.up_proj." in k]:
        gate = key.replace(".up_proj.", ".gate_proj.")
        value = np.asarray(arrays.pop(key))
        fc1 = np.concatenate([np.asarray(arrays.pop(gate)), value]) if gate in arrays else value
        arrays[key.replace(".up_proj.", ".fc1.")] = fc1
    for key in [k for k in arrays if ".mlp.down_proj." in k]:
        arrays[key.replace(".down_proj.", ".fc2.")] = arrays.pop(key)
    return arrays


def _keras_hub_registers_prepare(spec, arrays):
    """keras-hub's DINOv2 adds the class token's position embedding before it inserts the
    registers, as transformers' does: folded into the class token (see ``_hf_registers_prepare``)."""
    if "embeddings/register_tokens" not in arrays:
        return arrays
    arrays = dict(arrays)
    table = np.asarray(arrays["embeddings/interpolated_position_embeddings"])
    arrays["embeddings/cls_token"] = np.asarray(arrays["embeddings/cls_token"]) + table[:, :1]
    arrays["embeddings/interpolated_position_embeddings"] = table[:, 1:]
    return arrays


def _keras_hub_dinov3_prepare(spec, arrays):
    """keras-hub's DINOv3: a missing query, key or value bias as zeros; the MLP's ``up_proj``
    (beside ``gate_proj``, gated) and ``down_proj`` as ``fc1`` (gate first) and ``fc2``
    (Keras kernels: output on the last axis)."""
    arrays = _zero_biases(arrays, ("q_proj", "k_proj", "v_proj"), "/", "kernel", -1)
    for key in [k for k in arrays if "/mlp/up_proj/" in k]:
        gate = key.replace("/up_proj/", "/gate_proj/")
        value = np.asarray(arrays.pop(key))
        arrays[key.replace("/up_proj/", "/fc1/")] = (
            np.concatenate([np.asarray(arrays.pop(gate)), value], axis=-1) if gate in arrays else value
        )
    for key in [k for k in arrays if "/mlp/down_proj/" in k]:
        arrays[key.replace("/down_proj/", "/fc2/")] = arrays.pop(key)
    return arrays


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
    config_json = os.path.join(os.path.dirname(path), "config.json")
    if not os.path.isfile(config_json):
        return {}
    with open(config_json) as f:
        options = spec_options_from_hf_config({"hidden_act": "gelu", **json.load(f)})
    return {k: v for k, v in options.items() if k in ("gelu_approximate", "layer_norm_epsilon")}


def _timm_config_numerics(path):
    """A timm hub folder's ``config.json`` names its architecture, whose numerics are known."""
    config_json = os.path.join(os.path.dirname(path), "config.json")
    if not os.path.isfile(config_json):
        return {}
    try:
        with open(config_json) as f:
            options = timm_config.from_hub_config(json.load(f))[0]
    except ValueError:  # not timm's, or an architecture keras-vit does not build
        return {}
    return {k: options[k] for k in ("gelu_approximate", "layer_norm_epsilon", "mlp_activation")}


def _hf_grid(path):
    """An HF checkpoint's patch grid, from the ``config.json`` beside it."""
    config_json = os.path.join(os.path.dirname(path), "config.json")
    if not os.path.isfile(config_json):
        return None
    with open(config_json) as f:
        config = json.load(f)
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
    fields = {f.name for f in dataclasses.fields(ViTSpec)}
    try:
        return ViTSpec.from_config({k: v for k, v in config.items() if k in fields}).grid_size
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
    prepare: typing.Callable = _no_special_cases
    file_numerics: typing.Callable = lambda path: {}
    file_grid: typing.Callable = lambda path: None

    def find_source(self, path):
        """The ``Source`` and regex groups for one Keras variable path, or ``(None, None)``."""
        if self.rows is None:
            return table.Source(path, lambda a: a), ()
        for pattern, source in self.rows:
            match = re.fullmatch(pattern, path)
            if match:
                return source, match.groups()
        return None, None


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
            ("", "module.", "model."),
            _column(2, table.RESNET_TIMM),
            "cls_token",
            resampling=("bicubic", True),  # checkpoint_filter_fn
            numerics={"gelu_approximate": False, "layer_norm_epsilon": 1e-6},
            # StdConv2dSame(eps=1e-8) and torch's GroupNorm.
            resnet_numerics={"std_conv_form": "var_eps", "std_conv_epsilon": 1e-8, "group_norm_epsilon": 1e-5},
            prepare=_timm_prepare,
            file_numerics=_timm_config_numerics,
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
        # Before "hf_dinov2_registers": its files have that layout's signature too.
        Layout(
            "hf_dinov3",
            "embeddings.patch_embeddings.weight",
            ("",),
            table.HF_DINOV3,
            "embeddings.cls_token",
            resampling=("bicubic", False),  # no table to resample: rotary embeddings fit any grid
            numerics={"gelu_approximate": False, "layer_norm_epsilon": 1e-5},
            ignorable=("embeddings.mask_token",),
            prepare=_hf_dinov3_prepare,
            file_numerics=_hf_config_numerics,
            file_grid=_hf_grid,
        ),
        # Before "hf_dinov2" and "hf": its files have their signatures too.
        Layout(
            "hf_dinov2_registers",
            "embeddings.register_tokens",
            ("", "dinov2_with_registers."),
            [*table.HF_DINOV2, (r"register_tokens/tokens", table.same("embeddings.register_tokens"))],
            "embeddings.cls_token",
            resampling=("bicubic", True),  # its interpolate_pos_encoding antialiases
            numerics={"gelu_approximate": False, "layer_norm_epsilon": 1e-6},
            ignorable=("embeddings.mask_token",),
            prepare=_hf_registers_prepare,
            file_numerics=_hf_config_numerics,
            file_grid=_hf_grid,
        ),
        # Before "hf": its files have that layout's signature too.
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
        ),
        # Before "hf": BeitModel's files (without a prefix) have its signature too.
        Layout(
            "hf_beit",
            "encoder.layer.0.lambda_1",
            ("beit.", "data2vec_vision.", ""),
            [*_column(3), *table.HF_BEIT],
            "embeddings.cls_token",
            resampling=("bicubic", False),
            numerics={"gelu_approximate": False, "layer_norm_epsilon": 1e-12},
            ignorable=("embeddings.mask_token",),
            prepare=_hf_beit_prepare,
            file_numerics=_hf_config_numerics,
            file_grid=_hf_grid,
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
            prepare=_hf_prepare,
            file_numerics=_hf_config_numerics,
            file_grid=_hf_grid,
        ),
        # keras-hub's DINOv2 and DINOv3 preset folders (keras_hub_config.read_weights).
        Layout(
            "keras_hub_dinov3",
            "encoder/layers_0/attention/q_proj/kernel",
            ("",),
            table.KERAS_HUB_DINOV3,
            "embeddings/cls_token",
            resampling=("bicubic", False),  # no table: rotary embeddings
            numerics={"gelu_approximate": False, "layer_norm_epsilon": 1e-5},
            ignorable=("embeddings/mask_token",),
            prepare=_keras_hub_dinov3_prepare,
        ),
        Layout(
            "keras_hub_dinov2",
            "embeddings/interpolated_position_embeddings",
            ("",),
            table.KERAS_HUB_DINOV2,
            "embeddings/cls_token",
            resampling=("bicubic", False),
            numerics={"gelu_approximate": False, "layer_norm_epsilon": 1e-6},
            ignorable=("embeddings/mask_token", "embeddings/position_embeddings"),
            prepare=_keras_hub_registers_prepare,
        ),
        # keras-hub's ViT preset folders (keras_hub_config.read_weights).
        Layout(
            "keras_hub_vit",
            "vit_patching_and_embedding/patch_embedding/kernel",
            ("",),
            table.KERAS_HUB_VIT,
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


def detect_layout(arrays):
    """``(Layout, arrays without the wrapper prefix)`` from the key names alone."""
    for layout in LAYOUTS.values():
        for prefix in layout.prefixes:
            if prefix + layout.signature in arrays:
                stripped = {k[len(prefix) :]: v for k, v in arrays.items() if k.startswith(prefix)}
                # Keys outside the prefix (HF's `classifier.*`) are kept as they are.
                stripped.update({k: v for k, v in arrays.items() if not k.startswith(prefix)})
                return layout, stripped
    sample = ", ".join(sorted(arrays)[:6])
    raise ValueError(
        "Unrecognised checkpoint layout: expected the original ViT .npz, a timm or an HF "
        f"transformers ViT state dict, or a keras-vit model; its first keys are: {sample}."
    )
