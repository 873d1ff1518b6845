"""The recipes end to end at tiny sizes: digits, tfds mock data, two devices, errors (a killed
run resumed: test_faults.py)."""

import csv
import os
import subprocess
import sys
import textwrap

import keras
import numpy as np
import pytest
from conftest import TINY_ENCODER

import keras_vit
from keras_vit.data import load_dataset, make_pipeline
from keras_vit.training import finetune, make_config, pretrain

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TINY = dict(depth=1, representation_size=32, epochs=1, batch_size=32, progress=0, warmup_steps=2, **TINY_ENCODER)


def tiny(preset, tmp_path, **overrides):
    return make_config(preset, output_dir=str(tmp_path), **{**TINY, **overrides})


@pytest.fixture(scope="module")
def pretrained(tmp_path_factory):
    out = tmp_path_factory.mktemp("runs")
    # Few-shot accuracy at the first, every second and the last epoch: all three here.
    return pretrain(tiny("digits_pretrain", out, run_name="pre", epochs=3, fewshot_every=2, fewshot_shots="1,3",
                         fewshot_seeds=2))  # fmt: skip


def test_pretrain_writes_the_run_folder(pretrained):
    files = set(os.listdir(pretrained.run_dir))
    assert {"model.keras", "best.keras", "log.csv", "tensorboard"} <= files
    assert not [f for f in files if ".tmp-" in f or ".old-" in f]
    with open(os.path.join(pretrained.run_dir, "log.csv")) as f:
        rows = list(csv.DictReader(f))
    assert [int(r["epoch"]) for r in rows] == [0, 1, 2]
    assert all(0.0 < float(r["fewshot_3shot"]) <= 1.0 for r in rows)  # beside the loss
    assert 0.0 <= pretrained.test_accuracy <= 1.0
    # Each epoch's wall time, the first (compiling) included, within the run's own.
    assert len(pretrained.epoch_seconds) == 3 and all(s > 0 for s in pretrained.epoch_seconds)
    assert sum(pretrained.epoch_seconds) < pretrained.seconds
    path = os.path.join(pretrained.run_dir, "model.keras")
    reloaded = keras.saving.load_model(path)
    assert reloaded.get_layer("pre_logits").units == 32
    # A fresh process that imports only keras_vit reloads it, compiled (its schedule is registered).
    code = f"import keras, keras_vit; print(type(keras.saving.load_model({path!r}).optimizer).__name__)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip().endswith("AdamW"), out.stderr[-2000:]


def test_finetune_at_1_5x_starts_from_the_pretrained_model(pretrained, tmp_path):
    config = tiny(
        "digits_finetune",
        tmp_path,
        run_name="fine",
        image_size=24,
        init_from=os.path.join(pretrained.run_dir, "model.keras"),
        representation_size=None,
    )
    result = finetune(config)
    # Before any step the new zero head outputs exactly zero ...
    assert result.checks["head_max_abs_output"] == 0.0
    # ... and the backbone at 24 px on upsampled images sees what the 16 px one saw:
    # the features of an image across resolutions are closer than those of two images.
    checks = result.checks
    assert checks["feature_cosine_similarity"] > checks["feature_cosine_other_images"] + 0.1
    # The pre-trained classifier still reads the new features (chance is 0.1; this
    # 3-epoch toy model is itself only roughly right, so the bound is loose).
    assert checks["pretrained_head_agreement"] > 0.3
    assert result.model.input_shape == (None, 24, 24, 3)
    assert "pre_logits" not in [layer.name for layer in result.model.layers]
    pretrained_blocks = keras.saving.load_model(config.init_from).get_layer("block_0")
    assert pretrained_blocks.mlp.fc1.kernel.shape == result.model.get_layer("block_0").mlp.fc1.kernel.shape
    # The saved model keeps the digits' names and the evaluation pipeline's pre-processing:
    # raw test images through it are the images the test accuracy was measured on.
    saved = keras_vit.load_model(os.path.join(result.run_dir, "model.keras"))
    assert saved.class_names == tuple(str(d) for d in range(10))
    test = load_dataset("digits").test
    evaluated = np.concatenate([keras.ops.convert_to_numpy(x) for x, _ in make_pipeline(test, 24, 64, False)])
    np.testing.assert_allclose(keras.ops.convert_to_numpy(saved.preprocessing(test.images)), evaluated, atol=1e-4)


def test_pretrain_on_tfds_mock_data(tmp_path):
    import tensorflow_datasets as tfds

    with tfds.testing.mock_data(num_examples=64):
        result = pretrain(
            tiny("digits_pretrain", tmp_path, dataset="mnist", image_size=16, steps_per_epoch=2, run_name="mnist")
        )
    assert result.model.output_shape == (None, 10)
    assert len(result.history["loss"]) == 1


TWO_DEVICES = textwrap.dedent("""
    import os, sys
    strategy, out = sys.argv[1:]
    if os.environ["KERAS_BACKEND"] == "tensorflow":
        import tensorflow as tf
        cpu = tf.config.list_physical_devices("CPU")[0]
        tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
    from keras_vit.training import make_config, pretrain
    from keras_vit.training.distribution import num_replicas
    config = make_config("digits_pretrain", output_dir=out, hidden_size=32, depth=1, num_heads=2,
                         mlp_dim=64, epochs=1, batch_size=32, progress=0, strategy=strategy,
                         steps_per_epoch=3, run_name=strategy)
    result = pretrain(config)
    print("REPLICAS", num_replicas(strategy), "LOSS", result.history["loss"][-1])
""")


def _strategies():
    return {"tensorflow": ["mirrored"], "jax": ["data_parallel", "model_parallel"], "torch": []}[
        keras.backend.backend()
    ]


@pytest.mark.parametrize(
    "strategy",
    _strategies()
    or [
        pytest.param(
            "none",
            marks=pytest.mark.skip(reason="keras.distribution has no PyTorch implementation; see the error test below"),
        )
    ],
)
def test_two_device_run(strategy, tmp_path):
    env = {**os.environ, "XLA_FLAGS": os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=2"}
    out = subprocess.run(
        [sys.executable, "-c", TWO_DEVICES, strategy, str(tmp_path)], env=env, capture_output=True, text=True, cwd=ROOT
    )
    assert out.returncode == 0, out.stderr[-3000:]
    line = [text for text in out.stdout.splitlines() if text.startswith("REPLICAS")][-1].split()
    expected_replicas = 1 if strategy == "model_parallel" else 2
    assert int(line[1]) == expected_replicas and np.isfinite(float(line[3]))


def test_main_recipe_runs_both_phases(tmp_path, capsys):
    from keras_vit.commands import main_job as main

    args = [
        "--output_dir",
        str(tmp_path),
        "--epochs",
        "1",
        "--depth",
        "1",
        "--hidden_size",
        "32",
        "--num_heads",
        "2",
        "--mlp_dim",
        "64",
        "--progress",
        "0",
    ]
    first, second = main.main(args)
    table = capsys.readouterr().out
    assert "pretrain" in table and "finetune" in table and second.model.input_shape[1] == 24
    # Each phase's row ends with its epoch count and time per epoch (one epoch: that epoch's time).
    for phase, result in (("pretrain", first), ("finetune", second)):
        row = next(line for line in table.splitlines() if line.startswith(phase))
        assert row.split()[4:] == ["1", f"{result.epoch_seconds[0]:.1f}", "s"], row
