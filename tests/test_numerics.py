"""The numerics a checkpoint was trained with, one option at a time: built with the right
value, keras-vit gives the reference's logits within the parity bound; built with a wrong
one, the same comparison fails (a mutation test: it shows the parity tests can tell).

The references: timm (exact GELU, LayerNorm 1e-6, its ``fc_norm``), HF transformers
(LayerNorm 1e-12, read from ``config.json``), and for the original ``.npz`` files an
independent numpy forward (``npz_reference.py``: the hybrid's ``(w - mean) / (std + 1e-5)``
standardisation, flax's GroupNorm 1e-6, the tanh GELU, the LayerNorm before pooling).

Each case's weights and images make its option visible: the weights are informative
(``helpers``); where an epsilon is compared, the statistics it is added to are made
comparable to it (small embeddings before a LayerNorm, small images before the root
GroupNorm, small root kernels before their standardisation), as any real input can be.
"""

import warnings

import numpy as np
import pytest
from helpers import assert_close_to_scale, images, logits, randomize_torch, save_torch_state, torch_logits
from npz_reference import vit_logits
from upstream import hf_model, keras_for_hf, keras_hybrid, write_original_hybrid_npz, write_original_npz

import keras_vit
from keras_vit.checkpoints.loader import trained_numerics

# The parity tests' bound (test_checkpoint_parity.py): max |ours - ref| <= RTOL x max |ref|.
RTOL = 1e-4
# A wrong option must miss the bound by this factor, so that a failure is never rounding.
MARGIN = 10


def load(model, path):
    """``load_weights``, without the warning a wrong option gets (tested below)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        keras_vit.load_weights(model, path)
    return model


def check_right_and_wrong(build, path, x, expected, right, wrong):
    """``build(**right)`` loads ``path`` and passes the parity bound on ``x``; each
    ``build(**right, **{option: value})`` for ``wrong``'s items misses it by ``MARGIN``."""
    assert_close_to_scale(logits(load(build(**right), path), x), expected, RTOL)
    misses = {}
    for option, value in wrong:
        model = load(build(**{**right, option: value}), path)
        with pytest.raises(AssertionError):
            assert_close_to_scale(logits(model, x), expected, RTOL)
        misses[option, value] = np.abs(logits(model, x) - expected).max() / np.abs(expected).max()
    small = {k: v for k, v in misses.items() if v < MARGIN * RTOL}
    assert not small, f"wrong options within {MARGIN}x the bound: {small}"


def shrink_embeddings(state_dict, prefixes, factor=1e-2):
    """The embeddings' weights scaled by ``factor``: the first LayerNorm then sees token
    variances near 1e-4, where its epsilon is not negligible."""
    return {k: v * factor if k.startswith(prefixes) else v for k, v in state_dict.items()}


def expose_gelu(arrays, fc1_bias, fc2_kernel, shift=-2.7, gain=30.0):
    """Each MLP's hidden pre-activations moved near ``shift``, where the tanh and erf GELUs
    differ most relative to their value, and its output layer scaled by ``gain`` so the
    MLPs carry the logits: the GELU form then shows in them. ``fc1_bias`` and
    ``fc2_kernel`` tell the keys of those weights."""
    out = {}
    for k, v in arrays.items():
        if fc1_bias(k):
            v = v * 0 + shift
        elif fc2_kernel(k):
            v = v * gain
        out[k] = v
    return out


def test_timm_gelu_form_and_layer_norm_epsilon(timm, tmp_path, rng):
    peer = randomize_torch(
        timm.models.vision_transformer.VisionTransformer(
            img_size=32, patch_size=8, embed_dim=64, depth=2, num_heads=4, mlp_ratio=2.0, num_classes=5
        ).eval(),
        informative=True,
    )
    state = shrink_embeddings(peer.state_dict(), ("patch_embed.", "cls_token", "pos_embed"))
    peer.load_state_dict(
        expose_gelu(state, lambda k: k.endswith("mlp.fc1.bias"), lambda k: k.endswith("mlp.fc2.weight"))
    )
    path = save_torch_state(peer.state_dict(), str(tmp_path / "model.safetensors"))
    x = images(rng, 32)

    def build(**options):
        return keras_vit.VisionTransformer(
            image_size=32, patch_size=8, hidden_size=64, depth=2, num_heads=4, mlp_dim=128, num_classes=5, **options
        )

    right = dict(gelu_approximate=False, layer_norm_epsilon=1e-6)
    wrong = [("gelu_approximate", True), ("layer_norm_epsilon", 1e-12), ("layer_norm_epsilon", 1e-5)]
    check_right_and_wrong(build, path, x, torch_logits(peer, x), right, wrong)
    with pytest.warns(UserWarning, match=r"trained with gelu_approximate=False"):
        keras_vit.load_weights(build(**{**right, "gelu_approximate": True}), path)


def test_timm_pooling_norm_in_the_wrong_place_is_refused(timm, tmp_path):
    # timm names the norm after pooling `fc_norm`, so a file says where its norm goes.
    peer = timm.models.vision_transformer.VisionTransformer(
        img_size=16, patch_size=8, embed_dim=32, depth=1, num_heads=2, num_classes=3, global_pool="avg"
    )
    path = save_torch_state(peer.state_dict(), str(tmp_path / "gap.safetensors"))
    model = keras_vit.VisionTransformer(
        image_size=16, patch_size=8, hidden_size=32, depth=1, num_heads=2, mlp_dim=128, num_classes=3,
        pooling="gap", class_token=True, norm_after_pool=False,
    )  # fmt: skip
    with pytest.raises(ValueError, match=r"after pooling \(`fc_norm`\).*build it with norm_after_pool=True"):
        keras_vit.load_weights(model, path)


def test_hf_layer_norm_epsilon_and_gelu_form(tmp_path, rng):
    config_kwargs = dict(
        hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128, image_size=32,
        patch_size=8, num_labels=5,
    )  # fmt: skip
    peer, config = hf_model(config_kwargs, tmp_path)
    assert config.layer_norm_eps == 1e-12  # HF's default, which its files are trained with
    state = shrink_embeddings(peer.state_dict(), "vit.embeddings.")
    # (transformers 5 names the MLP as timm does in memory; its files keep the hub's names)
    peer.load_state_dict(
        expose_gelu(state, lambda k: k.endswith("mlp.fc1.bias"), lambda k: k.endswith("mlp.fc2.weight"))
    )
    peer.save_pretrained(tmp_path)
    x = images(rng, 32)
    right = dict(gelu_approximate=False, layer_norm_epsilon=1e-12)
    wrong = [("layer_norm_epsilon", 1e-6), ("gelu_approximate", True)]
    build = lambda **options: keras_for_hf(config, **options)
    check_right_and_wrong(build, str(tmp_path / "model.safetensors"), x, torch_logits(peer, x), right, wrong)


def test_original_gap_pooling_norm_and_layer_norm_epsilon(tmp_path, rng):
    # The original "gap" models normalise every token, then average; no class token.
    path = write_original_npz(str(tmp_path / "gap.npz"), rng, 64, 2, 4, 128, 8, 16, 6, class_token=False)
    arrays = dict(np.load(path))
    for key in ("embedding/kernel", "embedding/bias", "Transformer/posembed_input/pos_embedding"):
        arrays[key] = arrays[key] * 1e-2  # token variances near 1e-4: the epsilon shows
    np.savez(path, **expose_gelu(arrays, lambda k: k.endswith("Dense_0/bias"), lambda k: k.endswith("Dense_1/kernel")))
    x = images(rng, 32)
    expected = vit_logits(path, x, patch=8, heads=4, pooling="gap")

    def build(**options):
        return keras_vit.VisionTransformer(
            image_size=32, patch_size=8, hidden_size=64, depth=2, num_heads=4, mlp_dim=128, num_classes=6,
            pooling="gap", **options,
        )  # fmt: skip

    right = dict(gelu_approximate=True, layer_norm_epsilon=1e-6, norm_after_pool=False)
    wrong = [("norm_after_pool", True), ("layer_norm_epsilon", 1e-12), ("gelu_approximate", False)]
    check_right_and_wrong(build, path, x, expected, right, wrong)


def test_original_hybrid_numerics_against_an_independent_reference(tmp_path, rng):
    # R50+ViT's key names with a (1, 1, 1) ResNet of width 64 (two channels per GroupNorm
    # group) under a one-block ViT: 32 px -> a 2x2 grid + the class token.
    vit = dict(width=64, depth=1, heads=4, mlp=128, tokens=5, classes=7)
    path = write_original_hybrid_npz(str(tmp_path / "R50+ViT.npz"), rng, (1, 1, 1), 64, **vit)
    arrays = dict(np.load(path))
    # Root kernels with standard deviations between 3e-6 and 3e-5 per output channel, so
    # that the standardisation's epsilon (1e-5) and form change each channel differently.
    spread = np.exp(rng.uniform(np.log(0.3), np.log(3.0), 64))
    arrays["conv_root/kernel"] = (rng.standard_normal((7, 7, 3, 64)) * 1e-5 * spread).astype("float32")
    np.savez(path, **expose_gelu(arrays, lambda k: k.endswith("Dense_0/bias"), lambda k: k.endswith("Dense_1/kernel")))
    x = 1e-3 * images(rng, 32)  # the root GroupNorm sees variances near its epsilon (1e-6)
    expected = vit_logits(path, x, patch=1, heads=4, block_units=(1, 1, 1))

    def build(**options):
        return keras_hybrid((1, 1, 1), 64, 32, hidden_size=64, depth=1, num_heads=4, mlp_dim=128, num_classes=7,
                            **options)  # fmt: skip

    right = dict(
        resnet_std_conv_form="std_eps", resnet_std_conv_epsilon=1e-5, resnet_group_norm_epsilon=1e-6,
        gelu_approximate=True, layer_norm_epsilon=1e-6,
    )  # fmt: skip
    wrong = [
        ("resnet_std_conv_form", "var_eps"),
        ("resnet_std_conv_epsilon", 1e-8),
        ("resnet_group_norm_epsilon", 1e-5),
        ("gelu_approximate", False),
    ]
    check_right_and_wrong(build, path, x, expected, right, wrong)
    # The right numerics are what keras-vit reads from such a file.
    assert set(right.items()) <= set(trained_numerics(path, hybrid=True).items())
