"""DINOv3's architecture as keras-vit's options, from what a keras-hub or a transformers
config says of it (each names its fields its own way)."""


def dinov3_options(activation, biases, *, described, error, **read):
    """The options of a DINOv3 whose MLP's activation is ``activation`` and whose attention
    output and MLP projections have ``biases`` (two flags); ``read``: ``qkv_bias``,
    ``layer_scale_init``, ``num_register_tokens`` and ``rope_temperature`` as the config
    gives them. Raises ``error`` (its message opens with ``described``, the config's own
    names and values) for what keras-vit does not build.

    >>> options = dinov3_options("silu", (True, True), described="", error=ValueError, qkv_bias=False,
    ...                          layer_scale_init=1.0, num_register_tokens=4, rope_temperature=100.0)
    >>> options["mlp_activation"], options["rope"], options["position_embedding"]
    ('silu', 'dinov3', 'none')
    """
    if activation not in ("gelu", "silu") or biases[0] != biases[1]:
        raise error(
            f"{described}: keras-vit builds the exact GELU or SiLU, with the projections' biases both on or both off."
        )
    return dict(
        gelu_approximate=False,
        mlp_activation=activation,
        proj_bias=bool(biases[0]),
        qkv_bias=bool(read["qkv_bias"]),
        layer_scale_init=float(read["layer_scale_init"]),
        num_register_tokens=int(read["num_register_tokens"]),
        position_embedding="none",  # rotary embeddings, DINOv3's, and no table
        rope="dinov3",
        rope_temperature=float(read["rope_temperature"]),
    )
