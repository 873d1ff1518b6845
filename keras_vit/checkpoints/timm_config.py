"""timm's names and ``config.json`` files as keras-vit specs and pre-processing.

timm's hub folders (``timm/<architecture>.<tag>`` on the Hugging Face hub, or what
``timm.models.push_to_hf_hub`` / ``save_for_hf`` write) hold a ``config.json``: the
``architecture`` (a name in ``timm_architectures.ARCHITECTURES``, whose row holds the
arguments timm's factory passes to its ``VisionTransformer``, or to its ``Eva`` for the
rows marked ``'module': 'eva'``), the ``model_args`` the folder was made with on top of
those (``num_classes``, ``img_size``, ``depth``, ...), and the ``pretrained_cfg`` with the
pre-processing it was evaluated with. ``spec_options`` turns the arguments into ``ViTSpec``
fields, or names what keras-vit does not build yet; an ``Eva``'s or a ``Beit``'s arguments
are first said as a ``VisionTransformer``'s (``keras_vit.checkpoints.timm_modules``).
"""

import difflib
import functools

from keras_vit.checkpoints.timm_architectures import ARCHITECTURES
from keras_vit.checkpoints.timm_modules import IGNORED, MODULES, UnsupportedArchitectureError
from keras_vit.vocabulary import CROP_MODES, NORM_TYPES

# timm's VisionTransformer defaults for the arguments read here.
_DEFAULTS = dict(
    img_size=224, patch_size=16, in_chans=3, num_classes=1000, global_pool="token", embed_dim=768, depth=12,
    num_heads=12, mlp_ratio=4.0, qkv_bias=True, qk_norm=False, proj_bias=True, init_values=None, class_token=True,
    pos_embed="learn", no_embed_class=False, reg_tokens=0, pre_norm=False, final_norm=True, fc_norm=None,
    dynamic_img_size=False, act_layer="gelu", norm_layer="layernorm:1e-06", embed_norm_layer=None, mlp_layer="mlp",
    distilled=False, rope=None, rope_temperature=None, rope_reference_grid=None, rope_grid_indexing="ij",
    relative_position_bias=False,
    scale_attn_norm=False, scale_mlp_norm=False, pool_include_prefix=False, block_fn="block", rope_grid_offset=0.0,
    attn_pool_num_heads=None, attn_pool_mlp_ratio=None, num_kv_heads=None, attn_only_layer_scale=False,
    attn_layer="attention",
)  # fmt: skip
# timm's activations by the names the table writes: (mlp_activation, gelu_approximate).
_ACTIVATIONS = {
    "gelu": ("gelu", False), "gelu_tanh": ("gelu", True), "quick_gelu": ("quick_gelu", False), "silu": ("silu", False),
}  # fmt: skip
# timm's MLPs by the names the table writes: (gated, hidden width per fc1 width, activation
# that overrides act_layer). GluMlp's fc1 holds gate then value (gate_last=False) in its width.
_MLPS = {"mlp": (False, 1, None), "swiglu": (True, 1, None), "glumlp:act_layer=silu,gate_last=False": (True, 2, "silu")}
_POOLINGS = {"token": "token", "avg": "gap", "map": "map"}
# What keras-vit does not build yet, by argument: why an architecture that uses it fails.
_NOT_YET = {
    "global_pool": "pooling other than 'token', 'avg' and 'map'",
    "act_layer": "this MLP activation",
    "norm_layer": "this norm",
    "embed_norm_layer": "a norm on the patch embedding of another kind than the blocks'",
    "mlp_layer": "this MLP",
    "block_fn": "this block",
    "attn_layer": "this attention",
    "pos_embed": "position embeddings other than timm's learned table",
}
_POSITION_EMBEDDINGS = {"learn": "learned", "none": "none"}  # timm's pos_embed: the spec's
# timm's blocks and attentions by the names the table writes: the spec's options each sets
# (ResPostBlock's norms on the branches' outputs start at init_values, where the others'
# LayerScale does).
_BLOCKS = {
    "block": {},
    "respostblock": dict(residual_post_norm=True),
    "parallelscalingblock": dict(parallel_blocks=True),
    "diffparallelscalingblock": dict(parallel_blocks=True, differential_attention=True),
}
_ATTENTIONS = {"attention": {}, "diff": dict(differential_attention=True)}


def architecture_args(name):
    """The arguments timm's factory passes for the architecture ``name``.

    >>> architecture_args("vit_small_patch16_224")
    {'depth': 12, 'embed_dim': 384, 'num_heads': 6, 'patch_size': 16}
    """
    if name not in ARCHITECTURES:
        close = difflib.get_close_matches(name, ARCHITECTURES, n=3)
        hint = f" Did you mean {', '.join(repr(c) for c in close)}?" if close else ""
        raise UnsupportedArchitectureError(
            f"{name!r} is not one of timm's {len(ARCHITECTURES)} pretrained ViT architectures "
            f"(keras_vit.checkpoints.timm_architectures).{hint}"
        )
    return dict(ARCHITECTURES[name])


def _norm(value):
    """``(norm_type, epsilon)`` from a norm's name in the table (``"rmsnorm:1e-05"``)."""
    kind, _, epsilon = str(value).partition(":")
    return kind, float(epsilon or 1e-5)  # torch's and timm's default


def spec_options(args):
    """``ViTSpec`` fields from timm ``VisionTransformer`` arguments (an architecture's row
    updated with a ``config.json``'s ``model_args``).

    >>> options = spec_options(architecture_args("vit_small_patch14_reg4_dinov2"))
    >>> options["num_register_tokens"], options["embed_prefix_tokens"], options["layer_scale_init"]
    (4, False, 1e-05)
    """
    if args.get("module") in MODULES:
        args = MODULES[args["module"]](args)
    args = {**_DEFAULTS, **{k: v for k, v in args.items() if k not in IGNORED}}
    problems = [k for k in args if k not in _DEFAULTS and k in _NOT_YET]
    unknown = sorted(k for k in args if k not in _DEFAULTS and k not in _NOT_YET)
    if unknown:
        raise UnsupportedArchitectureError(f"timm arguments keras-vit does not know: {', '.join(unknown)}.")
    checks = {
        "global_pool": args["global_pool"] in _POOLINGS or (args["global_pool"] == "" and args["num_classes"] == 0),
        "act_layer": args["act_layer"] in _ACTIVATIONS,
        "norm_layer": _norm(args["norm_layer"])[0] in NORM_TYPES,
        "embed_norm_layer": args["embed_norm_layer"] in (None, args["norm_layer"]),
        "mlp_layer": args["mlp_layer"] in _MLPS,
        "pos_embed": args["pos_embed"] in _POSITION_EMBEDDINGS,
        "block_fn": args["block_fn"] in _BLOCKS,
        "attn_layer": args["attn_layer"] in _ATTENTIONS,
    }
    problems += [k for k, fine in checks.items() if not fine]
    if problems:
        what = "; ".join(f"{k}={args.get(k)!r} ({_NOT_YET[k]})" for k in problems)
        raise UnsupportedArchitectureError(f"keras-vit does not build these timm options yet: {what}.")
    gated, hidden_per_width, mlp_act = _MLPS[args["mlp_layer"]]
    activation, approximate = _ACTIVATIONS[mlp_act or args["act_layer"]]
    norm_type, epsilon = _norm(args["norm_layer"])
    pooling = _POOLINGS.get(args["global_pool"])
    fc_norm = args["global_pool"] == "avg" if args["fc_norm"] is None else bool(args["fc_norm"])
    block = {**_BLOCKS[args["block_fn"]], **_ATTENTIONS[args["attn_layer"]]}
    post_norm = block.get("residual_post_norm", False)
    map_ratio = args["attn_pool_mlp_ratio"]
    return dict(
        image_size=tuple(args["img_size"]) if isinstance(args["img_size"], (list, tuple)) else args["img_size"],
        patch_size=args["patch_size"],
        num_channels=args["in_chans"],
        hidden_size=args["embed_dim"],
        depth=args["depth"],
        num_heads=args["num_heads"],
        mlp_dim=int(args["embed_dim"] * args["mlp_ratio"]) // hidden_per_width,
        qkv_bias=bool(args["qkv_bias"]),
        pooling=pooling,
        class_token=bool(args["class_token"]),
        num_register_tokens=int(args["reg_tokens"]),
        distillation_token=bool(args["distilled"]),
        embed_prefix_tokens=not args["no_embed_class"],
        position_embedding=_POSITION_EMBEDDINGS[args["pos_embed"]],
        rope=args["rope"],
        rope_temperature=None if args["rope_temperature"] is None else float(args["rope_temperature"]),
        rope_reference_grid=args["rope_reference_grid"],
        rope_grid_indexing=args["rope_grid_indexing"],
        rope_grid_offset=float(args["rope_grid_offset"]),
        relative_position_bias=bool(args["relative_position_bias"]),
        attention_norm=bool(args["scale_attn_norm"]),
        pool_include_prefix=bool(args["pool_include_prefix"]),
        map_num_heads=args["attn_pool_num_heads"],
        map_mlp_dim=None if map_ratio is None else int(args["embed_dim"] * map_ratio),
        residual_post_norm=post_norm,
        parallel_blocks=block.get("parallel_blocks", False),
        differential_attention=block.get("differential_attention", False),
        num_kv_heads=args["num_kv_heads"],
        qk_norm=bool(args["qk_norm"]),
        layer_scale_mlp=not args["attn_only_layer_scale"],
        mlp_norm=bool(args["scale_mlp_norm"]),
        pre_norm=bool(args["pre_norm"]),
        patch_bias=not args["pre_norm"],  # timm's VisionTransformer ties the two
        layer_scale_init=None if post_norm else args["init_values"],
        mlp_activation=activation,
        gelu_approximate=approximate,
        gated_mlp=gated,
        proj_bias=bool(args["proj_bias"]),
        norm_type=norm_type,
        patch_norm=args["embed_norm_layer"] is not None,
        layer_norm_epsilon=epsilon,
        norm_after_pool=fc_norm and pooling is not None,
        final_norm=bool(args["final_norm"]),
        dynamic_image_size=bool(args["dynamic_img_size"]),
        num_classes=args["num_classes"] or 1000,
        include_top=bool(args["num_classes"]),
    )


def support(name):
    """None if keras-vit builds the timm architecture ``name``, else why not.

    >>> support("vit_base_patch16_clip_224") is None
    True
    >>> support("vit_dpwee_patch16_reg1_gap_256") is None
    True
    >>> support("vit_base_patch16_224_bad")[:55]
    "'vit_base_patch16_224_bad' is not one of timm's 233 pre"
    """
    try:
        spec_options(architecture_args(name))
    except UnsupportedArchitectureError as error:
        return str(error)
    return None


@functools.cache
def buildable():
    """timm's architectures keras-vit builds, sorted (a tuple).

    >>> len(buildable()) > 100 and "vit_base_patch16_siglip_224" in buildable()
    True
    """
    return tuple(sorted(name for name in ARCHITECTURES if support(name) is None))


def preprocessing_options(pretrained_cfg):
    """``(image_size, ImagePreprocessing arguments)`` from a timm ``pretrained_cfg``.

    >>> size, options = preprocessing_options({"input_size": [3, 224, 224], "interpolation": "bicubic",
    ...                                        "crop_pct": 0.9, "mean": [0.5] * 3, "std": [0.5] * 3})
    >>> size, options["crop_fraction"], options["crop_mode"], options["mean"]
    ((224, 224), 0.9, 'center', (0.5, 0.5, 0.5))
    """
    size = tuple(int(s) for s in pretrained_cfg["input_size"][1:])
    options = dict(
        crop_fraction=float(pretrained_cfg.get("crop_pct", 0.875)),
        crop_mode=pretrained_cfg.get("crop_mode", "center"),
        interpolation=pretrained_cfg.get("interpolation", "bicubic"),
        mean=tuple(float(m) for m in pretrained_cfg.get("mean", (0.485, 0.456, 0.406))),
        std=tuple(float(s) for s in pretrained_cfg.get("std", (0.229, 0.224, 0.225))),
    )
    if options["crop_mode"] not in CROP_MODES:
        raise UnsupportedArchitectureError(
            f"crop_mode={options['crop_mode']!r}: keras-vit's pre-processing takes one of {CROP_MODES}."
        )
    return size, options


def from_hub_config(config):
    """``(ViTSpec options, image size, ImagePreprocessing arguments, class names or None)``
    from a timm ``config.json`` (as a dict)."""
    if not isinstance(config, dict) or "architecture" not in config:
        raise ValueError(
            "Expected a timm config.json with an 'architecture' (as timm's save_for_hf writes); got "
            + (f"keys {sorted(config)[:8]}." if isinstance(config, dict) else f"{type(config).__name__}.")
        )
    args = architecture_args(config["architecture"])
    args.update(config.get("model_args") or {})
    if "num_classes" in config:
        args["num_classes"] = config["num_classes"]
    if "global_pool" in config and "global_pool" not in (config.get("model_args") or {}):
        args["global_pool"] = config["global_pool"]
    options = spec_options(args)
    size, preprocessing = preprocessing_options(config.get("pretrained_cfg") or {"input_size": [3, *_pair(args)]})
    names = config.get("label_names")
    if isinstance(names, dict):  # id -> name, possibly with gaps
        names = [names.get(str(i), names.get(i, str(i))) for i in range(options["num_classes"])]
    if names is not None and len(names) != options["num_classes"]:
        names = None
    return options, size, preprocessing, names


def _pair(args):
    size = args.get("img_size", 224)
    return tuple(size) if isinstance(size, (list, tuple)) else (size, size)
