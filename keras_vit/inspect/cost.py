"""What a model costs: parameters and forward FLOPs, computed from its architecture.

FLOPs count the matrix products only, a multiply-add as 2 FLOPs: convolutions, Dense
layers and the two attention products (``QK^T`` and ``AV``). Norms, GELU, softmax and the
residual adds are left out: on a ViT they are about 1% of the total. This is the
convention of ``torch.utils.flop_counter`` (which the tests compare against on timm's
models) and of a matmul's ``2 n^3`` when its GFLOP/s peak is measured, so achieved/peak is
a fair fraction. Tables that say "GFLOPs" for multiply-adds (timm's 17.6 for ViT-B/16)
show half these numbers. A training step (forward, backward, optimizer) is counted as 3x
the forward FLOPs.

Example:
>>> round(count_flops("vit_b16") / 1e9, 2)
35.13
>>> count_parameters("vit_ti16")
5717416
"""

import inspect
import math

from keras_vit.layers.resnet import resnet_feature_stride, resnet_out_channels
from keras_vit.models.registry import create_model, get_config
from keras_vit.models.vit import VisionTransformer

TRAINING_FLOPS_PER_FORWARD = 3  # forward 1x, backward 2x (gradients of inputs and weights)


def _dense(positions, fan_in, fan_out):
    return 2 * positions * fan_in * fan_out


def _same_size(size, stride):
    return math.ceil(size / stride)  # TF "SAME": output size depends on the stride only


def resnet_flops(height, width, channels, block_units, resnet_width=64):
    """Forward FLOPs of ``ResNetBackbone(block_units, resnet_width)`` on a (height, width) image."""
    h, w = _same_size(height, 2), _same_size(width, 2)
    flops = _dense(h * w, 7 * 7 * channels, resnet_width)  # root conv 7x7 stride 2
    h, w = _same_size(h, 2), _same_size(w, 2)  # max pool 3x3 stride 2
    fan_in = resnet_width
    for stage, units in enumerate(block_units):
        mid = resnet_width * 2**stage
        out = 4 * mid
        for unit in range(units):
            stride = 2 if stage > 0 and unit == 0 else 1
            oh, ow = _same_size(h, stride), _same_size(w, stride)
            flops += _dense(h * w, fan_in, mid)  # conv1 1x1
            flops += _dense(oh * ow, 3 * 3 * mid, mid)  # conv2 3x3, strided
            flops += _dense(oh * ow, mid, out)  # conv3 1x1
            if fan_in != out or stride != 1:
                flops += _dense(oh * ow, fan_in, out)  # projection 1x1, strided
            h, w, fan_in = oh, ow, out
    return flops


def encoder_block_flops(tokens, hidden_size, mlp_dim):
    """Forward FLOPs of one ``EncoderBlock`` over ``tokens`` tokens."""
    return (
        _dense(tokens, hidden_size, 3 * hidden_size)  # fused q, k, v
        + 2 * _dense(tokens, hidden_size, tokens)  # QK^T and AV, all heads together
        + _dense(tokens, hidden_size, hidden_size)  # attention output
        + _dense(tokens, hidden_size, mlp_dim)
        + _dense(tokens, mlp_dim, hidden_size)
    )


def _architecture(name_or_model, kwargs):
    if isinstance(name_or_model, VisionTransformer):
        if kwargs:
            raise ValueError("count_flops: options go with a model name; a built model already has its own.")
        return name_or_model.vit_config
    if not isinstance(name_or_model, str):
        raise TypeError(f"count_flops expects a model name or a VisionTransformer, got {name_or_model!r}.")
    known = inspect.signature(VisionTransformer.__init__).parameters
    unknown = sorted(set(kwargs) - set(known))
    if unknown:
        raise ValueError(f"count_flops: unknown option(s) {unknown}; expected options of create_model "
                         f"such as image_size, num_classes, pooling, representation_size.")
    arch = dict(image_size=224, num_classes=1000, include_top=True, pooling="token")
    arch.update(get_config(name_or_model).as_kwargs())
    arch.update(kwargs)
    return arch


def count_flops(name_or_model, **kwargs):
    """Forward FLOPs for one image (see the module docstring for what is counted).

    Args:
        name_or_model: a name from ``list_models()`` or a built ``VisionTransformer``.
        **kwargs: with a name, the options of ``create_model`` that change the cost:
            ``image_size`` (224), ``num_classes`` (1000), ``include_top``, ``pooling``,
            ``class_token``, ``representation_size``, ``num_channels``, ``resnet_width``,
            or an architecture field such as ``depth``.

    Example:
    >>> round(count_flops("vit_b16", image_size=384) / 1e9, 2)
    110.97
    """
    arch = _architecture(name_or_model, kwargs)
    size = arch["image_size"]
    height, width = (size, size) if isinstance(size, int) else tuple(size)
    channels = arch.get("num_channels", 3)
    patch, hidden = arch["patch_size"], arch["hidden_size"]
    flops = 0
    if arch.get("resnet_block_units") is not None:
        units = tuple(arch["resnet_block_units"])
        resnet_width = arch.get("resnet_width", 64)
        flops += resnet_flops(height, width, channels, units, resnet_width)
        stride = resnet_feature_stride(units)
        height, width, channels = height // stride, width // stride, resnet_out_channels(units, resnet_width)
    grid = (height // patch) * (width // patch)
    flops += _dense(grid, patch * patch * channels, hidden)  # patch embedding
    pooling = arch.get("pooling", "token")
    class_token = arch.get("class_token")
    if class_token is None:
        class_token = pooling != "gap"
    tokens = grid + int(class_token)
    flops += arch["depth"] * encoder_block_flops(tokens, hidden, arch["mlp_dim"])
    if arch.get("include_top", True):
        features = hidden
        if arch.get("representation_size"):
            flops += _dense(1, hidden, arch["representation_size"])
            features = arch["representation_size"]
        flops += _dense(1, features, arch["num_classes"])
    return flops


def count_parameters(name, **kwargs):
    """Trainable and non-trainable weights of ``create_model(name, **kwargs)``.

    Built at depth 1 and extended by identical encoder blocks, so that ViT-H costs
    seconds and a few MB (the tests check this against full builds).

    Example:
    >>> count_parameters("vit_b16")
    86567656
    """
    depth = kwargs.pop("depth", get_config(name).depth)
    shallow = create_model(name, depth=1, **kwargs)
    return shallow.count_params() + (depth - 1) * shallow.get_layer("block_0").count_params()
