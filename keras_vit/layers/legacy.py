"""Layer configs written before a layer's options were grouped or its kinds were classes,
read as today's: every ``.keras`` file saved before loads as it was (its weights' paths
never changed). ``EncoderBlock.from_config`` and ``MultiHeadSelfAttention.from_config``
ask here."""

# An EncoderBlock's arguments before its attention and MLP took theirs as groups:
# {old argument: (group, its name there)}; a bool norm option named the block's norm_type.
# (Its form was a flag too; its weights' paths never changed.)
_BLOCK_OPTIONS = {
    "attention_dropout_rate": ("attention_options", "attention_dropout_rate"),
    "qkv_bias": ("attention_options", "qkv_bias"),
    "relative_position_grid": ("attention_options", "relative_position_grid"),
    "rope_interleaved": ("attention_options", "rope_interleaved"),
    "attention_norm": ("attention_options", "output_norm"),
    "num_kv_heads": ("attention_options", "num_kv_heads"),
    "qk_norm": ("attention_options", "qk_norm"),
    "differential_lambda_init": ("attention_options", "lambda_init"),
    "gelu_approximate": ("mlp_options", "gelu_approximate"),
    "mlp_activation": ("mlp_options", "activation"),
    "gated_mlp": ("mlp_options", "gated"),
    "mlp_norm": ("mlp_options", "hidden_norm"),
}
_BOOL_NORMS = ("attention_norm", "qk_norm", "mlp_norm")


def block_config(config):
    """An older ``EncoderBlock`` config as today's block takes it (unchanged if it is
    today's): its ``parallel`` or ``post_norm`` flag as its ``form``, its attention's and
    MLP's arguments as their groups.

    >>> config = block_config({"num_heads": 2, "post_norm": True, "qk_norm": True, "proj_bias": False})
    >>> config["form"], config["attention_options"], config["mlp_options"]
    ('post_norm', {'qk_norm': 'layernorm', 'out_bias': False}, {'use_bias': False})
    """
    config = dict(config)
    parallel, post_norm = config.pop("parallel", False), config.pop("post_norm", False)
    if parallel or post_norm:
        config["form"] = "parallel" if parallel else "post_norm"
    groups = {"attention_options": dict(config.pop("attention_options", None) or {}),
              "mlp_options": dict(config.pop("mlp_options", None) or {})}  # fmt: skip
    for old, (group, name) in _BLOCK_OPTIONS.items():
        if old not in config:
            continue
        value = config.pop(old)
        if old in _BOOL_NORMS:
            value = config.get("norm_type", "layernorm") if value else None
        if value is not None:
            groups[group][name] = value
    if "proj_bias" in config:
        groups["attention_options"]["out_bias"] = groups["mlp_options"]["use_bias"] = config.pop("proj_bias")
    attention = groups["attention_options"]
    if "kind" not in attention and ("relative_position_grid" in attention or "lambda_init" in attention):
        attention["kind"] = "relative_position" if "relative_position_grid" in attention else "differential"
    return {**config, **groups}


def attention_config(config):
    """``(kind, config)``: the attention kind an older ``MultiHeadSelfAttention`` config
    names by its options (``"relative_position"``, ``"differential"``; None for the plain
    one or today's config) and the config as that kind's class takes it.

    >>> attention_config({"num_heads": 2, "relative_position_grid": None, "differential_lambda_init": 0.2})
    ('differential', {'num_heads': 2, 'lambda_init': 0.2})
    """
    config = dict(config)
    grid, lambda_init = config.pop("relative_position_grid", None), config.pop("differential_lambda_init", None)
    if grid is not None:
        return "relative_position", {**config, "relative_position_grid": grid}
    if lambda_init is not None:
        return "differential", {**config, "lambda_init": lambda_init}
    return None, config
