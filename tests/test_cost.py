"""FLOP counts, against torch's own FLOP counter on timm's models."""

import pytest

import keras_vit
from keras_vit.inspect import count_flops


def _torch_flops(peer, image_size):
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    for module in peer.modules():  # torch's counter skips the CPU fused SDPA kernel; matmuls it counts
        if hasattr(module, "fused_attn"):
            module.fused_attn = False
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
def test_flops_equal_torch_flop_counter_on_timm(timm, name, timm_name, timm_kwargs, kwargs):
    peer = timm.create_model(timm_name, pretrained=False, **timm_kwargs).eval()
    size = kwargs.get("image_size", 224)
    size = (size, size) if isinstance(size, int) else size
    assert count_flops(name, **kwargs) == _torch_flops(peer, size)


def test_flops_of_a_built_model_equal_those_of_its_name():
    model = keras_vit.create_model("vit_ti16", image_size=32, num_classes=7, depth=2, representation_size=24)
    assert count_flops(model) == count_flops("vit_ti16", image_size=32, num_classes=7, depth=2, representation_size=24)
    assert count_flops("vit_b16", image_size=384) > 3 * count_flops("vit_b16")  # more tokens, and T^2 attention


def test_count_flops_rejects_unknown_options_and_objects():
    with pytest.raises(ValueError, match=r"unknown option\(s\) \['image_szie'\]"):
        count_flops("vit_b16", image_szie=384)
    with pytest.raises(TypeError, match="model name or a VisionTransformer"):
        count_flops(3)
    with pytest.raises(ValueError, match="Unknown model"):
        count_flops("vit_q16")
