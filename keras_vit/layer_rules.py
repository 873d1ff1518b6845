"""What the layers require of their sizes and forms, as plain Python with no backend: a layer
asks it when it is made or built, the spec (``models/spec_rules.py``) when it is made, so a
wrong spec fails in one place with the layer's own words, and a command's ``--help`` reads the
spec without importing Keras."""


def check_heads(width, num_heads, what="width"):
    """Attention's first rule: the heads divide the token width (``what`` names the width
    in the message). The spec and the layers ask it here."""
    if width % num_heads:
        raise ValueError(f"{what} {width} is not divisible by num_heads {num_heads}.")


def check_kv_heads(num_heads, num_kv_heads):
    """Grouped-query attention's one rule: the key/value heads divide the query heads.
    The spec and the layer both ask it here.

    >>> check_kv_heads(4, 3)
    Traceback (most recent call last):
    ...
    ValueError: num_kv_heads 3 does not divide num_heads 4.
    """
    if num_heads % num_kv_heads:
        raise ValueError(f"num_kv_heads {num_kv_heads} does not divide num_heads {num_heads}.")


def check_end_id(rule, end_id, what="rule"):
    """A text tower's pooling: an end-of-text id goes with the ``"first_id"`` rule, which
    looks for it, and with no other. The spec and ``EndOfTextPooling`` ask it here."""
    if (rule == "first_id") != (end_id is not None):
        raise ValueError(f"end_id goes with {what} 'first_id' alone; got {what}={rule!r}, end_id={end_id!r}.")


def check_differential_head_width(head_dim):
    """Differential attention's rule: each head's channels split into two halves. The spec
    and the layer ask it here."""
    if head_dim % 2:
        raise ValueError(f"differential attention takes an even head width; got head width {head_dim}.")


def check_rope_head_width(form, head_dim):
    """The rotary embeddings' rule: two axes, pairs of channels, so a head width divisible
    by 4. The spec and the layer ask it here.

    >>> check_rope_head_width("dinov3", 6)
    Traceback (most recent call last):
    ...
    ValueError: rope='dinov3' needs a head width divisible by 4 (two axes, pairs of channels); got 6.
    """
    if head_dim % 4:
        raise ValueError(
            f"rope={form!r} needs a head width divisible by 4 (two axes, pairs of channels); got {head_dim}."
        )


# How the kernel is scaled after centring. timm (and so the parity tests) uses "var_eps"
# with eps 1e-8; the original google-research BiT/hybrid code "std_eps" with eps 1e-5.
STD_CONV_FORMS = {
    "var_eps": "(w - mean) / sqrt(var + eps)",
    "std_eps": "(w - mean) / (std + eps)",
}


def check_std_conv_form(std_conv_form):
    """Returns ``std_conv_form`` if it names a standardisation, else raises a ValueError.

    >>> check_std_conv_form("std_eps")
    'std_eps'
    """
    if std_conv_form not in STD_CONV_FORMS:
        forms = " or ".join(f"{k!r} ({v})" for k, v in STD_CONV_FORMS.items())
        raise ValueError(f"`std_conv_form` must be {forms}. Received: std_conv_form={std_conv_form!r}")
    return std_conv_form


# BiT has four stages; timm's ResNetV2 has channel widths for four and silently drops more.
MAX_STAGES = 4


def check_block_units(block_units):
    """``block_units`` (units per stage) as a tuple, or a ValueError saying what is wrong.

    >>> check_block_units([3, 4, 9])
    (3, 4, 9)
    """
    iterable = hasattr(block_units, "__iter__") and not isinstance(block_units, (str, bytes))
    units = tuple(block_units) if iterable else ()
    # bool is an int, but never a count of units
    if not 1 <= len(units) <= MAX_STAGES or not all(type(u) is int and u >= 1 for u in units):
        raise ValueError(
            f"`block_units` must be 1 to {MAX_STAGES} ints >= 1, the units of each stage (the BiT "
            "ResNet has four stages), e.g. (3, 4, 9) for R50+ViT-B/16 or (2, 2, 2, 2) for R26. "
            f"Received: block_units={block_units!r}"
        )
    return units


def resnet_feature_stride(block_units):
    """Total stride of the backbone: 4 in the root, 2 in each stage after the first.

    >>> resnet_feature_stride((3, 4, 9)), resnet_feature_stride((2, 2, 2, 2))
    (16, 32)
    """
    return 4 * 2 ** (len(check_block_units(block_units)) - 1)


def resnet_out_channels(block_units, width=64):
    """Channels of the backbone's output: 4 (bottleneck expansion) * width * 2**(stages - 1).

    >>> resnet_out_channels((3, 4, 9)), resnet_out_channels((3, 4, 6, 3), 64)
    (1024, 2048)
    """
    return 4 * int(width) * 2 ** (len(check_block_units(block_units)) - 1)
