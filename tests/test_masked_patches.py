"""Masked patch prediction: the corruption's proportions, the colour targets, learning,
save -> load -> fine-tune, and the recipe's errors."""

import os

import keras
import numpy as np
import pytest
from helpers import TINY_ENCODER, to_numpy

import keras_vit
from keras_vit.commands.recipe_flags import parse_args
from keras_vit.layers import ImagePreprocessing
from keras_vit.models.masked_patches import (
    CLEAN,
    KEPT,
    MASKED,
    RANDOM,
    MaskedPatchPrediction,
    PatchCorruption,
    mean_colour_targets,
)
from keras_vit.training import finetune, make_config, objectives, pretrain
from keras_vit.training.config import OBJECTIVES

TINY = dict(image_size=16, patch_size=4, depth=1, **TINY_ENCODER)
TINY_RECIPE = dict(depth=1, epochs=1, steps_per_epoch=2, batch_size=32, progress=0, warmup_steps=2, **TINY_ENCODER)


def test_corruption_follows_the_stated_proportions():
    batch, length, width = 64, 64, 4
    ids = np.arange(batch * length, dtype="float32").reshape(batch, length, 1)
    tokens = np.repeat(ids, width, axis=-1)  # every patch's embedding names its position
    layer = PatchCorruption(seed=0)
    out, what = (to_numpy(t) for t in layer(tokens, training=True))
    # An exact count per image (BERT's way): round(64 * 0.5) patches.
    assert ((what != CLEAN).sum(axis=1) == 32).all()
    # Each corrupted patch's kind is drawn on its own: binomial counts over 2048 patches,
    # within 4 standard deviations of the paper's 80/10/10.
    corrupted = int((what != CLEAN).sum())
    for kind, p in ((MASKED, 0.8), (RANDOM, 0.1), (KEPT, 0.1)):
        share = (what == kind).sum() / corrupted
        assert abs(share - p) < 4 * np.sqrt(p * (1 - p) / corrupted), (kind, share)
    mask = to_numpy(layer.mask_embedding)
    np.testing.assert_array_equal(out[what == MASKED], np.broadcast_to(mask, out[what == MASKED].shape))
    np.testing.assert_array_equal(out[(what == CLEAN) | (what == KEPT)], tokens[(what == CLEAN) | (what == KEPT)])
    # A random replacement is another patch's embedding (from anywhere in the batch).
    source = out[what == RANDOM][:, 0]
    assert (source != ids[what == RANDOM][:, 0]).all()
    assert np.isin(source, ids).all() and (source // length != np.nonzero(what == RANDOM)[0]).any()
    # Training draws anew at every call; outside training the corruption is the same each time.
    assert (to_numpy(layer(tokens, training=True)[1]) != what).any()
    fixed = [to_numpy(layer(tokens, training=False)[1]) for _ in range(2)]
    np.testing.assert_array_equal(*fixed)
    assert ((fixed[0] != CLEAN).sum(axis=1) == 32).all()


def test_corruption_options_are_checked():
    with pytest.raises(ValueError, match="mask_fraction \\+ random_fraction must be at most 1"):
        PatchCorruption(mask_fraction=0.8, random_fraction=0.3)
    with pytest.raises(ValueError, match="corrupt_fraction must be a number in \\[0, 1\\]; got corrupt_fraction=1.5"):
        PatchCorruption(corrupt_fraction=1.5)


def _reference_targets(raw, patch):
    """numpy: each patch's mean in 0..1, 8 levels per channel, id = (r * 8 + g) * 8 + b."""
    n, h, w, c = raw.shape
    colour = raw.astype("float64").reshape(n, h // patch, patch, w // patch, patch, c).mean(axis=(2, 4)) / 255
    level = np.minimum(np.floor(colour * 8), 7).astype("int64")
    return (level[..., 0] * 64 + level[..., 1] * 8 + level[..., 2]).reshape(n, -1), colour.reshape(n, -1, c)


@pytest.mark.parametrize("normalization", ["vit", "imagenet"])
def test_colour_targets_equal_a_numpy_reference(normalization, rng):
    # Flat patches at 0 and 255 and at the 8-bit values on either side of each level edge
    # (k * 255 / 8: 31 | 32, 63 | 64, ..., 223 | 224), in every channel combination.
    values = np.array([0, 255, 31, 32, 63, 64, 95, 96, 127, 128, 159, 160, 191, 192, 223, 224])
    colours = np.stack(np.meshgrid(values, values, values, indexing="ij"), -1).reshape(-1, 16, 3)
    flat = colours.reshape(-1, 4, 4, 1, 1, 3).repeat(4, 3).repeat(4, 4)  # (256 images, 4x4 patches of 4x4 px)
    flat = flat.transpose(0, 1, 3, 2, 4, 5).reshape(-1, 16, 16, 3)
    noisy = rng.integers(0, 256, (8, 16, 16, 3))  # patch means of mixed pixels
    raw = np.concatenate([flat, noisy]).astype("uint8")
    layer = ImagePreprocessing.from_normalization(normalization, 16)
    images = layer(raw)
    expected, colour = _reference_targets(raw, 4)
    got = to_numpy(mean_colour_targets(images, 4, layer.mean, layer.std))
    assert got.dtype == np.int32 and got.shape == (264, 16)
    # Compared wherever float32 rounding cannot move a mean across a level edge (0 and 1
    # themselves are exact).
    clear = ((np.abs(colour * 8 - np.round(colour * 8)) > 1e-4) | (colour % 1 == 0)).all(axis=-1)
    assert clear[:256].all() and clear.mean() > 0.95
    np.testing.assert_array_equal(got[clear], expected[clear])
    assert expected[0, :2].tolist() == [0, 7] and expected[17, 1] == 511  # black, blue, white
    model = MaskedPatchPrediction(**TINY, preprocessing=layer)
    np.testing.assert_array_equal(to_numpy(model.colour_targets(images))[clear], expected[clear])


def _flat_colour_images(rng, count=64):
    """Each image one of 8 flat colours: a corrupted patch is predictable from the others."""
    palette = rng.integers(0, 256, (8, 3))
    raw = np.broadcast_to(palette[rng.integers(0, 8, count)][:, None, None], (count, 16, 16, 3))
    return (raw / 127.5 - 1).astype("float32")  # the "vit" normalisation: model default


def test_the_masked_objective_lowers_its_loss(rng):
    images = _flat_colour_images(rng)
    model = MaskedPatchPrediction(**TINY, seed=0)
    model.compile(keras.optimizers.Adam(3e-3))
    before = model.evaluate(images, batch_size=32, verbose=0, return_dict=True)
    history = model.fit(images, batch_size=16, epochs=3, verbose=0)
    after = model.evaluate(images, batch_size=32, verbose=0, return_dict=True)
    assert before["loss"] > np.log(512) - 0.5  # chance: ln 512 = 6.24
    assert after["loss"] < before["loss"] - 0.5, (before, history.history, after)
    assert after["accuracy"] > before["accuracy"]
    with pytest.raises(ValueError, match="computes its own loss"):
        model.compile("adam", loss="mse")


def test_mixed_precision_dynamic_and_hybrid_models(rng):
    images = _flat_colour_images(rng, 2)
    mixed = MaskedPatchPrediction(**TINY, dtype="mixed_bfloat16")
    assert mixed.head.compute_dtype == "float32" and mixed.corruption.compute_dtype == "bfloat16"
    assert keras.backend.standardize_dtype(mixed(images)["logits"].dtype) == "float32"
    dynamic = MaskedPatchPrediction(**TINY, dynamic_image_size=True)
    wide = np.concatenate([images, images], axis=2)  # 16x32: a 4x8 grid
    out = dynamic(wide, training=True)
    assert tuple(out["logits"].shape) == (2, 32, 512) and (to_numpy(out["corruption"]) != CLEAN).sum() == 32
    hybrid = MaskedPatchPrediction(
        **{**TINY, "patch_size": 1}, resnet_block_units=(1,), resnet_width=16, resnet_num_groups=4
    )
    grid = 16 // hybrid.backbone.spec.stride
    assert tuple(hybrid(images)["logits"].shape) == (2, grid * grid, 512)
    assert tuple(hybrid.colour_targets(images).shape) == (2, grid * grid)


@pytest.fixture(scope="module")
def mpp_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("mpp")
    # The class token's model (the digits recipe pools the patches): its row of the position
    # table is the one fine-tuning keeps as it is.
    config = make_config("digits_pretrain", objective="masked_patch_prediction", run_name="mpp", output_dir=str(out),
                         pooling="token", **TINY_RECIPE)  # fmt: skip
    return pretrain(config)


def test_a_masked_patch_run_saves_and_reloads(mpp_run):
    assert {"model.keras", "best.keras", "log.csv"} <= set(os.listdir(mpp_run.run_dir))
    assert 0.0 <= mpp_run.test_accuracy <= 1.0 and "val_accuracy" in mpp_run.history
    path = os.path.join(mpp_run.run_dir, "model.keras")
    images = keras.random.uniform((4, 16, 16, 3), -1, 1, seed=0)
    original = mpp_run.model
    for reloaded in (keras.saving.load_model(path), keras_vit.load_model(path)):
        assert isinstance(reloaded, MaskedPatchPrediction)
        for corrupt in (True, False):
            np.testing.assert_allclose(
                to_numpy(reloaded(images, corrupt=corrupt)["logits"]),
                to_numpy(original(images, corrupt=corrupt)["logits"]),
                atol=1e-5,
            )
    # The ViT's weights keep their own paths: load_weights reads them; the objective's are left.
    vit = keras_vit.VisionTransformer(**{**TINY, "image_size": 24}, num_classes=10)
    report = keras_vit.load_weights(vit, path, warn=False, exclude=("head/",))
    assert report.unused == ["mpp_head/bias", "mpp_head/kernel", "patch_corruption/mask_embedding"]
    assert report.source_grid == (4, 4) and list(report.resampled) == ["position_embedding/embedding"]


class _StartWeights(keras.callbacks.Callback):
    def on_train_begin(self, logs=None):
        self.weights = {v.path: to_numpy(v) for v in self.model.weights}


def test_fine_tuning_drops_the_mask_embedding_and_head(mpp_run, tmp_path):
    path = os.path.join(mpp_run.run_dir, "model.keras")
    config = make_config("digits_finetune", init_from=path, run_name="fine", output_dir=str(tmp_path), image_size=24,
                         **TINY_RECIPE)  # fmt: skip
    start = _StartWeights()
    result = finetune(config, callbacks=[start])
    assert result.checks["head_max_abs_output"] == 0.0  # a fresh zero head
    assert "feature_cosine_similarity" in result.checks and "pretrained_head_agreement" not in result.checks
    names = [layer.name for layer in result.model.layers]
    assert "head" in names and not {"patch_corruption", "mpp_head", "pre_logits"} & set(names)
    assert result.model.input_shape == (None, 24, 24, 3)
    # Every backbone weight at the start of fine-tuning is the pre-trained one (the
    # position table resampled 4x4 -> 6x6, its class-token row kept), none left fresh.
    pretrained = {v.path: to_numpy(v) for v in mpp_run.model.backbone.weights}
    for key, value in start.weights.items():
        if key.startswith("head/"):
            assert not value.any()
        elif key == "position_embedding/embedding":
            assert value.shape == (1, 37, 32)
            np.testing.assert_array_equal(value[:, 0], pretrained[key][:, 0])
        else:
            np.testing.assert_array_equal(value, pretrained[key], err_msg=key)


def test_every_objective_the_command_line_offers_is_a_record_of_its_own():
    # --objective's choices (training/config.py, read without a backend) and the records the
    # run reads (training/objectives.py) are one list: a name without a record, or a record the
    # command line cannot ask for, fails here.
    assert tuple(objectives.OBJECTIVES) == OBJECTIVES
    assert [record.name for record in objectives.OBJECTIVES.values()] == list(OBJECTIVES)


def test_unknown_objective_is_an_error_before_any_work(tmp_path, capsys):
    # On the command line, a choice argparse checks: one line naming the choices.
    with pytest.raises(SystemExit):
        parse_args(["--objective", "masked_patches", "--dataset", "no-such-dataset"], "digits_pretrain")
    assert "--objective: invalid choice: 'masked_patches'" in capsys.readouterr().err
    config = make_config("digits_pretrain", objective="masked_patches", dataset="no-such-dataset")
    config.output_dir = str(tmp_path)
    # The objective fails first: the dataset (which would fail too) is never looked at.
    with pytest.raises(ValueError, match="Unknown objective 'masked_patches' \\(did you mean masked_patch_prediction"):
        pretrain(config)
    with pytest.raises(ValueError, match="expected one of: classification, masked_patch_prediction"):
        pretrain(make_config("digits_pretrain", objective="jigsaw", output_dir=str(tmp_path)))
    (tmp_path / "model.keras").write_text("not read")
    with pytest.raises(ValueError, match="Fine-tuning trains a classifier"):
        finetune(
            make_config(
                "digits_finetune",
                objective="masked_patch_prediction",
                init_from=str(tmp_path / "model.keras"),
                output_dir=str(tmp_path),
            )
        )
    assert os.listdir(tmp_path) == ["model.keras"]  # no run folder
