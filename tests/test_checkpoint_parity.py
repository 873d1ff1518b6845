"""Checkpoints written by the peers load into keras-vit and give the peers' logits.

Each peer model gets random weights, is saved to a file in the peer's own format, and
that file is loaded with ``keras_vit.load_weights``; both models then see the same
images. Weights are informative (``helpers``), and fp32 logits must agree within 1e-4 of
their largest magnitude (``assert_close_to_scale``); ``test_numerics.py`` shows that each
checkpoint numerics option set wrong breaks that bound.
"""

import json
import os

import pytest
from helpers import assert_close_to_scale, images, randomize_torch, save_torch_state, to_numpy, torch_logits
from upstream import HF_CASES, hf_model, keras_for_hf, write_original_npz

import keras_vit

# fp32 parity: max |ours - the peer's| <= RTOL x max |the peer's logits|.
RTOL = 1e-4


# --- timm -------------------------------------------------------------------------------

# fmt: off
TIMM_CASES = {
    # id: (timm kwargs, keras-vit kwargs, image size, file name)
    "tiny_p16_token": (
        dict(patch_size=16, embed_dim=64, depth=2, num_heads=4, mlp_ratio=2.0, img_size=64, num_classes=7),
        dict(patch_size=16, hidden_size=64, depth=2, num_heads=4, mlp_dim=128, image_size=64, num_classes=7),
        64, "model.pth",
    ),
    "p8_gap_no_cls_rect": (
        dict(patch_size=8, embed_dim=48, depth=3, num_heads=3, mlp_ratio=4.0, img_size=(40, 56), num_classes=5,
             global_pool="avg", class_token=False, fc_norm=False),
        dict(patch_size=8, hidden_size=48, depth=3, num_heads=3, mlp_dim=192, image_size=(40, 56), num_classes=5,
             pooling="gap"),
        (40, 56), "model.safetensors",
    ),
    "p16_no_qkv_bias": (
        dict(patch_size=16, embed_dim=32, depth=2, num_heads=2, mlp_ratio=2.0, img_size=32, num_classes=4,
             qkv_bias=False),
        dict(patch_size=16, hidden_size=32, depth=2, num_heads=2, mlp_dim=64, image_size=32, num_classes=4,
             qkv_bias=False),
        32, "model.safetensors",
    ),
    "p14_gap_fc_norm": (
        dict(patch_size=14, embed_dim=96, depth=2, num_heads=6, mlp_ratio=4.0, img_size=56, num_classes=3,
             global_pool="avg", class_token=True),
        dict(patch_size=14, hidden_size=96, depth=2, num_heads=6, mlp_dim=384, image_size=56, num_classes=3,
             pooling="gap", class_token=True, norm_after_pool=True),
        56, "pytorch_model.bin",
    ),
}
# fmt: on


def _timm_pair(timm, case):
    timm_kwargs, keras_kwargs, size, filename = TIMM_CASES[case]
    peer = randomize_torch(timm.models.vision_transformer.VisionTransformer(**timm_kwargs).eval(), informative=True)
    model = keras_vit.VisionTransformer(**keras_kwargs, gelu_approximate=False)
    return peer, model, size, filename


@pytest.mark.parametrize("case", sorted(TIMM_CASES))
def test_timm_checkpoint_matches_timm(timm, case, tmp_path, rng):
    peer, model, size, filename = _timm_pair(timm, case)
    path = save_torch_state(peer.state_dict(), str(tmp_path / filename))
    report = keras_vit.load_weights(model, path)
    assert report.layout == "timm" and not report.fresh and not report.unused
    x = images(rng, size)
    assert_close_to_scale(to_numpy(model(x)), torch_logits(peer, x), RTOL)


def test_named_vit_s16_matches_timm_vit_small_patch16_224(timm, tmp_path, rng):
    peer = randomize_torch(timm.create_model("vit_small_patch16_224", pretrained=False).eval(), informative=True)
    model = keras_vit.create_model("vit_s16", gelu_approximate=False)
    keras_vit.load_weights(model, save_torch_state(peer.state_dict(), str(tmp_path / "s16.pth")))
    x = images(rng, 224, batch=1)
    assert_close_to_scale(to_numpy(model(x)), torch_logits(peer, x), RTOL)


def test_timm_checkpoint_at_higher_resolution_matches_timm_resampling(timm, tmp_path, rng):
    # timm resamples with checkpoint_filter_fn (bicubic, antialias); load_weights does the
    # same by default. Our resampler reproduces torch's kernel exactly (float64 vs float32
    # rounding only), so the bound stays the fp32 parity bound of 1e-4.
    timm_kwargs, keras_kwargs, _, _ = TIMM_CASES["tiny_p16_token"]
    low = randomize_torch(timm.models.vision_transformer.VisionTransformer(**timm_kwargs).eval(), informative=True)
    path = save_torch_state(low.state_dict(), str(tmp_path / "low.pth"))
    high = timm.models.vision_transformer.VisionTransformer(**{**timm_kwargs, "img_size": 96}).eval()
    vit_module = timm.models.vision_transformer
    high.load_state_dict(vit_module.checkpoint_filter_fn(low.state_dict(), high))
    model = keras_vit.VisionTransformer(**{**keras_kwargs, "image_size": 96}, gelu_approximate=False)
    report = keras_vit.load_weights(model, path)
    assert report.resampled == {"position_embedding/embedding": ((1, 17, 64), (1, 37, 64))}
    x = images(rng, 96)
    assert_close_to_scale(to_numpy(model(x)), torch_logits(high, x), RTOL)


# --- the original .npz layout, read by timm's own npz loader ---------------------------


@pytest.mark.parametrize("image_size", [32, 64], ids=["same_grid", "higher_resolution"])
def test_original_npz_matches_timm_npz_loader(timm, tmp_path, rng, image_size):
    # The original code uses flax's tanh GELU: the timm reference is built with it too,
    # so this also checks keras-vit's defaults (gelu_approximate=True, epsilon 1e-6).
    # At 64px timm's npz loader resamples bilinearly without antialias, as we do.
    path = write_original_npz(str(tmp_path / "ViT-tiny.npz"), rng, 64, 2, 4, 128, 8, 17, 10)
    peer = timm.models.vision_transformer.VisionTransformer(
        patch_size=8,
        embed_dim=64,
        depth=2,
        num_heads=4,
        mlp_ratio=2.0,
        img_size=image_size,
        num_classes=10,
        act_layer="gelu_tanh",
    ).eval()
    timm.models.vision_transformer._load_weights(peer, path)
    model = keras_vit.VisionTransformer(
        image_size=image_size, patch_size=8, hidden_size=64, depth=2, num_heads=4, mlp_dim=128, num_classes=10
    )
    report = keras_vit.load_weights(model, path)
    assert report.layout == "original" and not report.unused
    x = images(rng, image_size)
    assert_close_to_scale(to_numpy(model(x)), torch_logits(peer, x), RTOL)


# --- HF transformers ----------------------------------------------------------------------


def test_hf_config_maps_to_its_numerics():
    # HF's ViTConfig: "gelu" is the exact erf form, layer_norm_eps defaults to 1e-12; the
    # model built from it uses them in every LayerNorm.
    import transformers

    config = transformers.ViTConfig(**HF_CASES["p16_classifier_safetensors"][0])
    model = keras_for_hf(config)
    assert model.spec.gelu_approximate is False and model.spec.layer_norm_epsilon == 1e-12
    norms = [layer for layer in model._flatten_layers() if "norm" in type(layer).__name__.lower()]
    assert norms and {layer.epsilon for layer in norms} == {1e-12}


@pytest.mark.parametrize("case", sorted(HF_CASES))
def test_hf_checkpoint_matches_transformers(case, tmp_path, rng):
    config_kwargs, filename = HF_CASES[case]
    peer, config = hf_model(config_kwargs, tmp_path)
    path = str(tmp_path / "model.safetensors")
    if filename == "pytorch_model.bin":
        # The hub's older files: the same names, pickled by torch.
        import torch
        from safetensors.torch import load_file

        torch.save(load_file(path), str(tmp_path / filename))
        os.remove(path)
        path = str(tmp_path / filename)
    model = keras_for_hf(config)
    report = keras_vit.load_weights(model, path)
    assert report.layout == "hf" and not report.fresh and not report.unused
    x = images(rng, config.image_size)
    assert_close_to_scale(to_numpy(model(x)), torch_logits(peer, x), RTOL)


def test_hf_checkpoint_at_higher_resolution_matches_interpolate_pos_encoding(tmp_path, rng):
    config_kwargs, _ = HF_CASES["p16_classifier_safetensors"]
    peer, config = hf_model(config_kwargs, tmp_path)
    model = keras_for_hf(config, image_size=96)
    keras_vit.load_weights(model, str(tmp_path / "model.safetensors"))
    x = images(rng, 96)
    expected = torch_logits(peer, x, interpolate_pos_encoding=True)
    assert_close_to_scale(to_numpy(model(x)), expected, RTOL)


def test_hf_file_layout_is_the_hub_layout(tmp_path):
    # transformers 5 renames some keys in memory; the files must keep the hub's names.
    hf_model(HF_CASES["p16_classifier_safetensors"][0], tmp_path)
    from safetensors.numpy import load_file

    keys = set(load_file(str(tmp_path / "model.safetensors")))
    assert "vit.embeddings.patch_embeddings.projection.weight" in keys
    assert "vit.encoder.layer.0.attention.attention.query.weight" in keys
    assert json.load(open(tmp_path / "config.json"))["model_type"] == "vit"
