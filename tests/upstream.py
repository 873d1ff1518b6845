"""The peers' models and files, as the tests build and write them (tests import this module,
never each other): checkpoints in google-research/vision_transformer's exact ``.npz``
layout, timm's hybrid ViT, HF transformers' ViT saved as the hub saves it, and the
matching keras-vit models.

Every writer and builder gives informative weights (``helpers``: kernels with variance
1/fan-in, gains near one, biases small but not zero), so that a defect anywhere, or a
numerics option set wrong, reaches the logits.
"""

import math
from functools import partial

import numpy as np
from helpers import BIAS_STD, GAIN_STD, TOKEN_STD, randomize_torch

import keras_vit

# A small timm ViT and the same in keras-vit (timm's numerics), for a non-square image.
SMALL_TIMM = dict(patch_size=8, embed_dim=32, depth=3, num_heads=2, mlp_ratio=2.0, num_classes=5)
SMALL_KERAS = dict(
    patch_size=8, hidden_size=32, depth=3, num_heads=2, mlp_dim=64, num_classes=5, gelu_approximate=False
)


def _informative(rng, shape, kind, fan_in=1):
    """One array of ``shape``: a normalisation gain, a bias, a token table or a kernel."""
    noise = rng.standard_normal(shape)
    if kind == "gain":
        return (1.0 + GAIN_STD * noise).astype("float32")
    if kind == "bias":
        return (BIAS_STD * noise).astype("float32")
    if kind == "token":
        return (TOKEN_STD * noise).astype("float32")
    return (noise / math.sqrt(fan_in)).astype("float32")


def write_original_npz(path, rng, width, depth, heads, mlp, patch, tokens, classes, channels=3, class_token=True):
    """A random checkpoint in google-research/vision_transformer's exact key layout
    (``class_token=False``: a "gap" model's, without ``cls``)."""
    hd = width // heads
    # key: (shape, kind, fan-in of a kernel)
    arrays = {
        "embedding/kernel": ((patch, patch, channels, width), "kernel", patch * patch * channels),
        "embedding/bias": ((width,), "bias", 1),
        "cls": ((1, 1, width), "token", 1),
        "Transformer/posembed_input/pos_embedding": ((1, tokens, width), "token", 1),
        "Transformer/encoder_norm/scale": ((width,), "gain", 1),
        "Transformer/encoder_norm/bias": ((width,), "bias", 1),
        "head/kernel": ((width, classes), "kernel", width),
        "head/bias": ((classes,), "bias", 1),
    }
    for i in range(depth):
        b = f"Transformer/encoderblock_{i}/"
        a = b + "MultiHeadDotProductAttention_1/"
        arrays.update(
            {
                b + "LayerNorm_0/scale": ((width,), "gain", 1),
                b + "LayerNorm_0/bias": ((width,), "bias", 1),
                b + "LayerNorm_2/scale": ((width,), "gain", 1),
                b + "LayerNorm_2/bias": ((width,), "bias", 1),
                a + "out/kernel": ((heads, hd, width), "kernel", width),
                a + "out/bias": ((width,), "bias", 1),
                b + "MlpBlock_3/Dense_0/kernel": ((width, mlp), "kernel", width),
                b + "MlpBlock_3/Dense_0/bias": ((mlp,), "bias", 1),
                b + "MlpBlock_3/Dense_1/kernel": ((mlp, width), "kernel", mlp),
                b + "MlpBlock_3/Dense_1/bias": ((width,), "bias", 1),
            }
        )
        for n in ("query", "key", "value"):
            arrays.update(
                {a + f"{n}/kernel": ((width, heads, hd), "kernel", width), a + f"{n}/bias": ((heads, hd), "bias", 1)}
            )
    if not class_token:
        del arrays["cls"]
    np.savez(path, **{k: _informative(rng, *v) for k, v in arrays.items()})
    return path


def write_original_hybrid_npz(path, rng, block_units, resnet_width, **vit):
    """The ViT keys of ``write_original_npz`` plus the BiT ResNet's, as the hybrid .npz files
    (e.g. R50+ViT-B_16.npz) name them: ``conv_root``, ``gn_root``, ``block{i}/unit{j}/...``;
    ``vit`` are ``write_original_npz``'s ``width, depth, heads, mlp, tokens, classes``."""
    width = resnet_width
    write_original_npz(path, rng, channels=4 * width * 2 ** (len(block_units) - 1), patch=1, **vit)
    shapes = {"conv_root/kernel": (7, 7, 3, width), "gn_root/scale": (width,), "gn_root/bias": (width,)}
    cin = width
    for i, units in enumerate(block_units, 1):
        mid = width * 2 ** (i - 1)
        for j in range(1, units + 1):
            u = f"block{i}/unit{j}/"
            shapes.update(
                {
                    u + "conv1/kernel": (1, 1, cin, mid),
                    u + "conv2/kernel": (3, 3, mid, mid),
                    u + "conv3/kernel": (1, 1, mid, 4 * mid),
                }
            )
            if j == 1:
                shapes[u + "conv_proj/kernel"] = (1, 1, cin, 4 * mid)
            for n, c in (("gn1", mid), ("gn2", mid), ("gn3", 4 * mid)) + ((("gn_proj", 4 * mid),) if j == 1 else ()):
                shapes.update({u + f"{n}/scale": (c,), u + f"{n}/bias": (c,)})
            cin = 4 * mid
    arrays = dict(np.load(path))
    for k, shape in shapes.items():
        kind = "gain" if k.endswith("scale") else "bias" if k.endswith("bias") else "kernel"
        arrays[k] = _informative(rng, shape, kind, math.prod(shape[:-1]))
    np.savez(path, **arrays)
    return path


def timm_hybrid(timm, block_units, width, img_size, std_conv_epsilon=1e-8, **vit_kwargs):
    """timm's hybrid ViT with the ResNet ``_resnetv2`` builds (``ResNetV2(preact=False,
    stem_type='same', StdConv2dSame(eps=1e-8))`` in a ``HybridEmbed``), at any width."""
    from timm.layers import HybridEmbed, StdConv2dSame
    from timm.models.resnetv2 import ResNetV2

    backbone = ResNetV2(
        layers=block_units,
        channels=tuple(4 * width * 2**i for i in range(4)),
        stem_chs=width,
        num_classes=0,
        global_pool="",
        preact=False,
        stem_type="same",
        conv_layer=partial(StdConv2dSame, eps=std_conv_epsilon),
    )
    return timm.models.vision_transformer.VisionTransformer(
        img_size=img_size, patch_size=1, embed_layer=partial(HybridEmbed, backbone=backbone), **vit_kwargs
    ).eval()


def keras_hybrid(block_units, width, image_size, **kwargs):
    """keras-vit's hybrid of ``timm_hybrid``'s architecture (``kwargs``: the ViT's)."""
    return keras_vit.VisionTransformer(
        image_size=image_size, patch_size=1, resnet_block_units=block_units, resnet_width=width, **kwargs
    )


# fmt: off
HF_CASES = {
    # id: (ViTConfig kwargs, file written)
    "p16_classifier_safetensors": (dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                                        intermediate_size=128, image_size=64, patch_size=16, num_labels=6),
                                   "model.safetensors"),
    "p8_classifier_bin": (dict(hidden_size=48, num_hidden_layers=3, num_attention_heads=3,
                               intermediate_size=96, image_size=48, patch_size=8, num_labels=4),
                          "pytorch_model.bin"),
}
# fmt: on


def hf_model(config_kwargs, directory):
    """An HF ``ViTForImageClassification`` with informative random weights, saved to
    ``directory`` with ``save_pretrained``; returns ``(model, config)``."""
    import transformers

    config = transformers.ViTConfig(**config_kwargs)
    peer = randomize_torch(transformers.ViTForImageClassification(config).eval(), informative=True)
    peer.save_pretrained(directory)
    return peer, config


def keras_for_hf(config, image_size=None, **overrides):
    """keras-vit's model of an HF ``ViTConfig``, with the numerics keras-vit reads from it."""
    from keras_vit.checkpoints.layouts import spec_options_from_hf_config

    options = spec_options_from_hf_config(config.to_dict())
    return keras_vit.VisionTransformer(**dict(options, image_size=image_size or config.image_size, **overrides))
