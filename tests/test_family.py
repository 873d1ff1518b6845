"""timm's ViT family by name: ``hf-hub:timm/<architecture>.<tag>`` through a loopback hub.

Each architecture is built by timm with random, informative weights (``helpers``) at depth
2 and a 3x3 patch grid (through its ``model_args``, as a hub ``config.json`` records
them), written by timm's own ``save_for_hf`` where a mirror on 127.0.0.1 serves the hub's
paths, and loaded by its hub name. The logits of both on a real photo, pre-processed by
timm's evaluation transform (written with PIL), agree within ``RTOL`` of their scale; for
the register and distilled models, so do every block's tokens (timm's
``forward_intermediates``) and the distilled model's features.
"""

import json
import os
import textwrap

import keras
import numpy as np
import pytest
from helpers import (
    assert_close_to_scale,
    cat_photo,
    log_softmax,
    logits,
    once_on,
    run_on_next_backend,
    serve_timm_model,
    small_timm_args,
    timm_input,
    to_numpy,
    torch_logits,
)

import keras_vit
from keras_vit.checkpoints import timm_config
from keras_vit.checkpoints.timm_architectures import ARCHITECTURES
from keras_vit.checkpoints.timm_pretrained import PRETRAINED
from keras_vit.inspect import attention_rollout
from keras_vit.presets import hub

RTOL = 2e-5
# The embeddings' scale in the family's checkpoints: the first norm then sees inputs whose
# variance is near its epsilon, so that an epsilon of 1e-5 where 1e-6 is right (or the other
# way) moves the outputs past RTOL (test_a_wrong_epsilon_moves_the_logits_past_the_bound).
EMBEDDING_SCALE = 3e-3
# timm's transform and the model's own layer, both on the photo: PIL rounds to 8-bit levels
# after each of its two passes, the layer keeps floats (test_preprocessing.py: at most 1.25
# levels, 0.4 on average); in normalised units 0.4 levels are under 0.01.
MEAN_PREPROCESSING_DIFFERENCE = 0.02
# Registers, LayerScale, no position rows for the prefix tokens: in the fast tier (every
# architecture's load is in the slow one, tests/slow_tests.txt).
DINOV2_REGISTERS = "vit_small_patch14_reg4_dinov2"
# A distillation token and a second head.
DEIT_DISTILLED = "deit_tiny_distilled_patch16_224"
# Attention pooling, no class token.
SIGLIP = "vit_base_patch16_siglip_224"
# DINOv3 (timm's eva module): rotary embeddings and no position table, registers, a SwiGLU
# MLP, query and value biases apart (the key's none).
DINOV3 = "vit_small_plus_patch16_dinov3_qkvb"
# EVA-02 (timm's eva module): axial rotary embeddings (interleaved, scaled to a reference
# grid) beside a learned table, separate query/key/value projections, a norm inside the
# SwiGLU MLP, average pooling with the norm after it.
EVA02 = "eva02_base_patch14_224"
# BEiT (timm's beit module): a relative position bias in each block, no position table,
# LayerScale, query and value biases apart, the final norm after average pooling.
BEIT = "beit_base_patch16_224"
# RoPE-Mixed (timm's eva module): rotary frequencies learned per block and head, the
# column-first grid, the class token not turned.
ROPE_MIXED = "vit_small_patch16_rope_mixed_224"
# Perception Encoder (timm's eva module): the axial grid shifted by 1, a norm before the
# blocks, attention pooling over every token with 8 heads of its own.
PE_CORE = "vit_pe_core_tiny_patch16_384"
# Sapiens2 (timm's eva module): grouped key/value heads, RMS norms on the queries and keys,
# LayerScale on the attention alone.
SAPIENS2 = "vit_large_patch16_sapiens2"
# Differential attention in ViT-22B's parallel blocks (timm's DiffParallelScalingBlock).
DIFFERENTIAL_PARALLEL = "vit_dpwee_patch16_reg1_gap_256"
# Attention weights (in [0, 1]) against timm's explicit softmax: float32 rounding.
ATTENTION_ATOL = 1e-5
# bfloat16 activations (8 significant bits) and int8 weights against float32, on the
# register model's logits: measured 0.0028-0.0036 and 0.0067 of their scale over the three
# backends; the bound is 3x the worst, and a wrong cast or scale moves them by far more.
MIXED_RTOL = 0.02
INT8_RTOL = 0.02
# The exports against the Keras model, on log-probabilities relative to their largest
# size, as tests/test_export.py bounds its float32 exports.
EXPORT_RTOL = 1e-5


def assert_loads_by_hub_name_at_timms_logits(timm, mirror, architecture, **model_args):
    name, peer = serve_timm_model(timm, mirror, architecture, embedding_scale=EMBEDDING_SCALE, **model_args)
    model = keras_vit.create_model(name)
    # Both files fetched through the mirror, from the hub's paths.
    files = ("config.json", "model.safetensors")
    assert sorted(mirror.requests) == sorted(f"/{hub.repo_id(name)}/resolve/main/{f}" for f in files)
    x = timm_input(peer)
    x = np.concatenate([x, x[:, :, ::-1]])  # two images (the photo and its mirror): nothing may mix them
    expected = torch_logits(peer, x)
    assert_close_to_scale(logits(model, x), expected, RTOL)  # one jitted call on JAX
    # The model's own pre-processing of the raw photo is timm's transform.
    ours = to_numpy(model.preprocessing(cat_photo()[None]))
    assert ours.shape == x[:1].shape and np.abs(ours - x[:1]).mean() < MEAN_PREPROCESSING_DIFFERENCE
    assert model.name == architecture and model.spec.num_prefix_tokens == peer.num_prefix_tokens
    return name, model, peer, x


def assert_intermediates_are_timms(model, peer, x, norm=True):
    """Every block's tokens (normed, where the final norm is the tokens') as timm's
    ``forward_intermediates``: the patch grid (NHWC here, NCHW there) and, apart, the prefix
    tokens (class, distillation, registers)."""
    import torch

    with torch.no_grad():
        images = torch.from_numpy(x.transpose(0, 3, 1, 2))
        theirs = peer.forward_intermediates(images, norm=norm, return_prefix_tokens=True, intermediates_only=True)
    grids = model.intermediate_model(norm=norm).predict_on_batch(x)
    tokens = model.intermediate_model(output_format="tokens", norm=norm, include_prefix=True).predict_on_batch(x)
    prefix = model.spec.num_prefix_tokens
    assert len(theirs) == len(grids) == model.spec.depth and prefix == peer.num_prefix_tokens
    for i, theirs_i in enumerate(theirs):
        spatial, prefix_tokens = theirs_i if prefix else (theirs_i, None)  # timm pairs them when it has some
        assert_close_to_scale(to_numpy(grids[f"block_{i}"]), spatial.numpy().transpose(0, 2, 3, 1), RTOL, f"block {i}")
        if prefix:
            assert_close_to_scale(to_numpy(tokens[f"block_{i}"])[:, :prefix], prefix_tokens.numpy(), RTOL, f"block {i}")


def assert_attention_is_timms(model, peer, x):
    """Every block's attention weights as timm's explicit attention computes them (its
    ``fused_attn`` off: the softmax, read where its attention dropout takes it)."""
    import torch

    theirs, hooks = [], []
    for block in peer.blocks:
        block.attn.fused_attn = False
        hooks.append(block.attn.attn_drop.register_forward_hook(lambda m, i, out: theirs.append(out.numpy())))
    try:
        with torch.no_grad():
            peer(torch.from_numpy(x.transpose(0, 3, 1, 2)))
    finally:
        for hook in hooks:
            hook.remove()
    ours = [to_numpy(a) for a in model.attention_model().predict_on_batch(x)]
    assert len(ours) == len(theirs) == model.spec.depth
    # Informative: far from uniform rows, where a wrong token order would show.
    assert min(np.ptp(a, axis=-1).max() for a in theirs) > 0.05
    for i, (a, b) in enumerate(zip(ours, theirs)):
        np.testing.assert_allclose(a, b, rtol=0, atol=ATTENTION_ATOL, err_msg=f"block {i}")


def test_dinov2_with_registers_loads_by_hub_name_at_timms_logits_intermediates_and_attention(timm, mirror):
    _, model, peer, x = assert_loads_by_hub_name_at_timms_logits(timm, mirror, DINOV2_REGISTERS)
    assert_intermediates_are_timms(model, peer, x)
    assert_attention_is_timms(model, peer, x)


def test_dinov3_loads_by_hub_name_at_timms_outputs_features_and_attention_at_any_size(timm, mirror):
    import torch

    _, model, peer, x = assert_loads_by_hub_name_at_timms_logits(timm, mirror, DINOV3)
    assert model.spec.rope.form == "dinov3" and model.spec.position_embedding == "none" and model.spec.gated_mlp
    assert "position_embedding" not in [layer.name for layer in model.layers]
    assert_intermediates_are_timms(model, peer, x)
    assert_attention_is_timms(model, peer, x)
    # Two images, at sizes it was not built for: no table to resample, the rotary angles
    # computed for each grid as timm's dynamic_img_size does.
    for size in ((64, 80), (32, 112)):
        images = to_numpy(keras.ops.image.resize(np.concatenate([x, x[:, :, ::-1]]), size))
        with torch.no_grad():
            expected = peer(torch.from_numpy(images.transpose(0, 3, 1, 2))).numpy()
        assert_close_to_scale(logits(model, images), expected, RTOL, f"at {size}")
    # The bound sees the rotary frequencies: another period moves the outputs past it.
    wrong = keras_vit.create_model(mirror_name(DINOV3), rope_temperature=10_000.0)
    with pytest.raises(AssertionError):
        assert_close_to_scale(logits(wrong, x), torch_logits(peer, x), RTOL)


def test_beit_loads_by_hub_name_at_timms_logits_features_and_attention(timm, mirror):
    _, model, peer, x = assert_loads_by_hub_name_at_timms_logits(timm, mirror, BEIT)
    spec = model.spec
    assert spec.relative_position_bias and spec.position_embedding == "none" and spec.norm_after_pool
    two = np.concatenate([x, x[:, :, ::-1]])  # two images: nothing may mix them
    assert_close_to_scale(logits(model, two), torch_logits(peer, two), RTOL)
    assert_intermediates_are_timms(model, peer, x, norm=False)  # its final norm follows the pooling
    assert_attention_is_timms(model, peer, x)
    # The tables are the grid's: another size is refused, naming why, not computed wrong.
    with pytest.raises(ValueError, match=r"relative position bias tables for its \(3, 3\) grid"):
        keras_vit.resize(model, 64)
    with pytest.raises(ValueError, match="relative_position_bias=True needs .* got dynamic_image_size=True"):
        keras_vit.create_model(mirror_name(BEIT), dynamic_image_size=True)


def test_eva02_loads_by_hub_name_at_timms_logits_features_and_attention(timm, mirror):
    _, model, peer, x = assert_loads_by_hub_name_at_timms_logits(timm, mirror, EVA02)
    spec = model.spec
    assert (spec.rope.form, spec.rope.reference_grid, spec.mlp_norm, spec.gated_mlp) == ("axial", (16, 16), True, True)
    two = np.concatenate([x, x[:, :, ::-1]])
    assert_close_to_scale(logits(model, two), torch_logits(peer, two), RTOL)
    assert_intermediates_are_timms(model, peer, x, norm=False)  # its final norm follows the pooling
    assert_attention_is_timms(model, peer, x)


def test_rope_mixed_loads_by_hub_name_at_timms_outputs_features_and_attention_at_any_size(timm, mirror):
    import torch

    _, model, peer, x = assert_loads_by_hub_name_at_timms_logits(timm, mirror, ROPE_MIXED, dynamic_img_size=True)
    assert model.spec.rope.form == "mixed" and model.spec.dynamic_image_size
    assert_intermediates_are_timms(model, peer, x)
    assert_attention_is_timms(model, peer, x)
    for size in ((64, 80), (32, 112)):  # each block's tables made for the grid, as timm's
        images = to_numpy(keras.ops.image.resize(np.concatenate([x, x[:, :, ::-1]]), size))
        with torch.no_grad():
            expected = peer(torch.from_numpy(images.transpose(0, 3, 1, 2))).numpy()
        assert_close_to_scale(logits(model, images), expected, RTOL, f"at {size}")


@pytest.mark.parametrize("architecture", [PE_CORE, SAPIENS2])
def test_perception_encoder_and_sapiens2_load_by_hub_name_at_timms_logits_features_and_attention(
    timm, mirror, architecture
):
    _, model, peer, x = assert_loads_by_hub_name_at_timms_logits(timm, mirror, architecture)
    spec = model.spec
    if architecture == PE_CORE:
        assert (spec.rope.grid_offset, spec.map_num_heads, spec.pool_include_prefix) == (1.0, 8, True)
    else:
        assert spec.qk_norm and not spec.layer_scale_mlp and spec.kv_heads_per_block[1] < spec.num_heads
    assert_intermediates_are_timms(model, peer, x)
    assert_attention_is_timms(model, peer, x)


def test_differential_attention_in_parallel_blocks_loads_at_timms_logits_features_and_attention(timm, mirror):
    import torch

    _, model, peer, x = assert_loads_by_hub_name_at_timms_logits(timm, mirror, DIFFERENTIAL_PARALLEL)
    assert model.spec.differential_attention and model.spec.parallel_blocks
    assert_intermediates_are_timms(model, peer, x, norm=False)  # its final norm follows the pooling
    # Each block's weights: timm's two softmax maps a head (read where its dropout takes
    # them, fused attention off), the second subtracted with the block's learned weight.
    theirs, hooks = [], []
    for block in peer.blocks:
        block.fused_attn = False
        hooks.append(block.attn_drop.register_forward_hook(lambda m, i, out: theirs.append(out.numpy())))
    try:
        with torch.no_grad():
            peer(torch.from_numpy(x.transpose(0, 3, 1, 2)))
            weights = [float(block._compute_lambda()) for block in peer.blocks]
    finally:
        for hook in hooks:
            hook.remove()
    ours = [to_numpy(a) for a in model.attention_model().predict_on_batch(x)]
    for i, (a, maps, weight) in enumerate(zip(ours, theirs, weights)):
        maps = maps.reshape(maps.shape[0], -1, 2, *maps.shape[2:])
        assert abs(weight - 1) > 0.05  # a weight other than 1: its value shows
        np.testing.assert_allclose(a, maps[:, :, 0] - weight * maps[:, :, 1], rtol=0, atol=ATTENTION_ATOL,
                                   err_msg=f"block {i}")  # fmt: skip


def mirror_name(architecture, tag="random"):
    return f"hf-hub:timm/{architecture}.{tag}"


# The preset folder's model, on the next backend of helpers.BACKEND_CYCLE.
NEXT_BACKEND_PRESET = textwrap.dedent("""
    import sys, numpy as np, keras, keras_vit
    folder, raw, out = sys.argv[1:4]
    model = keras_vit.create_model(folder)
    images = keras.ops.convert_to_numpy(model.preprocessing(np.load(raw)))
    np.save(out, keras.ops.convert_to_numpy(model.predict_on_batch(images)))
""")


def test_a_register_model_does_what_a_classic_one_does(timm, mirror, tmp_path):
    name, peer = serve_timm_model(timm, mirror, DINOV2_REGISTERS, num_classes=10)
    model = keras_vit.create_model(name)
    x = timm_input(peer)
    reference = logits(model, x)
    # Any size: built dynamic, at its own size it is the model, at another the model resized.
    dynamic = keras_vit.create_model(name, dynamic_image_size=True)
    assert_close_to_scale(logits(dynamic, x), reference, RTOL)
    big = to_numpy(keras.ops.image.resize(x, (70, 70)))
    assert_close_to_scale(logits(dynamic, big), logits(keras_vit.resize(model, 70), big), RTOL)
    # The class token's attention rollout over the patches, the registers left out.
    rollout = attention_rollout(model, x)
    assert rollout.shape == (1, *model.spec.grid_size) and 0 < rollout.sum() < 1
    # Mixed precision and int8: the same model within their rounding.
    mixed = logits(keras_vit.create_model(name, dtype="mixed_bfloat16"), x)
    assert_close_to_scale(mixed, reference, MIXED_RTOL)
    quantized = keras_vit.create_model(name)
    quantized.quantize("int8")
    assert_close_to_scale(logits(quantized, x), reference, INT8_RTOL)
    # Its preset folder reloads on the next backend, pre-processing included.
    folder = keras_vit.save_preset(model, str(tmp_path / "preset"))
    np.save(tmp_path / "raw.npy", cat_photo()[None])
    here = logits(model, to_numpy(model.preprocessing(cat_photo()[None])))
    backend = run_on_next_backend(NEXT_BACKEND_PRESET, folder, tmp_path / "raw.npy", tmp_path / "out.npy")
    assert_close_to_scale(np.load(tmp_path / "out.npy"), here, RTOL, f"-> {backend}")


def test_siglip_intermediates_are_timms(timm, mirror):
    _, model, peer, x = assert_loads_by_hub_name_at_timms_logits(timm, mirror, SIGLIP)
    assert model.spec.pooling == "map" and not model.spec.has_class_token
    assert_intermediates_are_timms(model, peer, x)


# The converters trace the model as TensorFlow rebuilds it from its .keras file, whichever
# backend built it: the layers' conversion is one, and each backend's export path is
# test_export's.
@once_on("tensorflow", "the converters see the layers as TensorFlow rebuilds them, whichever backend built them")
@pytest.mark.parametrize("architecture", [DINOV2_REGISTERS, SIGLIP, DINOV3, ROPE_MIXED, DIFFERENTIAL_PARALLEL])
def test_savedmodel_litert_and_onnx_exports_give_the_models_outputs(timm, mirror, architecture, tmp_path, rng):
    from keras_vit.export import export_model
    from keras_vit.export.runtime import load_exported

    name, _ = serve_timm_model(timm, mirror, architecture, num_classes=10)  # a classifier, as exports take
    model = keras_vit.create_model(name)
    images = rng.integers(0, 256, (3, *model.spec.image_size, 3), dtype=np.uint8)  # a dynamic model: its size
    result = export_model(model, tmp_path / "export", formats="savedmodel,tflite_float32,onnx")
    # What the exports run: the model's own pre-processing, then the model, then a softmax.
    expected = log_softmax(logits(model, to_numpy(model.preprocessing(images))))
    for fmt, path in result.paths.items():
        got = load_exported(path)(images)["probabilities"]
        assert_close_to_scale(np.log(got), expected, EXPORT_RTOL, fmt)


def test_deit_distilled_averages_its_two_heads_and_its_two_tokens_as_timm_does(timm, mirror):
    import torch

    # The logits: the mean of the class token's head and the distillation token's.
    name, model, peer, x = assert_loads_by_hub_name_at_timms_logits(timm, mirror, DEIT_DISTILLED)
    assert model.spec.distillation_token and model.get_layer("head_dist").kernel.shape == peer.head_dist.weight.T.shape
    # The features (backbone use, few-shot, linear probes): the mean of the two tokens.
    with torch.no_grad():
        tokens = peer.forward_features(torch.from_numpy(x.transpose(0, 3, 1, 2)))
        expected = peer.forward_head(tokens, pre_logits=True).numpy()
    assert_close_to_scale(logits(model.feature_model(), x), expected, RTOL)
    assert_intermediates_are_timms(model, peer, x)
    # Either head alone is another function: the mean is what the bound sees.
    class_head = model.get_layer("head")(model.get_layer("pooling").output)
    alone = logits(keras.Model(model.input, class_head), x)
    with pytest.raises(AssertionError):
        assert_close_to_scale(alone, torch_logits(peer, x), RTOL)
    # A new task starts both heads fresh; the tokens' weights are the checkpoint's.
    with pytest.warns(UserWarning, match="head_dist/(kernel|bias) keeps its fresh initial value"):
        new = keras_vit.create_model(name, num_classes=3)
    np.testing.assert_array_equal(to_numpy(new.get_layer("distillation_token").token), peer.dist_token.detach().numpy())
    with pytest.raises(
        ValueError, match="distillation_token=True needs pooling='token' or 'gap'.*got pooling='token_gap'"
    ):
        new.spec.replace(pooling="token_gap")


# The options that set only a model's widths and sizes: architectures that differ in these
# alone are one kind (the same layers, options and pre-processing at other shapes).
SHAPE_OPTIONS = ("hidden_size", "num_heads", "mlp_dim", "patch_size", "image_size", "num_classes", "map_num_heads",
                 "map_mlp_dim", "num_kv_heads", "representation_size", "rope_reference_grid")  # fmt: skip


def kinds():
    """{architecture: the first architecture of its kind}, from the spec options and
    pre-processing that timm's config.json gives at the family checks' size."""
    first = {}
    for architecture in timm_config.buildable():
        config = {"architecture": architecture, "model_args": small_timm_args(architecture)}
        options, _, preprocessing, _ = timm_config.from_hub_config(config)
        kind = {name: value for name, value in options.items() if name not in SHAPE_OPTIONS}
        kind.update(
            grouped=options.get("num_kv_heads") is not None, pre_logits=bool(options.get("representation_size"))
        )
        key = json.dumps([kind, preprocessing], sort_keys=True, default=str)
        yield architecture, first.setdefault(key, architecture)


FIRST_OF_KIND = dict(kinds())
# The XLA backends take the kinds in turns: the first kind on JAX, the second on TensorFlow, ...
XLA_BACKEND_OF_KIND = {
    first: ("jax", "tensorflow")[k % 2] for k, first in enumerate(dict.fromkeys(FIRST_OF_KIND.values()))
}


# Every architecture keras-vit builds (timm_config.buildable()): each on PyTorch, where its
# config's translation, its layout and its numerics are checked; the first of each kind on
# JAX or TensorFlow, in turns (the graph a backend runs for the others differs in its shapes
# alone; every layer and option is tested on all three in test_layers.py and the rest).
@pytest.mark.parametrize("architecture", timm_config.buildable())
def test_timm_architectures_load_by_hub_name_at_timms_logits(timm, mirror, architecture):
    first, backend = FIRST_OF_KIND[architecture], keras.backend.backend()
    if backend != "torch" and first != architecture:
        pytest.skip(f"{first}'s kind at other widths: checked on this backend as {first}, this one on torch")
    if backend != "torch" and XLA_BACKEND_OF_KIND[first] != backend:
        pytest.skip(f"its kind is checked on {XLA_BACKEND_OF_KIND[first]} and torch")
    assert_loads_by_hub_name_at_timms_logits(timm, mirror, architecture)


def test_a_wrong_gelu_form_or_epsilon_moves_the_logits_past_the_bound_and_a_missing_layer_scale_is_refused(
    timm, mirror
):
    # The bound sees the numerics: a model built with the tanh GELU (timm's is erf), or with
    # the epsilon 1e-5 where the file's is 1e-6, fails it at the family's embedding scale.
    name, peer = serve_timm_model(timm, mirror, DINOV2_REGISTERS, embedding_scale=EMBEDDING_SCALE)
    x = timm_input(peer)
    expected = torch_logits(peer, x)
    assert_close_to_scale(logits(keras_vit.create_model(name), x), expected, RTOL)
    for wrong_numerics in (dict(gelu_approximate=True), dict(layer_norm_epsilon=1e-5)):
        with pytest.warns(UserWarning, match="trained with"):
            wrong = keras_vit.create_model(name, **wrong_numerics)
        with pytest.raises(AssertionError):
            assert_close_to_scale(to_numpy(wrong(x)), expected, RTOL)
    # A model without LayerScale would load the rest and compute another function: refused.
    with pytest.raises(ValueError, match="layer_scale_init=a number"):
        keras_vit.create_model(name, layer_scale_init=None)


def test_a_timm_folder_loads_as_its_hub_name_does(timm, mirror, tmp_path):
    name, peer = serve_timm_model(timm, mirror, "vit_base_patch16_clip_quickgelu_224")
    folder = os.path.join(mirror.root, hub.repo_id(name), "resolve", "main")
    model = keras_vit.create_model(folder)
    assert model.spec.mlp_activation == "quick_gelu" and model.spec.pre_norm and not model.spec.patch_bias
    x = timm_input(peer)
    assert_close_to_scale(to_numpy(model(x)), torch_logits(peer, x), RTOL)
    # Another size and task: the position table resampled, a fresh head.
    with pytest.warns(UserWarning, match="head/(kernel|bias) keeps its fresh initial value"):
        resized = keras_vit.create_model(folder, image_size=64, num_classes=3)
    assert resized.output_shape == (None, 3) and resized.preprocessing.image_size == (64, 64)


def test_a_timm_model_is_the_weights_of_a_name_of_its_size_and_load_model_takes_its_hub_name(timm, mirror):
    # vit_ti16's size (width 192, 12 blocks of 3 heads) at a 3x3 grid.
    name, peer = serve_timm_model(timm, mirror, "vit_tiny_patch16_224", depth=12, embed_dim=192)
    model = keras_vit.create_model("vit_ti16", weights=name)
    # The timm model's numerics and pre-processing come with it, under the name asked for.
    assert model.name == "vit_ti16" and model.spec.image_size == (48, 48) and not model.spec.gelu_approximate
    assert model.preprocessing.image_size == (48, 48)
    x = timm_input(peer)
    assert_close_to_scale(logits(model, x), torch_logits(peer, x), RTOL)
    again = keras_vit.load_model(name)
    assert again.name == "vit_tiny_patch16_224"
    np.testing.assert_array_equal(logits(again, x), logits(model, x))
    with pytest.raises(ValueError, match=r"of another size than vit_s16: hidden_size 192 \(not 384\)"):
        keras_vit.create_model("vit_s16", weights=name)
    with pytest.raises(ValueError, match="holds its own architecture; model_name='vit_ti16'"):
        keras_vit.load_model(name, model_name="vit_ti16")
    with pytest.raises(ValueError, match="expected a model name of its size"):
        keras_vit.create_model("vit_ti16.augreg_in21k_ft_in1k", weights=name)


def test_every_architecture_builds_or_says_why_not():
    built, refused = [], {}
    for name in ARCHITECTURES:
        reason = timm_config.support(name)
        if reason is None:
            options = timm_config.spec_options(timm_config.architecture_args(name))
            spec = keras_vit.models.spec.ViTSpec.from_config(options)
            assert spec.hidden_size == ARCHITECTURES[name]["embed_dim"] and spec.depth == ARCHITECTURES[name]["depth"]
            built.append(name)
        else:
            assert reason.startswith("keras-vit does not build these timm options yet: "), reason
            refused[name] = reason
    # Every family the issues name is among them.
    for family in ("dinov2", "reg4", "clip", "deit3", "distilled", "siglip_gap", "gap", "dinov3", "eva02", "vit_pe_",
                   "beit", "sapiens2", "rope_mixed"):  # fmt: skip
        assert any(family in n for n in built), family
    assert len(built) + len(refused) == len(ARCHITECTURES)


def test_list_models_names_the_family_and_create_model_builds_one_as_timm_does(timm):
    names = keras_vit.list_models()
    assert set(timm_config.buildable()) <= set(names) and {"vit_b16", "r50_vit_b16"} <= set(names)
    assert keras_vit.list_models("vit_small_patch14*") == ["vit_small_patch14_dinov2", "vit_small_patch14_reg4_dinov2"]
    # By timm's name, with random weights: timm's parameters (registers, LayerScale, the
    # position table without the prefix tokens), at a small size as timm builds it.
    model = keras_vit.create_model(DINOV2_REGISTERS, image_size=28, depth=1, num_classes=5)
    peer = timm.create_model(DINOV2_REGISTERS, pretrained=False, img_size=28, depth=1, num_classes=5)
    assert model.name == DINOV2_REGISTERS and model.spec.num_register_tokens == 4 and model.preprocessing is None
    assert model.count_params() == sum(p.numel() for p in peer.parameters())
    with pytest.raises(ValueError, match=r"create_model\('hf-hub:timm/vit_small_patch14_reg4_dinov2.<tag>'\)"):
        keras_vit.create_model(DINOV2_REGISTERS, weights="lvd142m")


def test_bad_names_configs_and_files_are_clear_errors_and_load_nothing(timm, mirror, tmp_path):
    with pytest.raises(ValueError, match="not one of timm's .* Did you mean 'vit_small_patch16_224'"):
        timm_config.architecture_args("vit_smal_patch16_224")
    with pytest.raises(ValueError, match="hf-hub:<organisation>/<repository>"):
        keras_vit.create_model("hf-hub:vit_small_patch16_224")
    # A config.json with an option keras-vit does not know.
    name, _ = serve_timm_model(timm, mirror, "vit_small_patch16_224")
    # A misspelt option fails on the config, before the weights are downloaded.
    with pytest.raises(ValueError, match="unknown option.*pooling_mode"):
        keras_vit.create_model(name, pooling_mode="gap")
    assert mirror.requests == [f"/{hub.repo_id(name)}/resolve/main/config.json"]
    folder = os.path.join(mirror.root, hub.repo_id(name), "resolve", "main")
    with open(os.path.join(folder, "config.json")) as f:
        config = json.load(f)
    strange = tmp_path / "strange"
    strange.mkdir()
    os.link(os.path.join(folder, "model.safetensors"), strange / "model.safetensors")
    (strange / "config.json").write_text(json.dumps({**config, "model_args": {"warp_factor": 9}}))
    with pytest.raises(ValueError, match="timm arguments keras-vit does not know: warp_factor"):
        keras_vit.create_model(str(strange))
    # Weights that do not fit their config: the message names the key and both shapes.
    (strange / "config.json").write_text(
        json.dumps({**config, "model_args": {**config["model_args"], "embed_dim": 96}})
    )
    with pytest.raises(ValueError, match=r"(?s)does not fit model.*nothing was loaded.*expected"):
        keras_vit.create_model(str(strange))
    # A block or an attention keras-vit does not build says which option, before any download.
    for option, why in (("block_fn", "this block"), ("attn_layer", "this attention")):
        (strange / "config.json").write_text(json.dumps({**config, "model_args": {option: "parallelthingsblock"}}))
        with pytest.raises(
            timm_config.UnsupportedArchitectureError,
            match=rf"does not build these timm options yet: {option}='parallelthingsblock' \({why}\)",
        ):
            keras_vit.create_model(str(strange))  # fmt: skip


def test_the_table_and_its_docs_page_are_what_the_script_writes_from_this_timm(timm):
    import importlib.util

    script = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "scripts", "make_timm_table.py")
    spec = importlib.util.spec_from_file_location("make_timm_table", script)
    make = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(make)
    version, collected, tags = make.collect()
    assert collected == ARCHITECTURES, f"timm {version}: run scripts/make_timm_table.py"
    assert tags == PRETRAINED, f"timm {version}'s pretrained tags: run scripts/make_timm_table.py"
    with open(make.DOCS, encoding="utf-8") as f:
        assert f.read() == make.render_docs(), "run scripts/make_timm_table.py"
    # The page's groups: a name's first match, so the narrower part comes first.
    assert make.family("vit_so400m_patch14_siglip_gap_384") == "SigLIP with average pooling"
    assert make.family("vit_small_patch14_reg4_dinov2") == "DINOv2 with registers"
    assert make.family("vit_base_patch16_224").startswith("The paper's ViT")
