"""Hybrid ResNet(BiT)+ViT: peers' checkpoints, resolution, named sizes, saving, training.

Like ``test_checkpoint_parity.py``: each peer model gets informative random weights and
is saved in the peer's own format, that file is loaded with ``keras_vit.load_weights``,
and both models see the same images; fp32 logits must agree within 1e-4 of their largest
magnitude. The peer is timm's hybrid (``upstream.timm_hybrid``). Depths are reduced to
keep the tests quick; widths are the real ones (ResNet 64, ViT-S).
"""

import textwrap

import keras
import numpy as np
import pytest
from helpers import (
    assert_close_to_scale,
    images,
    logits,
    once_on,
    randomize_torch,
    run_on_next_backend,
    save_torch_state,
    to_numpy,
    torch_logits,
)
from upstream import keras_hybrid, timm_hybrid, write_original_hybrid_npz

import keras_vit
from keras_vit.models.registry import get_spec

# fp32 parity, as in test_checkpoint_parity.py: relative to the largest logit.
RTOL = 1e-4


@pytest.fixture(autouse=True)
def _seeded():
    """Every random source starts each test in the same state: Keras' initialisers (and
    Python's, numpy's global and TF's) and torch's global generator, which the peers'
    initialisers draw from."""
    import torch

    keras.utils.set_random_seed(0)
    torch.manual_seed(0)


# Named hybrids and the timm models of the same architecture.
NAMED = {
    "r26_vit_s32": "vit_small_r26_s32_224",
    "r26_vit_b32": "vit_base_r26_s32_224",
    "r50_vit_b16": "vit_base_r50_s16_224",
    "r50_vit_l32": "vit_large_r50_s32_224",
}


# --- timm state dicts ------------------------------------------------------------------

# All models below share the ResNet width (64, the paper's) and ViT-S's widths, so that each
# weight shape is initialised (and, on JAX, compiled) once per session; only depths shrink.
S = dict(embed_dim=384, num_heads=6, mlp_ratio=4.0)  # timm
S_KERAS = dict(hidden_size=384, num_heads=6, mlp_dim=1536)


def test_timm_hybrid_checkpoint_matches_timm(timm, tmp_path, rng):
    # A three-stage ResNet (stride 16, as R50's) with 1, 2 and 3 units, a rectangular image
    # (a 3x5 grid), average pooling without class token, in a safetensors file.
    units, size = (1, 2, 3), (48, 80)
    peer = randomize_torch(
        timm_hybrid(
            timm, units, 64, size, **S, depth=2, num_classes=5, global_pool="avg", class_token=False, fc_norm=False
        ),
        informative=True,
    )
    path = save_torch_state(peer.state_dict(), str(tmp_path / "model.safetensors"))
    model = keras_hybrid(units, 64, size, **S_KERAS, depth=2, num_classes=5, pooling="gap", gelu_approximate=False)
    report = keras_vit.load_weights(model, path)
    assert report.layout == "timm" and not report.fresh and not report.unused
    assert "resnet/stage_2/unit_2/conv2/kernel" in report.loaded
    x = images(rng, size)
    assert_close_to_scale(logits(model, x), torch_logits(peer, x), RTOL)


def test_named_r26_vit_s32_matches_timm_vit_small_r26_s32(timm, tmp_path, rng):
    # timm's own named model (its `_resnetv2((2, 2, 2, 2))`, stride 32: a 2x2 grid), with
    # one encoder block, at 64 px, in a torch pickle.
    peer = randomize_torch(
        timm.create_model("vit_small_r26_s32_224", img_size=64, depth=1, num_classes=10).eval(), informative=True
    )
    path = save_torch_state(peer.state_dict(), str(tmp_path / "r26_s32.pth"))
    model = keras_vit.create_model("r26_vit_s32", image_size=64, depth=1, num_classes=10, gelu_approximate=False)
    report = keras_vit.load_weights(model, path)
    assert not report.fresh and not report.unused
    x = images(rng, 64)
    assert_close_to_scale(logits(model, x), torch_logits(peer, x), RTOL)


def test_timm_hybrid_at_higher_resolution_matches_timm_resampling(timm, tmp_path, rng):
    # 64 px -> a 4x4 feature grid, 96 px -> 6x6: timm's hybrid checkpoint_filter_fn
    # resamples the position embedding (bicubic, antialias), load_weights does the same.
    low = randomize_torch(timm_hybrid(timm, (1, 1, 1), 64, 64, **S, depth=1, num_classes=3), informative=True)
    path = save_torch_state(low.state_dict(), str(tmp_path / "low.pth"))
    high = timm_hybrid(timm, (1, 1, 1), 64, 96, **S, depth=1, num_classes=3)
    high.load_state_dict(timm.models.vision_transformer_hybrid.checkpoint_filter_fn(low.state_dict(), high))
    model = keras_hybrid((1, 1, 1), 64, 96, **S_KERAS, depth=1, num_classes=3, gelu_approximate=False)
    report = keras_vit.load_weights(model, path)
    assert report.resampled == {"position_embedding/embedding": ((1, 17, 384), (1, 37, 384))}
    x = images(rng, 96)
    assert_close_to_scale(logits(model, x), torch_logits(high, x), RTOL)


# --- the original .npz layout (R50+ViT-B/16's key names), read by timm's npz loader -------


@pytest.mark.parametrize("image_size", [32, 64], ids=["same_grid", "higher_resolution"])
def test_original_hybrid_npz_matches_timm_npz_loader(timm, tmp_path, rng, image_size):
    # R50+ViT-B/16's key names and shapes, with a (1, 1, 1) ResNet (width 64, as the real
    # one) and a one-block ViT-S, trained at 32 px (2x2 grid + class token = 5 tokens). The
    # original code uses flax's tanh GELU, so timm's reference does too and keras-vit keeps
    # its defaults. At 64 px timm's npz loader resamples bilinearly, as we do.
    vit = dict(width=384, depth=1, heads=6, mlp=1536, tokens=5, classes=10)  # ViT-S, one block
    path = write_original_hybrid_npz(str(tmp_path / "R50+ViT-B_16.npz"), rng, (1, 1, 1), 64, **vit)
    from timm.models.vision_transformer_hybrid import _resnetv2

    peer = timm_hybrid(timm, (1, 1, 1), 64, image_size, **S, depth=1, num_classes=10, act_layer="gelu_tanh")
    assert str(peer.patch_embed.backbone) == str(_resnetv2((1, 1, 1)))
    timm.models.vision_transformer._load_weights(peer, path)
    model = keras_hybrid((1, 1, 1), 64, image_size, **S_KERAS, depth=1, num_classes=10)
    report = keras_vit.load_weights(model, path)
    assert report.layout == "original" and not report.unused and not report.fresh
    x = images(rng, image_size)
    assert_close_to_scale(logits(model, x), torch_logits(peer, x), RTOL)


def test_resnet_paths_count_from_0_and_map_to_both_layouts():
    # Ours count stages and units from 0 like timm's; the .npz from 1.
    from keras_vit.checkpoints.layouts import LAYOUTS

    def upstream(layout, path):
        source, groups = LAYOUTS[layout].find_source(path)
        return source.resolve(groups)

    path = "resnet/stage_2/unit_0/gn_proj/gamma"
    assert upstream("original", path) == ["block3/unit1/gn_proj/scale"]
    assert upstream("timm", path) == ["patch_embed.backbone.stages.2.blocks.0.downsample.norm.weight"]
    path = "resnet/stage_1/unit_3/conv2/kernel"
    assert upstream("original", path) == ["block2/unit4/conv2/kernel"]
    assert upstream("timm", path) == ["patch_embed.backbone.stages.1.blocks.3.conv2.weight"]


# --- the named hybrids -------------------------------------------------------------------


@once_on("torch", "the layers' weight shapes are one code for every backend")
@pytest.mark.parametrize("name", sorted(NAMED))
def test_named_hybrid_parameter_count_matches_timm(timm, name):
    # Built with one encoder block to save time: the blocks are all alike, so the named
    # model's count is that plus (depth - 1) blocks; timm's is counted at full depth.
    import torch

    with torch.device("meta"):
        peer = timm.create_model(NAMED[name], num_classes=1000)
    depth = get_spec(name).depth
    assert depth == len(peer.blocks)
    model = keras_vit.create_model(name, depth=1)
    count = model.count_params() + (depth - 1) * model.get_layer("block_0").count_params()
    assert count == sum(p.numel() for p in peer.parameters())
    assert model.spec.grid_size == tuple(peer.patch_embed.grid_size)
    assert model.get_layer("resnet").block_units == tuple(len(s.blocks) for s in peer.patch_embed.backbone.stages)
    keras.backend.clear_session()


def test_hybrids_are_listed():
    assert set(NAMED) <= set(keras_vit.list_models("r*"))


# --- saving, training ----------------------------------------------------------------------

TINY = dict(
    image_size=16, patch_size=1, resnet_block_units=(1,), resnet_width=64, **S_KERAS, depth=1, num_classes=4
)  # one ResNet stage (stride 4): a 4x4 grid

OTHER_BACKEND_SCRIPT = textwrap.dedent("""
    import sys, numpy as np, keras, keras_vit
    path, images, out = sys.argv[1:]
    model = keras.saving.load_model(path)
    assert model.get_layer("resnet").block_units == (1,)
    np.save(out, keras.ops.convert_to_numpy(model.predict_on_batch(np.load(images))))
""")


def test_saved_hybrid_loads_on_the_next_backend(tmp_path, rng):
    model = keras_vit.VisionTransformer(**TINY, head_zero_init=False)
    x = rng.uniform(-1, 1, (2, 16, 16, 3)).astype("float32")
    expected = logits(model, x)
    path = str(tmp_path / "hybrid.keras")
    model.save(path)
    np.save(tmp_path / "x.npy", x)
    here = keras.backend.backend()
    out = tmp_path / "out.npy"
    backend = run_on_next_backend(OTHER_BACKEND_SCRIPT, path, tmp_path / "x.npy", out)
    np.testing.assert_allclose(np.load(out), expected, atol=1e-5, rtol=0, err_msg=f"{here} -> {backend}")


def test_hybrid_trains_with_fit(rng):
    keras.utils.set_random_seed(0)
    model = keras_vit.VisionTransformer(**TINY)
    model.compile(
        optimizer=keras.optimizers.Adam(1e-3), loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    )
    x = rng.uniform(-1, 1, (8, 16, 16, 3)).astype("float32")
    y = np.arange(8) % 4
    root = to_numpy(model.get_layer("resnet").conv_root.kernel)
    history = model.fit(x, y, batch_size=8, epochs=6, verbose=0)
    losses = history.history["loss"]
    assert np.all(np.isfinite(losses)) and losses[-1] < losses[0]
    # The zero-initialised head passes gradients on from the second step: the ResNet learns.
    assert not np.allclose(to_numpy(model.get_layer("resnet").conv_root.kernel), root)


# --- bad input -----------------------------------------------------------------------------


def test_unknown_backbone_name_suggests_close_names():
    with pytest.raises(ValueError, match=r"Unknown model name 'r51_vit_b16'\. Did you mean 'r50_vit_b16'"):
        keras_vit.create_model("r51_vit_b16")


@pytest.mark.parametrize("name, size, stride", [("r50_vit_b16", 200, 16), ("r26_vit_s32", (224, 240), 32)])
def test_image_size_not_divisible_by_the_total_stride(name, size, stride):
    with pytest.raises(ValueError, match=rf"not divisible by the ResNet stride x patch size = {stride}"):
        keras_vit.create_model(name, image_size=size, depth=1)


def test_plain_vit_checkpoint_into_a_hybrid_names_the_missing_resnet(timm, tmp_path):
    peer = timm.models.vision_transformer.VisionTransformer(img_size=16, patch_size=4, **S, depth=1, num_classes=4)
    path = save_torch_state(peer.state_dict(), str(tmp_path / "plain.pth"))
    missing = r"resnet/conv_root/kernel: missing key 'patch_embed\.backbone\.stem\.conv\.weight'"
    with pytest.raises(ValueError, match=missing):
        keras_vit.load_weights(keras_vit.VisionTransformer(**TINY), path)
