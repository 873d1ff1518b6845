"""What a spec may be: each field's allowed values and the rules between fields, checked once.

``ViTSpec``, ``ResNetSpec``, ``RotarySpec`` and ``TextSpec`` (``keras_vit.models``) call
``check_vit``, ``check_resnet``, ``check_rotary`` and ``check_text`` when they are made, so a
spec that exists can be built. A rule that a layer also needs (a head width its rotary
embeddings can split, heads that divide the width) is the layer module's own check, called
from here: the layers do not check it again. Each rule is one small function, in the order
the errors are met.
"""

from keras_vit import checks
from keras_vit.layer_rules import (
    check_block_units,
    check_differential_head_width,
    check_end_id,
    check_heads,
    check_kv_heads,
    check_rope_head_width,
    check_std_conv_form,
)
from keras_vit.vocabulary import (
    ATTENTION_POOLING,
    END_OF_TEXT_RULES,
    GRID_INDEXINGS,
    LEARNED_FORMS,
    MLP_ACTIVATIONS,
    NORM_TYPES,
    POOLINGS,
    POSITION_EMBEDDINGS,
    ROPE_FORMS,
)


def one_of(value, allowed, name):
    if value not in allowed:
        raise ValueError(f"{name} must be one of {allowed}, got {value!r}.")


def check_resnet(spec):
    """A ``ResNetSpec``'s rules; returns its ``block_units`` as the layers take them."""
    units = check_block_units(spec.block_units)
    check_std_conv_form(spec.std_conv_form)
    checks.positive_int(spec.width, "resnet width")
    return units


def check_text(spec):
    """A ``TextSpec``'s rules."""
    for name in ("vocabulary_size", "context_length", "hidden_size", "depth", "num_heads", "mlp_dim"):
        checks.positive_int(getattr(spec, name), name)
    check_heads(spec.hidden_size, spec.num_heads, "hidden_size")
    one_of(spec.pooling, END_OF_TEXT_RULES, "pooling")
    check_end_id(spec.pooling, spec.end_id, "pooling")
    if spec.projection_dim is not None:
        checks.positive_int(spec.projection_dim, "projection_dim")
    one_of(spec.mlp_activation, MLP_ACTIVATIONS, "mlp_activation")


def check_vit(spec, rates):
    """Raises ``ValueError`` naming the first rule ``spec`` breaks; ``rates``: the names of
    its dropout rates."""
    _sizes(spec)
    _pooling(spec)
    one_of(spec.position_embedding, POSITION_EMBEDDINGS, "position_embedding")
    one_of(spec.mlp_activation, MLP_ACTIVATIONS, "mlp_activation")
    one_of(spec.norm_type, NORM_TYPES, "norm_type")
    checks.non_negative_int(spec.num_register_tokens, "num_register_tokens")
    if spec.distillation_token:
        _distillation(spec)
    _numbers(spec, rates)
    _kv_heads(spec)
    check_heads(spec.hidden_size, spec.num_heads, "hidden_size")
    _blocks(spec)
    _rope(spec)
    if spec.relative_position_bias:
        _relative_position_bias(spec)
    _divisible(spec)


def _sizes(spec):
    for name in ("patch_size", "hidden_size", "depth", "num_heads", "mlp_dim", "num_channels"):
        checks.positive_int(getattr(spec, name), name)
    if spec.include_top:
        checks.positive_int(spec.num_classes, "num_classes")


def _pooling(spec):
    if spec.pooling is None and spec.include_top:
        raise ValueError("pooling=None is only possible with include_top=False.")
    if spec.pooling is not None:
        one_of(spec.pooling, (*POOLINGS, ATTENTION_POOLING), "pooling")
    if spec.pooling in ("token", "token_gap") and not spec.has_class_token:
        raise ValueError(f"pooling={spec.pooling!r} needs class_token=True.")
    for name in ("map_num_heads", "map_mlp_dim"):
        if getattr(spec, name) is not None:
            checks.positive_int(getattr(spec, name), name)
            if spec.pooling != ATTENTION_POOLING:
                raise ValueError(f"{name} is map pooling's; got pooling={spec.pooling!r}.")
    if spec.pool_include_prefix and spec.pooling not in ("gap", ATTENTION_POOLING):
        raise ValueError(f"pool_include_prefix=True is for pooling 'gap' or 'map'; got pooling={spec.pooling!r}.")
    if spec.pooling == "token_gap" and spec.norm_after_pool:
        raise ValueError("pooling='token_gap' reads the normed tokens: it needs norm_after_pool=False.")


def _distillation(spec):
    # What timm's distilled model allows: its two heads read the first two tokens.
    if not spec.distillation_head:  # the class token's head alone: any pooling of the class token
        if spec.pooling != "token":
            raise ValueError(f"distillation_token=True needs pooling='token'; got pooling={spec.pooling!r}.")
        return
    conflicts = _conflicts(
        spec,
        pooling=spec.pooling in ("token", "gap"),
        num_register_tokens=not spec.num_register_tokens,
        norm_after_pool=not spec.norm_after_pool,
        representation_size=spec.representation_size is None,
        embedding_size=spec.embedding_size is None,
        normalize_embedding=not spec.normalize_embedding,
    )
    if conflicts:
        raise ValueError(
            "distillation_token=True needs pooling='token' or 'gap', no register tokens, norm_after_pool=False "
            "and no representation_size or embedding (its two heads read the pooled features and the distillation "
            "token); got "
            f"{conflicts}."
        )


def _conflicts(spec, **fine):
    """``"name=value, ..."`` of the fields whose rule (``fine[name]``) does not hold."""
    return ", ".join(f"{name}={spec.option(name)!r}" for name, holds in fine.items() if not holds)


def _numbers(spec, rates):
    scale = spec.layer_scale_init
    if scale is not None and (isinstance(scale, bool) or not isinstance(scale, (int, float))):
        raise ValueError(f"layer_scale_init must be a number or None; got {scale!r}.")
    for name in rates:
        rate = getattr(spec, name)
        if isinstance(rate, bool) or not isinstance(rate, (int, float)) or not 0.0 <= rate < 1.0:
            raise ValueError(f"{name} must be a rate in [0, 1); got {rate!r}.")


def _kv_heads(spec):
    heads = spec.num_kv_heads
    if heads is None:
        return
    if isinstance(heads, tuple) and len(heads) != spec.depth:
        raise ValueError(f"num_kv_heads has {len(heads)} counts; expected one per block ({spec.depth}).")
    for count in heads if isinstance(heads, tuple) else (heads,):
        checks.positive_int(count, "num_kv_heads")
        check_kv_heads(spec.num_heads, count)


def _blocks(spec):
    if spec.parallel_blocks and spec.residual_post_norm:
        raise ValueError("parallel_blocks=True has one norm, on the block's input: it takes no residual_post_norm.")
    if spec.differential_attention:
        conflicts = _conflicts(
            spec,
            **{name: not getattr(spec, name) for name in ("rope", "num_kv_heads", "relative_position_bias", "qk_norm")},
        )
        if conflicts:
            raise ValueError(
                "differential_attention=True takes no rotary embeddings, grouped heads, relative position bias "
                f"or query/key norm; got {conflicts}."
            )
        check_differential_head_width(spec.head_dim)


def check_rotary(rope):
    """A ``RotarySpec``'s rules; returns its ``reference_grid`` as the layer takes it."""
    one_of(rope.form, tuple(ROPE_FORMS), "rope")
    one_of(rope.grid_indexing, GRID_INDEXINGS, "rope_grid_indexing")
    if rope.reference_grid is None:
        return None
    if rope.form != "axial":
        raise ValueError(f"rope_reference_grid is the axial rotary embeddings'; got rope={rope.form!r}.")
    return checks.pair(rope.reference_grid, "rope_reference_grid")


def _rope(spec):
    if spec.rope is not None:
        if spec.rope.form in LEARNED_FORMS and spec.num_kv_heads is not None:
            raise ValueError(f"rope={spec.rope.form!r} turns each query head apart: it takes no num_kv_heads.")
        check_rope_head_width(spec.rope.form, spec.head_dim)


def _relative_position_bias(spec):
    # BEiT's index has one row for a class token before the grid, and a table per grid.
    conflicts = _conflicts(
        spec,
        class_token=spec.has_class_token,
        num_register_tokens=not spec.num_register_tokens,
        distillation_token=not spec.distillation_token,
        dynamic_image_size=not spec.dynamic_image_size,
    )
    if conflicts:
        raise ValueError(
            "relative_position_bias=True needs a class token and no other prefix token, and a fixed image size "
            f"(its tables are the grid's); got {conflicts}."
        )


def _divisible(spec):
    for side in spec.image_size:
        if side % spec.stride:
            what = (
                f"the patch size {spec.patch_size}"
                if spec.resnet is None
                else f"the ResNet stride x patch size = {spec.stride}"
            )
            raise ValueError(f"image size {spec.image_size} is not divisible by {what}.")
