"""Masked autoencoders (``keras_vit/models/masked_autoencoder.py``): the masking, the encoder
on the visible patches alone, the targets and the loss against numpy written apart, and
transformers' ``ViTMAEForPreTraining`` loaded at its reconstruction loss on the same mask."""

import json
import os

import keras
import numpy as np
import pytest
from helpers import TINY_ENCODER, assert_close_to_scale, randomize_torch, to_numpy

import keras_vit
from keras_vit.checkpoints.transformers_config import masked_autoencoder_options, spec_options
from keras_vit.models.mae_spec import MAESpec
from keras_vit.models.masked_autoencoder import MaskedAutoencoder
from keras_vit.models.patch_masking import random_masking, visible_count

SMALL = dict(image_size=16, patch_size=4, hidden_size=32, depth=2, num_heads=2, mlp_dim=64, decoder_width=16,
             decoder_depth=1, decoder_heads=2)  # fmt: skip
PATCHES = 16  # the 4x4 grid of SMALL


def small_mae(**options):
    return MaskedAutoencoder(**{**SMALL, "seed": 0, **options})


def test_the_options_are_one_mae_spec_given_whole_or_one_by_one_and_saved_flat():
    options = MAESpec(mask_ratio=0.5, decoder_width=16, decoder_depth=1, decoder_heads=2, decoder_mlp_dim=24)
    whole = MaskedAutoencoder({k: v for k, v in SMALL.items() if not k.startswith("decoder")}, mae_spec=options)
    apart = small_mae(mask_ratio=0.5, decoder_mlp_dim=24)
    assert whole.mae_spec == apart.mae_spec == options
    assert tuple(whole.decoder_blocks[0].mlp.fc1.kernel.shape) == (16, 24)
    config = apart.get_config()
    assert (config["mask_ratio"], config["decoder_mlp_dim"], config["norm_pix_loss"]) == (0.5, 24, True)
    assert MaskedAutoencoder.from_config(config).mae_spec == options
    assert MAESpec(decoder_width=16, decoder_heads=2).mlp_dim == 64


def images_and_noise(seed=0, batch=3):
    rng = np.random.default_rng(seed)
    images = rng.normal(size=(batch, 16, 16, 3)).astype("float32")
    return images, rng.uniform(size=(batch, PATCHES)).astype("float32")


def numpy_patches(images, p):
    """Each patch's pixels, row by row with the channels innermost, patches row-major: by slicing."""
    batch, height, width, _ = images.shape
    return np.stack(
        [
            [images[b, r : r + p, c : c + p].reshape(-1) for r in range(0, height, p) for c in range(0, width, p)]
            for b in range(batch)
        ]
    )


def numpy_targets(images, p, normalize=True):
    patches = numpy_patches(images.astype(np.float64), p)
    if not normalize:
        return patches
    mean = patches.mean(axis=-1, keepdims=True)
    return (patches - mean) / np.sqrt(patches.var(axis=-1, ddof=1, keepdims=True) + 1e-6)


def numpy_hidden(noise, keep):
    """1 where a patch is hidden: all but the ``keep`` of lowest noise in each row."""
    ranks = np.argsort(np.argsort(noise, axis=1), axis=1)
    return (ranks >= keep).astype(np.float64)


def pixel_mask(mask, p=4, grid=4):
    """A ``(batch, patches)`` mask as ``(batch, height, width, 1)`` pixels."""
    return np.repeat(np.repeat(mask.reshape(-1, grid, grid), p, axis=1), p, axis=2)[..., None].astype("float32")


@pytest.mark.parametrize("ratio", [0.75, 0.5, 0.9])
def test_the_masking_hides_the_stated_share_of_each_image_at_random(ratio):
    model = small_mae(mask_ratio=ratio)
    images, _ = images_and_noise(batch=4)
    keep = visible_count(PATCHES, ratio)
    assert model.num_visible == keep == int(PATCHES * (1 - ratio))
    masks = [to_numpy(model(images, training=True)["mask"]) for _ in range(2)]
    for mask in masks:
        assert mask.shape == (4, PATCHES)
        assert set(np.unique(mask)) == {0.0, 1.0}
        np.testing.assert_array_equal(mask.sum(axis=1), PATCHES - keep)
    # Drawn per image and per step: the images differ, and so do two steps.
    assert len({tuple(row) for row in masks[0]}) > 1
    assert not np.array_equal(masks[0], masks[1])
    # Evaluation draws the same masks every time.
    np.testing.assert_array_equal(to_numpy(model(images)["mask"]), to_numpy(model(images)["mask"]))


def test_random_masking_keeps_the_lowest_noise_and_restores_the_grid_order():
    _, noise = images_and_noise(batch=5)
    kept, restore, mask = (to_numpy(t) for t in random_masking(noise, 4))
    np.testing.assert_array_equal(mask, numpy_hidden(noise, 4))
    for row in range(5):
        np.testing.assert_array_equal(np.sort(kept[row]), np.sort(np.argsort(noise[row])[:4]))
        assert (mask[row, kept[row]] == 0).all()
        # restore undoes the shuffle: the shuffled positions put back in order are 0..n-1.
        shuffled = np.argsort(noise[row])
        np.testing.assert_array_equal(shuffled[restore[row]], np.arange(PATCHES))


def test_the_encoder_sees_the_visible_patches_only():
    model = small_mae()
    images, noise = images_and_noise()
    kept, _, mask = random_masking(noise, model.num_visible)
    latent = to_numpy(model.encode(images, kept))
    assert latent.shape == (3, 1 + model.num_visible, 32)  # the class token and the visible patches
    rng = np.random.default_rng(1)
    hidden = pixel_mask(to_numpy(mask))
    other_hidden = images + 5 * rng.normal(size=images.shape).astype("float32") * hidden
    other_visible = images + 5 * rng.normal(size=images.shape).astype("float32") * (1 - hidden)
    # Other pixels in the hidden patches change nothing the model computes...
    np.testing.assert_allclose(to_numpy(model.encode(other_hidden, kept)), latent, atol=1e-6)
    predictions = to_numpy(model(images, noise=noise)["predictions"])
    np.testing.assert_allclose(to_numpy(model(other_hidden, noise=noise)["predictions"]), predictions, atol=1e-6)
    # ...where other pixels in the visible ones move its every output.
    moved = np.abs(to_numpy(model.encode(other_visible, kept)) - latent).max(axis=-1)
    assert (moved > 1e-2).all(), moved


@pytest.mark.parametrize("normalize", [True, False])
def test_the_targets_and_the_loss_equal_numpy(normalize):
    model = small_mae(norm_pix_loss=normalize)
    images, noise = images_and_noise()
    targets = numpy_targets(images, 4, normalize)
    np.testing.assert_allclose(to_numpy(model.targets(images)), targets, rtol=1e-5, atol=1e-5)
    out = model(images, noise=noise)
    hidden = numpy_hidden(noise, model.num_visible)
    np.testing.assert_array_equal(to_numpy(out["mask"]), hidden)
    errors = ((to_numpy(out["predictions"]).astype(np.float64) - targets) ** 2).mean(axis=-1)
    expected = (errors * hidden).sum() / hidden.sum()
    visible_too = errors.mean()  # what a loss over every patch would give: far from it
    assert abs(visible_too - expected) > 1e-3 * expected
    loss = float(to_numpy(model.compute_loss(x=images, y_pred=out)))
    assert abs(loss - expected) <= 1e-5 * expected, (loss, expected)


def small_vit_mae(transformers, layers, decoder_mlp):
    """A small ``ViTMAEForPreTraining`` at 16 px: ``layers`` blocks in the encoder and in the decoder."""
    config = transformers.ViTMAEConfig(
        hidden_size=32, num_hidden_layers=layers, num_attention_heads=2, intermediate_size=64, image_size=16,
        patch_size=4, decoder_hidden_size=16, decoder_num_hidden_layers=layers, decoder_num_attention_heads=2,
        decoder_intermediate_size=decoder_mlp, mask_ratio=0.75, norm_pix_loss=True,
    )  # fmt: skip
    return transformers.ViTMAEForPreTraining(config)


def test_a_transformers_vit_mae_checkpoint_loads_at_its_reconstruction_loss(tmp_path):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    peer = randomize_torch(small_vit_mae(transformers, layers=2, decoder_mlp=48), informative=True).eval()
    peer.save_pretrained(tmp_path, safe_serialization=True)
    images, noise = images_and_noise()
    with torch.no_grad():
        expected = peer(torch.from_numpy(images.transpose(0, 3, 1, 2).copy()), noise=torch.from_numpy(noise))
    with open(os.path.join(tmp_path, "config.json")) as f:
        written = json.load(f)
    model = MaskedAutoencoder(**spec_options(written), **masked_autoencoder_options(written))
    report = keras_vit.load_weights(model, os.path.join(tmp_path, "model.safetensors"))
    assert sorted(report.loaded) == sorted(v.path for v in model.weights) and not report.unused
    out = model(images, noise=noise)
    np.testing.assert_array_equal(to_numpy(out["mask"]), expected.mask.numpy())
    assert_close_to_scale(to_numpy(out["predictions"]), expected.logits.numpy(), 2e-5)
    loss = float(to_numpy(model.compute_loss(x=images, y_pred=out)))
    assert abs(loss - float(expected.loss)) <= 2e-5, (loss, float(expected.loss))


def test_it_trains_saves_reloads_and_its_encoder_loads_into_a_vit(tmp_path):
    model = small_mae()
    images, noise = images_and_noise(batch=8)
    model.compile(keras.optimizers.Adam(1e-3))
    position = to_numpy(model.backbone.get_layer("position_embedding").embedding)
    before = model.evaluate(images, verbose=0, return_dict=True)["loss"]
    model.fit(images, epochs=5, batch_size=8, verbose=0)
    assert model.evaluate(images, verbose=0, return_dict=True)["loss"] < before
    # MAE's fixed tables stay as they are.
    np.testing.assert_array_equal(to_numpy(model.backbone.get_layer("position_embedding").embedding), position)
    path = os.path.join(tmp_path, "mae.keras")
    model.save(path)
    reloaded = keras.saving.load_model(path)
    np.testing.assert_allclose(
        to_numpy(reloaded(images, noise=noise)["predictions"]), to_numpy(model(images, noise=noise)["predictions"]),
        atol=1e-6,
    )  # fmt: skip
    vit = keras_vit.create_model("vit_ti16", **{k: v for k, v in SMALL.items() if not k.startswith("decoder")},
                                 num_classes=3)  # fmt: skip
    report = keras_vit.load_weights(vit, path, warn=False)
    assert not [p for p in report.fresh if not p.startswith("head/")]
    np.testing.assert_array_equal(
        to_numpy(vit.get_layer("block_1").mlp.fc2.kernel), to_numpy(model.backbone.get_layer("block_1").mlp.fc2.kernel)
    )


@pytest.mark.parametrize(
    "options, message",
    [
        (dict(mask_ratio=1.0), r"mask_ratio must be a number in \(0, 1\).*got 1\.0"),
        (dict(mask_ratio=0), r"mask_ratio must be a number in \(0, 1\).*got 0"),
        (dict(mask_ratio=0.97), r"hides all 16 patches"),
        (
            dict(decoder_width=18),
            r"decoder_width must be a multiple of decoder_heads .* and of 4 .*got decoder_width=18",
        ),
        (dict(decoder_heads=3), r"decoder_width must be a multiple of decoder_heads.*decoder_heads=3"),
        (dict(spec="r26_vit_s32"), r"hybrid's ResNet stem convolves across patch borders"),
        (dict(rope="axial", position_embedding="none"), r"rotary embeddings"),
        (dict(dynamic_image_size=True), r"pre-trains at one size"),
    ],
)
def test_what_a_masked_autoencoder_cannot_be_is_a_clear_error(options, message):
    if "spec" in options:  # a named model, at the test's size
        options = dict(spec=keras_vit.get_spec(options["spec"]), image_size=64)
    with pytest.raises(ValueError, match=message):
        small_mae(**options) if "spec" not in options else MaskedAutoencoder(**options)


def test_the_recipe_pre_trains_a_masked_autoencoder_and_fine_tuning_starts_from_its_encoder(tmp_path):
    from keras_vit.training import finetune, make_config, pretrain
    from keras_vit.training.pretrained import load_pretrained

    tiny = dict(epochs=2, steps_per_epoch=2, depth=1, progress=0, output_dir=str(tmp_path))
    mae = dict(objective="mae", mask_ratio=0.5, decoder_width=32, decoder_depth=1, decoder_heads=2)
    result = pretrain(make_config("digits_pretrain", **mae, **tiny))
    assert isinstance(result.model, MaskedAutoencoder) and result.model.num_visible == 8  # of the 4x4 grid
    assert result.metric == "loss" and np.isfinite(result.test_loss) and np.isnan(result.test_accuracy)
    assert len(result.history["val_loss"]) == 2 and "test loss" in result.summary()
    assert os.path.isfile(os.path.join(result.run_dir, "best.keras"))  # the lowest validation loss's
    saved = os.path.join(result.run_dir, "model.keras")
    config = make_config("digits_finetune", init_from=saved, **tiny)
    encoder = load_pretrained(config)
    assert isinstance(encoder, keras_vit.VisionTransformer)
    np.testing.assert_array_equal(
        to_numpy(encoder.get_layer("block_0").mlp.fc1.kernel),
        to_numpy(result.model.backbone.get_layer("block_0").mlp.fc1.kernel),
    )
    tuned = finetune(config)
    assert tuned.metric == "accuracy" and 0.0 <= tuned.test_accuracy <= 1.0


def test_a_reconstruction_keeps_the_visible_patches_and_fills_the_hidden_ones():
    model = small_mae()
    images, noise = images_and_noise()
    out = model.reconstruct(images, noise=noise)
    hidden = pixel_mask(numpy_hidden(noise, model.num_visible))
    np.testing.assert_array_equal(to_numpy(out["hidden"]), hidden)
    filled = to_numpy(out["reconstruction"])
    np.testing.assert_allclose(filled * (1 - hidden), images * (1 - hidden), atol=1e-5)
    assert np.abs((filled - images) * hidden).max() > 0.1  # the hidden pixels are the decoder's
    # Each image's loss, over its own hidden patches; their mean weighted alike is the batch's loss.
    losses = to_numpy(out["losses"])
    batch = float(to_numpy(model.compute_loss(x=images, y_pred=model(images, noise=noise))))
    assert losses.shape == (3,) and abs(losses.mean() - batch) <= 1e-5 * batch
    masked, pictures = model.reconstruct_images(images, noise=noise)
    assert (masked[np.broadcast_to(hidden, masked.shape) == 1] == 0).all() and masked.max() > 0
    assert pictures.min() >= 0 and pictures.max() <= 255


def test_inspect_reconstruct_draws_and_lists_a_masked_autoencoders_reconstructions(tmp_path, capsys):
    from keras_vit.commands import main
    from keras_vit.commands.inspect_model import load_images, preprocess

    model = small_mae()
    path = os.path.join(tmp_path, "mae.keras")
    model.save(path)
    out = os.path.join(tmp_path, "figures")
    main(["inspect", path, "--reconstruct", "--num-images", "3", "--output", out])
    assert sorted(os.listdir(out)) == ["reconstructions.csv", "reconstructions.png"]
    with open(os.path.join(out, "reconstructions.png"), "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"
    with open(os.path.join(out, "reconstructions.csv")) as f:
        rows = [line.strip().split(",") for line in f][1:]
    images, _ = preprocess(model.backbone, load_images(None, 3))  # the digits' first test images
    expected = model.reconstruction_losses(images)
    assert [int(r[1]) for r in rows] == [PATCHES - model.num_visible] * 3
    np.testing.assert_allclose([float(r[2]) for r in rows], expected, rtol=1e-4)
    with pytest.raises(SystemExit) as exit_status:  # a plain ViT has no reconstructions to draw
        vit = keras_vit.create_model("vit_ti16", image_size=16, patch_size=4, hidden_size=32, depth=1, num_heads=2,
                                     mlp_dim=64, num_classes=3)  # fmt: skip
        vit.save(os.path.join(tmp_path, "vit.keras"))
        main(["inspect", os.path.join(tmp_path, "vit.keras"), "--reconstruct", "--output", str(tmp_path / "none")])
    assert exit_status.value.code == 2 and "expected a model pre-trained with keras-vit pretrain --objective mae" in (
        capsys.readouterr().err
    )
    assert not os.path.exists(tmp_path / "none")


@pytest.mark.slow
def test_pre_training_continues_a_masked_autoencoder_from_its_file_transformers_folder_or_a_vit(tmp_path, capsys):
    from keras_vit.training import make_config, pretrain

    # One step at a rate of 1e-9: the weights trained are the start's, to float32 rounding.
    still = dict(epochs=1, steps_per_epoch=1, learning_rate=1e-9, progress=0, output_dir=str(tmp_path))
    small = dict(objective="mae", depth=1, mask_ratio=0.5, decoder_width=32, decoder_depth=1, decoder_heads=2)
    first = pretrain(make_config("digits_pretrain", run_name="first", **small, **{**still, "learning_rate": 1e-3}))
    saved = os.path.join(first.run_dir, "model.keras")
    # keras-vit's own file: its decoder and mask ratio come with it (none given here).
    again = pretrain(make_config("digits_pretrain", run_name="again", objective="mae", init_from=saved, **still))
    options = again.model.mae_spec
    assert (options.decoder_width, options.decoder_depth, options.mask_ratio) == (32, 1, 0.5)
    for path in ("block_0/mlp/fc1/kernel", "decoder_block_0/mlp/fc1/kernel", "decoder_pred/kernel", "mask_token/token"):
        start, now = (to_numpy(next(v for v in m.weights if v.path == path)) for m in (first.model, again.model))
        np.testing.assert_allclose(now, start, atol=1e-6, err_msg=path)
    # transformers' ViTMAEForPreTraining folder: its decoder (an MLP 1.5x its width) from its config.json.
    transformers = pytest.importorskip("transformers")
    peer = randomize_torch(small_vit_mae(transformers, layers=1, decoder_mlp=24)).eval()
    folder = str(tmp_path / "vit-mae")
    peer.save_pretrained(folder, safe_serialization=True)
    hf = pretrain(make_config("digits_pretrain", run_name="hf", objective="mae", init_from=folder, **still)).model
    options = hf.mae_spec
    assert (options.decoder_width, options.decoder_mlp_dim, options.mask_ratio, options.norm_pix_loss) == (
        16,
        24,
        0.75,
        True,
    )
    np.testing.assert_allclose(to_numpy(hf.decoder_pred.kernel), peer.decoder.decoder_pred.weight.detach().numpy().T,
                               atol=1e-6)  # fmt: skip
    # A ViT (timm's .mae weights are the encoder alone): the decoder starts fresh, and the run says so.
    vit = keras_vit.create_model("vit_ti16", image_size=16, patch_size=4, depth=1, num_classes=10, **TINY_ENCODER)
    keras_vit.save_model(vit, str(tmp_path / "vit.keras"))
    capsys.readouterr()
    encoder = pretrain(
        make_config(
            "digits_pretrain",
            run_name="vit",
            objective="mae",
            decoder_width=32,
            decoder_depth=1,
            decoder_heads=2,
            init_from=str(tmp_path / "vit.keras"),
            **still,
        )
    )
    assert "the decoder starts fresh" in capsys.readouterr().out
    np.testing.assert_allclose(to_numpy(encoder.model.backbone.get_layer("block_0").mlp.fc2.kernel),
                               to_numpy(vit.get_layer("block_0").mlp.fc2.kernel), atol=1e-6)  # fmt: skip
