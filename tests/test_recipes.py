"""The recipes end to end at tiny sizes: digits, tfds mock data, two devices, errors (a killed
run resumed: test_faults.py)."""

import csv
import os
import re
import subprocess
import sys
import textwrap

import keras
import numpy as np
import pytest
from conftest import TINY_ENCODER

import keras_vit
from keras_vit.data import load_dataset, make_pipeline
from keras_vit.training import finetune, make_config, parse_args, pretrain

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TINY = dict(depth=1, representation_size=32, epochs=1, batch_size=32, verbose=0, warmup_steps=2, **TINY_ENCODER)


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
    path = os.path.join(pretrained.run_dir, "model.keras")
    reloaded = keras.saving.load_model(path)
    assert reloaded.get_layer("pre_logits").units == 32
    # A fresh process that imports only keras_vit reloads it, compiled (its schedule is registered).
    code = f"import keras, keras_vit; print(type(keras.saving.load_model({path!r}).optimizer).__name__)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip().endswith("AdamW"), out.stderr[-2000:]


def test_fewshot_shots_beyond_the_smallest_class_are_an_error_before_training(tmp_path):
    with pytest.raises(ValueError, match="5000-shot needs 5000 training images of every class"):
        pretrain(tiny("digits_pretrain", tmp_path, run_name="bad", fewshot_every=1, fewshot_shots="1,5000"))
    assert not os.path.exists(tmp_path / "bad")


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
                         mlp_dim=64, epochs=1, batch_size=32, verbose=0, strategy=strategy,
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
    env = {**os.environ, "XLA_FLAGS": "--xla_force_host_platform_device_count=2"}
    out = subprocess.run(
        [sys.executable, "-c", TWO_DEVICES, strategy, str(tmp_path)], env=env, capture_output=True, text=True, cwd=ROOT
    )
    assert out.returncode == 0, out.stderr[-3000:]
    line = [text for text in out.stdout.splitlines() if text.startswith("REPLICAS")][-1].split()
    expected_replicas = 1 if strategy == "model_parallel" else 2
    assert int(line[1]) == expected_replicas and np.isfinite(float(line[3]))


# --- bad input, all before training starts ---------------------------------------------


def test_unknown_dataset_is_an_error(tmp_path):
    with pytest.raises(ValueError, match="mnistt"):
        pretrain(tiny("digits_pretrain", tmp_path, dataset="mnistt"))


def test_folder_without_images_is_an_error(tmp_path):
    (tmp_path / "empty" / "class_a").mkdir(parents=True)
    with pytest.raises(ValueError, match="empty"):
        pretrain(tiny("digits_pretrain", tmp_path, dataset=str(tmp_path / "empty")))


def test_unknown_config_key_is_an_error():
    with pytest.raises(ValueError, match=r"'lerning_rate' \(did you mean learning_rate\?\)"):
        parse_args(["--lerning_rate", "0.1"], default_preset="digits_pretrain")
    with pytest.raises(ValueError, match=r"'epoch' \(did you mean epochs"):
        make_config("digits_pretrain", epoch=3)
    with pytest.raises(ValueError, match="--epochs expects int, got 'many'"):
        parse_args(["--epochs", "many"], default_preset="digits_pretrain")


@pytest.mark.parametrize(
    "recipe, argv, message",
    [
        ("pretrain", ["--batch_size", "0"], r"--batch_size must be in \[1, inf\); got 0\."),
        ("pretrain", ["--learning_rate", "-1"], r"--learning_rate must be in \(0.0, inf\); got -1\.0\."),
        ("pretrain", ["--epochs", "0"], r"--epochs must be in \[1, inf\); got 0\."),
        ("pretrain", ["--dropout_rate", "1.5"], r"dropout_rate must be a rate in \[0, 1\); got 1\.5\."),
        ("pretrain", ["--lerning_rate", "0.1"], r"'lerning_rate' \(did you mean learning_rate\?\)"),
        ("pretrain", ["--dataset", "no_such_dataset_here"], "no_such_dataset_here"),
        ("pretrain", ["--objective", "colour"], "Unknown objective 'colour'"),
        ("finetune", [], "Fine-tuning needs --init_from"),
        ("finetune", ["--init_from", "missing.keras"], "--init_from 'missing.keras' is not a file"),
    ],
)
def test_command_lines_answer_bad_input_in_one_line_with_status_2(tmp_path, capsys, recipe, argv, message):
    import importlib.util

    path = os.path.join(ROOT, "recipes", f"{recipe}.py")
    spec = importlib.util.spec_from_file_location(f"{recipe}_recipe", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    with pytest.raises(SystemExit) as exit_info:
        module.main([*argv, "--output_dir", str(tmp_path), "--verbose", "0"])
    error = capsys.readouterr().err.strip()
    assert exit_info.value.code == 2
    assert error.startswith("error: ") and "\n" not in error and re.search(message, error), error
    assert not os.listdir(tmp_path)  # nothing was written


def test_strategy_the_backend_lacks_is_an_error(tmp_path):
    wrong = {"tensorflow": "data_parallel", "jax": "mirrored", "torch": "mirrored"}[keras.backend.backend()]
    with pytest.raises(ValueError, match=f"strategy '{wrong}' is not available on the"):
        pretrain(tiny("digits_pretrain", tmp_path, strategy=wrong))


def test_batch_the_devices_do_not_divide_is_an_error(tmp_path):
    if keras.backend.backend() == "torch":
        pytest.skip("no multi-device strategy on torch")
    script = textwrap.dedent("""
        import os, sys
        if os.environ["KERAS_BACKEND"] == "tensorflow":
            import tensorflow as tf
            cpu = tf.config.list_physical_devices("CPU")[0]
            tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
        from keras_vit.training import make_config, pretrain
        strategy = "mirrored" if os.environ["KERAS_BACKEND"] == "tensorflow" else "data_parallel"
        pretrain(make_config("digits_pretrain", batch_size=33, strategy=strategy, output_dir=sys.argv[1]))
    """)
    env = {**os.environ, "XLA_FLAGS": "--xla_force_host_platform_device_count=2"}
    out = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path)], env=env, capture_output=True, text=True, cwd=ROOT
    )
    assert out.returncode != 0
    assert "batch_size 33 is not divisible by the 2 devices" in out.stderr
    assert "Epoch 1" not in out.stdout


def test_finetune_needs_a_pretrained_file(tmp_path):
    with pytest.raises(ValueError, match="needs --init_from"):
        finetune(tiny("digits_finetune", tmp_path))
    with pytest.raises(FileNotFoundError, match="is not a file"):
        finetune(tiny("digits_finetune", tmp_path, init_from=str(tmp_path / "nope.keras")))


def test_main_recipe_runs_both_phases(tmp_path, capsys):
    sys.path.insert(0, os.path.join(ROOT, "recipes"))
    import main

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
        "--verbose",
        "0",
    ]
    first, second = main.main(args)
    table = capsys.readouterr().out
    assert "pretrain" in table and "finetune" in table and second.model.input_shape[1] == 24
