"""FLOP counts, against torch's own FLOP counter on timm's models."""

import pytest
from helpers import once_on

import keras_vit
from keras_vit.checkpoints.timm_config import architecture_args, spec_options
from keras_vit.inspect import count_flops
from keras_vit.models.spec import ViTSpec

# count_flops reads the spec alone (no backend computes it); timm's counter is PyTorch's.
SPEC_ONLY = once_on("torch", "count_flops is arithmetic on the spec, the same on every backend")


def _torch_flops(peer, image_size):
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    for module in peer.modules():  # torch's counter skips the CPU fused SDPA kernel; matmuls it counts
        if hasattr(module, "fused_attn"):
            module.fused_attn = False
    # Parameters that need no gradient: torch's module tracker fails on one passed as a
    # module's input under no_grad (the MAP head's latent query).
    peer.requires_grad_(False)
    counter = FlopCounterMode(display=False)
    with torch.no_grad(), counter:
        peer(torch.zeros(1, 3, *image_size))
    return counter.get_total_flops()


@pytest.mark.parametrize(
    "name, timm_name, timm_kwargs, kwargs",
    [
        ("vit_ti16", "vit_tiny_patch16_224", {}, {}),
        (
            "vit_s32",
            "vit_small_patch32_224",
            dict(img_size=(64, 96), num_classes=10),
            dict(image_size=(64, 96), num_classes=10),
        ),
        (
            "vit_ti16",
            "vit_tiny_patch16_224",
            dict(global_pool="avg", class_token=False, fc_norm=False, img_size=48),
            dict(pooling="gap", image_size=48),
        ),
        ("r26_vit_s32", "vit_small_r26_s32_224", dict(img_size=(64, 96)), dict(image_size=(64, 96))),
        (
            "r50_vit_b16",
            "vit_base_r50_s16_224",
            dict(img_size=48, depth=2, num_classes=1000),
            dict(image_size=48, depth=2),
        ),
    ],
)
@SPEC_ONLY
def test_flops_equal_torch_flop_counter_on_timm(timm, name, timm_name, timm_kwargs, kwargs):
    peer = timm.create_model(timm_name, pretrained=False, **timm_kwargs).eval()
    size = kwargs.get("image_size", 224)
    size = (size, size) if isinstance(size, int) else size
    assert count_flops(name, **kwargs) == _torch_flops(peer, size)


# The family's options that change the products: SigLIP's MAP head, AIMv2's SwiGLU MLP,
# DINOv2's registers, DeiT's distillation token and second head; each at depth 2 and a
# small image, keras-vit's spec read from timm's own arguments.
@pytest.mark.parametrize(
    "architecture, image_size, options",
    [
        ("vit_base_patch16_siglip_224", 64, {}),
        ("aimv2_large_patch14_224", 56, {}),
        ("vit_small_patch14_reg4_dinov2", 70, {}),
        ("deit_tiny_distilled_patch16_224", 48, {}),
        # Perception Encoder's attention pooling with an MLP of its own width; Sapiens2's
        # grouped key/value heads (a block of 16 and one of 8).
        ("vit_pe_core_gigantic_patch14_448", 56, {}),
        ("vit_large_patch16_sapiens2", 48, {"num_kv_heads": [16, 8]}),
    ],
)
@SPEC_ONLY
def test_flops_of_timm_family_specs_equal_torch_flop_counter(timm, architecture, image_size, options):
    model_args = dict(depth=2, img_size=image_size, num_classes=10, **options)
    peer = timm.create_model(architecture, pretrained=False, **model_args).eval()
    spec = ViTSpec.from_config(spec_options({**architecture_args(architecture), **model_args}))
    assert count_flops(spec) == _torch_flops(peer, (image_size, image_size))


def test_flops_of_a_built_model_equal_those_of_its_name():
    model = keras_vit.create_model("vit_ti16", image_size=32, num_classes=7, depth=2, representation_size=24)
    assert count_flops(model) == count_flops("vit_ti16", image_size=32, num_classes=7, depth=2, representation_size=24)
    assert count_flops("vit_b16", image_size=384) > 3 * count_flops("vit_b16")  # more tokens, and T^2 attention


def test_count_flops_rejects_unknown_options_and_objects():
    with pytest.raises(ValueError, match=r"unknown option\(s\) \['image_szie'\]"):
        count_flops("vit_b16", image_szie=384)
    with pytest.raises(TypeError, match="model name, a ViTSpec or a VisionTransformer"):
        count_flops(3)
    with pytest.raises(ValueError, match="Unknown model"):
        count_flops("vit_q16")
