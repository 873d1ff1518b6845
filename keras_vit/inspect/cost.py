"""What a model costs: parameters and forward FLOPs, computed from its architecture.

FLOPs count the matrix products only, a multiply-add as 2 FLOPs: convolutions, Dense
layers and the two attention products (``QK^T`` and ``AV``). Norms, GELU, softmax and the
residual adds are left out: on a ViT they are about 1% of the total. This is the
convention of ``torch.utils.flop_counter`` (which the tests compare against on timm's
models) and of a matmul's ``2 n^3`` when its GFLOP/s peak is measured, so achieved/peak is
a fair fraction. Tables that say "GFLOPs" for multiply-adds (timm's 17.6 for ViT-B/16)
show half these numbers. A training step (forward, backward, optimizer) is counted as 3x
the forward FLOPs.

Examples:
    >>> round(count_flops("vit_b16") / 1e9, 2)
    35.13
    >>> count_parameters("vit_ti16")
    5717416
"""

from keras_vit.layers.padding import conv_output_size
from keras_vit.models.registry import create_model, get_spec
from keras_vit.models.spec import ViTSpec
from keras_vit.models.vit import VisionTransformer
from keras_vit.vocabulary import ATTENTION_POOLING

TRAINING_FLOPS_PER_FORWARD = 3  # forward 1x, backward 2x (gradients of inputs and weights)


def _dense(positions, fan_in, fan_out):
    return 2 * positions * fan_in * fan_out


def resnet_flops(height, width, channels, block_units, resnet_width=64):
    """Forward FLOPs of ``ResNetBackbone(block_units, resnet_width)`` on a (height, width) image."""
    h, w = conv_output_size(height, 7, 2), conv_output_size(width, 7, 2)
    flops = _dense(h * w, 7 * 7 * channels, resnet_width)  # root conv 7x7 stride 2
    h, w = conv_output_size(h, 3, 2), conv_output_size(w, 3, 2)  # max pool 3x3 stride 2
    fan_in = resnet_width
    for stage, units in enumerate(block_units):
        mid = resnet_width * 2**stage
        out = 4 * mid
        for unit in range(units):
            stride = 2 if stage > 0 and unit == 0 else 1
            oh, ow = conv_output_size(h, 3, stride), conv_output_size(w, 3, stride)
            flops += _dense(h * w, fan_in, mid)  # conv1 1x1
            flops += _dense(oh * ow, 3 * 3 * mid, mid)  # conv2 3x3, strided
            flops += _dense(oh * ow, mid, out)  # conv3 1x1
            if fan_in != out or stride != 1:
                flops += _dense(oh * ow, fan_in, out)  # projection 1x1, strided
            h, w, fan_in = oh, ow, out
    return flops


def mlp_flops(tokens, hidden_size, mlp_dim, gated=False):
    """Forward FLOPs of one ``MlpBlock`` over ``tokens`` tokens (gated: ``fc1`` twice as wide)."""
    return _dense(tokens, hidden_size, mlp_dim * (2 if gated else 1)) + _dense(tokens, mlp_dim, hidden_size)


def encoder_block_flops(tokens, hidden_size, mlp_dim, gated=False, kv_fraction=1.0):
    """Forward FLOPs of one ``EncoderBlock`` over ``tokens`` tokens; ``kv_fraction``: its
    key/value heads over its query heads (grouped-query attention)."""
    return (
        _dense(tokens, hidden_size, round((1 + 2 * kv_fraction) * hidden_size))  # fused q, k, v
        + 2 * _dense(tokens, hidden_size, tokens)  # QK^T and AV, all heads together
        + _dense(tokens, hidden_size, hidden_size)  # attention output
        + mlp_flops(tokens, hidden_size, mlp_dim, gated)
    )


def attention_pooling_flops(tokens, hidden_size, mlp_dim):
    """Forward FLOPs of ``AttentionPooling`` (the MAP head) over ``tokens`` pooled tokens:
    one query against every token's key and value, then the output projection and the MLP."""
    return (
        _dense(1, hidden_size, hidden_size)  # the latent's query
        + _dense(tokens, hidden_size, 2 * hidden_size)  # keys | values
        + 2 * _dense(1, hidden_size, tokens)  # QK^T and AV of the one query
        + _dense(1, hidden_size, hidden_size)  # output
        + mlp_flops(1, hidden_size, mlp_dim)
    )


def _spec(name_or_model, options):
    if isinstance(name_or_model, (VisionTransformer, ViTSpec)):
        if options:
            raise ValueError("count_flops: options go with a model name; a spec or a built model has its own.")
        return name_or_model if isinstance(name_or_model, ViTSpec) else name_or_model.spec
    if not isinstance(name_or_model, str):
        raise TypeError(f"count_flops expects a model name, a ViTSpec or a VisionTransformer, got {name_or_model!r}.")
    return get_spec(name_or_model).replace(**options)


def count_flops(name_or_model, **options):
    """Forward FLOPs for one image (see the module docstring for what is counted).

    Args:
        name_or_model: a variant's name (``keras_vit.get_spec``), a ``ViTSpec`` (a timm
            architecture's: ``create_model(name).spec``) or a built ``VisionTransformer``.
        **options: with a name, ``ViTSpec`` fields that change the cost: ``image_size``
            (224), ``num_classes`` (1000), ``include_top``, ``pooling``, ``class_token``,
            ``representation_size``, ``num_channels``, ``resnet_width``, or an
            architecture field such as ``depth``.

    Examples:
        >>> round(count_flops("vit_b16", image_size=384) / 1e9, 2)
        110.97
    """
    spec = _spec(name_or_model, options)
    (height, width), channels = spec.image_size, spec.num_channels
    flops = 0
    if spec.resnet is not None:
        flops += resnet_flops(height, width, channels, spec.resnet.block_units, spec.resnet.width)
    grid_h, grid_w = spec.grid_size
    flops += _dense(grid_h * grid_w, spec.patch_size**2 * spec.embedding_channels, spec.hidden_size)
    tokens = grid_h * grid_w + spec.num_prefix_tokens
    for kv_heads in spec.kv_heads_per_block:
        flops += encoder_block_flops(tokens, spec.hidden_size, spec.mlp_dim, spec.gated_mlp, kv_heads / spec.num_heads)
    if spec.pooling == ATTENTION_POOLING:  # over the patch tokens (and the prefix, if it reads them)
        pooled = tokens if spec.pool_include_prefix else grid_h * grid_w
        flops += attention_pooling_flops(pooled, spec.hidden_size, spec.map_mlp_dim or spec.mlp_dim)
    if spec.include_top:
        features = spec.hidden_size * (2 if spec.pooling == "token_gap" else 1)
        if spec.representation_size:
            flops += _dense(1, spec.hidden_size, spec.representation_size)
            features = spec.representation_size
        heads = 2 if spec.distillation_token else 1  # DeiT's second head
        flops += heads * _dense(1, features, spec.num_classes)
    return flops


def count_parameters(name, **options):
    """Trainable and non-trainable weights of ``create_model(name, **kwargs)``.

    Built at depth 1 and extended by identical encoder blocks, so that ViT-H costs
    seconds and a few MB (the tests check this against full builds).

    Examples:
        >>> count_parameters("vit_b16")
        86567656
    """
    depth = options.pop("depth", get_spec(name).depth)
    shallow = create_model(name, depth=1, **options)
    return shallow.count_params() + (depth - 1) * shallow.get_layer("block_0").count_params()
