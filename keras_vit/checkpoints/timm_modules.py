"""timm's other ViT constructors, ``Eva`` and ``Beit``, their arguments said as its
``VisionTransformer``'s, which ``keras_vit.checkpoints.timm_config`` turns into a spec.

timm builds EVA, DINOv3, Perception Encoder, Sapiens 2 (``Eva``) and BEiT (``Beit``) with
constructors of their own, whose arguments name the same choices in other words
(``use_rot_pos_emb``, ``swiglu_mlp``, ``use_rel_pos_bias``): a row of
``timm_architectures.ARCHITECTURES`` marked ``'module': 'eva'`` or ``'beit'`` is translated
here first (``MODULES``), so that one reader of timm's arguments builds every spec.
"""

# Arguments that change nothing keras-vit builds (drop rates are the recipe's).
IGNORED = ("drop_rate", "pos_drop_rate", "patch_drop_rate", "proj_drop_rate", "attn_drop_rate", "drop_path_rate",
            "weight_init", "fix_init", "dynamic_img_pad")  # fmt: skip


class UnsupportedArchitectureError(ValueError):
    """A timm architecture keras-vit cannot build (yet): the message says which part."""


# timm's Eva defaults for the arguments read here (its norm_layer: timm's LayerNorm, eps 1e-6).
_EVA_DEFAULTS = dict(
    img_size=224, patch_size=16, in_chans=3, num_classes=1000, global_pool="avg", embed_dim=768, depth=12,
    num_heads=12, num_kv_heads=None, qkv_bias=True, qkv_fused=True, qk_norm=False, mlp_ratio=4.0, swiglu_mlp=False,
    swiglu_align_to=0, scale_mlp=False, scale_attn_inner=False, attn_type="eva", norm_layer="layernorm:1e-06",
    init_values=None, attn_only_layer_scale=False, class_token=True, num_reg_tokens=0, no_embed_class=False,
    use_abs_pos_emb=True, use_rot_pos_emb=False, rope_type="cat", rope_grid_offset=0.0, rope_grid_indexing="ij",
    rope_temperature=10000.0, rope_rotate_half=False, rope_mrope_section=None, ref_feat_shape=None,
    use_post_norm=False, use_pre_transformer_norm=False, use_post_transformer_norm=None, use_fc_norm=None,
    attn_pool_num_heads=None, attn_pool_mlp_ratio=None, dynamic_img_size=False,
)  # fmt: skip
# Eva arguments that change nothing keras-vit computes at inference: the drop rates (the
# recipe's), the head's initial scale, and DINOv3's training-time jitter of the rotary
# coordinates (keras-vit's training leaves the coordinates as they are).
_EVAIGNORED = IGNORED + ("head_init_scale", "rope_shift_coords", "rope_jitter_coords", "rope_rescale_coords")
# What keras-vit does not build yet of an Eva, by argument and the value it builds.
_EVA_NOT_YET = {
    "rope_mrope_section": (None, "multimodal rotary embeddings"),
}


# timm's Beit defaults for the arguments read here (its norm_layer: timm's LayerNorm, eps 1e-6).
_BEIT_DEFAULTS = dict(
    img_size=224, patch_size=16, in_chans=3, num_classes=1000, global_pool="avg", embed_dim=768, depth=12,
    num_heads=12, qkv_bias=True, mlp_ratio=4.0, swiglu_mlp=False, scale_mlp=False, norm_layer="layernorm:1e-06",
    init_values=None, use_abs_pos_emb=True, use_rel_pos_bias=False, use_shared_rel_pos_bias=False, use_fc_norm=None,
)  # fmt: skip
_BEIT_NOT_YET = {
    "use_shared_rel_pos_bias": (False, "one relative position bias shared by the blocks (BEiT's pre-training)"),
}


def beit_as_vision_transformer(args):
    """A ``Beit``'s arguments (a ``beit`` row of the table) as ``VisionTransformer``'s, plus
    ``relative_position_bias``; what keras-vit does not build yet raises
    ``UnsupportedArchitectureError``.

    >>> from keras_vit.checkpoints.timm_architectures import ARCHITECTURES
    >>> vit = beit_as_vision_transformer(dict(ARCHITECTURES["beitv2_base_patch16_224"]))
    >>> vit["relative_position_bias"], vit["pos_embed"], vit["global_pool"], vit["fc_norm"]
    (True, 'none', 'avg', True)
    """
    ignored = IGNORED + ("head_init_scale",)
    args = {**_BEIT_DEFAULTS, **{k: v for k, v in args.items() if k not in ignored and k != "module"}}
    unknown = sorted(set(args) - set(_BEIT_DEFAULTS))
    if unknown:
        raise UnsupportedArchitectureError(f"timm Beit arguments keras-vit does not know: {', '.join(unknown)}.")
    problems = [f"{k}={args[k]!r} ({why})" for k, (built, why) in _BEIT_NOT_YET.items() if args[k] != built]
    if problems:
        raise UnsupportedArchitectureError(f"keras-vit does not build these timm options yet: {'; '.join(problems)}.")
    fc_norm = args["global_pool"] == "avg" if args["use_fc_norm"] is None else bool(args["use_fc_norm"])
    same = ("img_size", "patch_size", "in_chans", "num_classes", "global_pool", "embed_dim", "depth", "num_heads",
            "qkv_bias", "mlp_ratio", "norm_layer")  # fmt: skip
    vit = {k: args[k] for k in same}
    return dict(
        vit,
        init_values=args["init_values"] or None,  # Beit: 0 is none
        pos_embed="learn" if args["use_abs_pos_emb"] else "none",
        fc_norm=fc_norm,
        mlp_layer="swiglu" if args["swiglu_mlp"] else "mlp",
        act_layer="silu" if args["swiglu_mlp"] else "gelu",
        relative_position_bias=bool(args["use_rel_pos_bias"]),
        scale_mlp_norm=args["scale_mlp"],
    )


def eva_as_vision_transformer(args):
    """An ``Eva``'s arguments (an ``eva`` row of the table) as ``VisionTransformer``'s, plus
    the rotary embeddings' (``rope``, ``rope_temperature``); what keras-vit does not build
    yet raises ``UnsupportedArchitectureError``.

    >>> from keras_vit.checkpoints.timm_architectures import ARCHITECTURES
    >>> vit = eva_as_vision_transformer(dict(ARCHITECTURES["vit_small_patch16_dinov3"]))
    >>> vit["rope"], vit["pos_embed"], vit["reg_tokens"], vit["global_pool"], vit["fc_norm"]
    ('dinov3', 'none', 4, 'avg', False)
    """
    args = {**_EVA_DEFAULTS, **{k: v for k, v in args.items() if k not in _EVAIGNORED and k != "module"}}
    unknown = sorted(set(args) - set(_EVA_DEFAULTS))
    if unknown:
        raise UnsupportedArchitectureError(f"timm Eva arguments keras-vit does not know: {', '.join(unknown)}.")
    problems = [f"{k}={args[k]!r} ({why})" for k, (built, why) in _EVA_NOT_YET.items() if args[k] != built]
    # timm's EvaAttention and AttentionRope compute the same where neither's extras are on
    # (grouped-query heads, a gate: refused above or not in the rows).
    if args["attn_type"] not in ("eva", "rope"):
        problems.append(f"attn_type={args['attn_type']!r} (this attention)")
    rope = None
    if args["use_rot_pos_emb"]:
        # timm's rotary forms keras-vit builds, in the layout each takes (rotate_half: the halves).
        rope, half = {"dinov3": ("dinov3", True), "cat": ("axial", False), "mixed": ("mixed", False)}.get(
            args["rope_type"], (None, None)
        )
        if rope is None:
            problems.append(f"rope_type={args['rope_type']!r} (rotary embeddings of timm's {args['rope_type']} form)")
        elif bool(args["rope_rotate_half"]) != half:
            problems.append(f"rope_rotate_half={args['rope_rotate_half']} (timm's {args['rope_type']} rotary "
                            "embeddings in the other layout)")  # fmt: skip
    elif args["ref_feat_shape"] is not None:
        problems.append("ref_feat_shape without rotary embeddings")
    if problems:
        raise UnsupportedArchitectureError(f"keras-vit does not build these timm options yet: {'; '.join(problems)}.")
    fc_norm = args["global_pool"] == "avg" if args["use_fc_norm"] is None else bool(args["use_fc_norm"])
    final_norm = not fc_norm if args["use_post_transformer_norm"] is None else bool(args["use_post_transformer_norm"])
    hidden = int(args["embed_dim"] * args["mlp_ratio"])
    if args["swiglu_mlp"] and args["swiglu_align_to"]:
        hidden += -hidden % args["swiglu_align_to"]
    vit = {k: args[k] for k in ("img_size", "patch_size", "in_chans", "num_classes", "global_pool", "embed_dim",
                                "depth", "num_heads", "qkv_bias", "init_values", "class_token", "no_embed_class",
                                "norm_layer", "dynamic_img_size")}  # fmt: skip
    return dict(
        vit,
        mlp_ratio=hidden / args["embed_dim"],
        reg_tokens=args["num_reg_tokens"],
        pos_embed="learn" if args["use_abs_pos_emb"] else "none",
        pre_norm=args["use_pre_transformer_norm"],
        fc_norm=fc_norm,
        # fc_norm is the final norm where there is one; with neither, timm's final_norm=False.
        final_norm=final_norm or fc_norm,
        # Eva's SwiGLU keeps the gate and value apart (SwiGLU) or packs them (GluMlp): keras-vit's gated MLP either way.
        mlp_layer="swiglu" if args["swiglu_mlp"] else "mlp",
        act_layer="silu" if args["swiglu_mlp"] else "gelu",
        rope=rope,
        rope_temperature=float(args["rope_temperature"]) if rope else None,
        rope_reference_grid=tuple(args["ref_feat_shape"]) if rope and args["ref_feat_shape"] is not None else None,
        rope_grid_indexing=args["rope_grid_indexing"],
        rope_grid_offset=float(args["rope_grid_offset"]) if rope else 0.0,
        num_kv_heads=_kv_heads(args["num_kv_heads"], args["num_heads"]),
        qk_norm=bool(args["qk_norm"]),
        attn_only_layer_scale=bool(args["attn_only_layer_scale"]),
        block_fn="respostblock" if args["use_post_norm"] else "block",
        # Eva's attention pooling reads every token, the prefix ones too.
        pool_include_prefix=args["global_pool"] == "map",
        attn_pool_num_heads=args["attn_pool_num_heads"],
        attn_pool_mlp_ratio=args["attn_pool_mlp_ratio"],
        scale_attn_norm=args["scale_attn_inner"],
        scale_mlp_norm=args["scale_mlp"],
    )


def _kv_heads(heads, num_heads):
    """Eva's ``num_kv_heads`` (None, one count, or one per block, None in a block for
    ``num_heads``) as the spec's: None where no block groups its heads."""
    if heads is None or isinstance(heads, int):
        return None if heads in (None, num_heads) else heads
    heads = tuple(num_heads if h is None else int(h) for h in heads)
    return None if set(heads) == {num_heads} else heads


# The other constructors' arguments, said as VisionTransformer's (the table's 'module').
MODULES = {"eva": eva_as_vision_transformer, "beit": beit_as_vision_transformer}
