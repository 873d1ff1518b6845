"""The recipes end to end at tiny sizes: digits, tfds mock data, two devices, errors (a killed
run resumed: test_faults.py)."""

import csv
import dataclasses
import json
import os
import subprocess
import sys
import textwrap

import keras
import numpy as np
import pytest
from helpers import TINY_ENCODER, once_on, randomize_keras, small_timm_model, to_numpy, write_photos

import keras_vit
from keras_vit.data import load_dataset, make_pipeline
from keras_vit.layers import ImagePreprocessing
from keras_vit.training import finetune, make_config, pretrain
from keras_vit.training import run as recipe_run

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


def test_xla_is_keras_choice_unless_the_config_names_it(pretrained, tmp_path):
    # jit_compile None (the default) is Keras' "auto": XLA on JAX, never on PyTorch, on
    # TensorFlow only with an accelerator; true or false as given, but for PyTorch and
    # TensorFlow's MirroredStrategy, which run without it.
    backend = keras.backend.backend()
    accelerator = False
    if backend == "tensorflow":  # a GPU or TPU, as Keras' "auto" looks for one
        import tensorflow as tf

        accelerator = any(device.device_type != "CPU" for device in tf.config.list_physical_devices())
    assert pretrained.model.jit_compile == {"jax": True, "torch": False, "tensorflow": accelerator}[backend]
    for value, strategy, expected in [(True, "default", backend != "torch"), (False, "default", False),
                                      (True, "mirrored", False)]:  # fmt: skip
        model = keras_vit.create_model("vit_ti16", image_size=16, patch_size=8, num_classes=2, depth=1, **TINY_ENCODER)
        model.compile(jit_compile=recipe_run._jit_compile(tiny("digits_pretrain", tmp_path, jit_compile=value,
                                                        strategy=strategy)))  # fmt: skip
        assert model.jit_compile == expected, (value, strategy)


class _Steps(keras.callbacks.Callback):
    def __init__(self):
        super().__init__()
        self.count = 0

    def on_train_batch_end(self, batch, logs=None):
        self.count += 1


@pytest.mark.skipif(keras.backend.backend() != "tensorflow", reason="TensorFlow's tf.function traces the step")
@pytest.mark.parametrize("labels", ["one-hot", "indices"])
def test_the_train_step_is_traced_once(labels, tmp_path, monkeypatch):
    # Nothing the step needs is made inside its first trace (the optimizer's slots, the
    # accuracy's counters), which TensorFlow would then trace again: a trace is a call.
    from keras_vit.models.vit import VisionTransformer

    calls, step = [], VisionTransformer.train_step
    monkeypatch.setattr(VisionTransformer, "train_step", lambda model, data: calls.append(1) or step(model, data))
    mixing = {} if labels == "one-hot" else dict(mixup_alpha=None, label_smoothing=0.0)
    pretrain(tiny("digits_pretrain", tmp_path, steps_per_epoch=2, batch_size=16, **mixing))
    assert len(calls) == 1


def test_a_share_of_the_labels_trains_on_that_share_of_the_training_split(tmp_path):
    steps = _Steps()
    pretrain(tiny("digits_pretrain", tmp_path, train_fraction=0.1, batch_size=16), callbacks=[steps])
    kept = load_dataset("digits").train.labelled_share(0.1).num_examples
    assert steps.count == kept // 16 and kept < 200  # full batches of the tenth (126 of 1257 digits)


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
    import json, os, sys
    import numpy as np
    strategies, out = sys.argv[1].split(","), sys.argv[2]
    if os.environ["KERAS_BACKEND"] == "tensorflow":
        import tensorflow as tf
        cpu = tf.config.list_physical_devices("CPU")[0]
        tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
    from keras_vit.training import make_config, pretrain
    from keras_vit.training.distribution import num_replicas

    def run(name):
        # No dropout (each replica would draw its own masks) and SGD (Adam would turn the rounding of a gradient
        # that is zero in exact arithmetic, the key's bias, into whole steps): the strategy's
        # steps are then one device's, up to float32 sums' order.
        config = make_config("digits_pretrain", output_dir=out, hidden_size=32, depth=1, num_heads=2,
                             mlp_dim=64, epochs=1, batch_size=32, progress=0, strategy=name, steps_per_epoch=3,
                             run_name=name, dropout_rate=0.0, optimizer="sgd", momentum=0.9, learning_rate=0.1)
        result = pretrain(config)
        return result, {v.path: np.asarray(v.numpy() if hasattr(v, "numpy") else v.value) for v in result.model.weights}

    one, alone = run("default")
    facts = {}
    for strategy in strategies:
        ours, weights = run(strategy)
        differences = {p: float(np.abs(weights[p] - alone[p]).max() / (np.abs(alone[p]).max() or 1.0)) for p in alone}
        facts[strategy] = dict(replicas=num_replicas(strategy), losses=[ours.history["loss"], one.history["loss"]],
                               differences=differences)
    print("FACTS", json.dumps(facts))
""")


def _strategies():
    return {
        "tensorflow": ["mirrored"],
        "jax": ["data_parallel", "model_parallel"],
        "torch": [],
    }[keras.backend.backend()]


# Two devices sum a batch's gradients in two halves: the same steps up to float32 rounding.
STRATEGY_RTOL = 1e-5


@pytest.fixture(scope="module")
def two_device_runs(tmp_path_factory):
    """This backend's strategies on two virtual devices, each beside one run on one device,
    in one child process (the device count is fixed at its start): {strategy: facts}."""
    env = {**os.environ, "XLA_FLAGS": os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=2"}
    command = [sys.executable, "-c", TWO_DEVICES, ",".join(_strategies()), str(tmp_path_factory.mktemp("two"))]
    out = subprocess.run(command, env=env, capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(next(line for line in out.stdout.splitlines() if line.startswith("FACTS "))[6:])


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
def test_a_two_device_run_takes_the_one_device_runs_steps(strategy, two_device_runs):
    facts = two_device_runs[strategy]
    assert facts["replicas"] == (1 if strategy == "model_parallel" else 2)
    ours, alone = facts["losses"]
    np.testing.assert_allclose(ours, alone, rtol=STRATEGY_RTOL)
    worst = max(facts["differences"].items(), key=lambda item: item[1])
    assert worst[1] <= STRATEGY_RTOL, worst


# On two virtual devices: a model trained sharded and on one device, and a recipe run sharded.
SHARDED = textwrap.dedent("""
    import json, sys
    import keras, numpy as np
    import keras_vit
    from keras_vit.training import make_config, pretrain
    from keras_vit.training.distribution import check_strategy, distribution_scope

    tiny = dict(image_size=16, patch_size=4, depth=2, hidden_size=32, num_heads=2, mlp_dim=64, num_classes=4)
    rng = np.random.default_rng(0)
    x, y = rng.uniform(-1, 1, (8, 16, 16, 3)).astype("float32"), rng.integers(0, 4, 8)

    def trained(strategy):
        keras.utils.set_random_seed(0)
        with distribution_scope(strategy):
            model = keras_vit.create_model("vit_ti16", head_zero_init=False, **tiny)
            # SGD with momentum: Adam would turn the rounding of a gradient that is zero in
            # exact arithmetic (the key's bias) into whole steps of its learning rate.
            optimizer = keras.optimizers.SGD(0.1, momentum=0.9)
            model.compile(optimizer, keras.losses.SparseCategoricalCrossentropy(from_logits=True))
            for _ in range(2):
                model.train_on_batch(x, y)
        return model

    def shares(variable):
        return [list(shard.data.shape) for shard in variable.value.addressable_shards]

    one, sharded = trained("default"), trained("sharded")
    facts = {
        "differences": {a.path: float(np.abs(np.asarray(a.value) - np.asarray(b.value)).max()
                                      / (np.abs(np.asarray(b.value)).max() or 1.0))
                        for a, b in zip(sharded.weights, one.weights)},
        "shapes": {v.path: list(v.shape) for v in sharded.weights},
        "shares": {v.path: shares(v) for v in sharded.weights},
        "slots": {v.path: shares(v) for v in sharded.optimizer.variables if v.path.endswith("kernel_momentum")},
    }
    config = make_config("digits_pretrain", output_dir=sys.argv[1], hidden_size=32, depth=1, num_heads=2,
                         mlp_dim=64, epochs=1, batch_size=32, progress=0, strategy="sharded", steps_per_epoch=3)
    facts["loss"] = pretrain(config).history["loss"][-1]
    try:
        check_strategy("sharded", 32, spec=keras_vit.get_spec("vit_ti16").replace(hidden_size=33, num_heads=3))
    except ValueError as error:
        facts["uneven"] = str(error)
    print("FACTS", json.dumps(facts))
""")
# Two devices sum a batch's gradients in two halves: the same steps up to float32 rounding.
SHARDED_RTOL = 1e-5


@pytest.mark.skipif(keras.backend.backend() != "jax", reason="keras.distribution's layouts run on JAX")
def test_sharded_training_takes_the_one_device_steps_with_each_device_holding_half_of_each_large_weight(tmp_path):
    env = {**os.environ, "XLA_FLAGS": os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=2"}
    out = subprocess.run([sys.executable, "-c", SHARDED, str(tmp_path)], env=env, capture_output=True, text=True,
                         cwd=ROOT)  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    facts = json.loads(next(line for line in out.stdout.splitlines() if line.startswith("FACTS "))[6:])
    worst = max(facts["differences"].items(), key=lambda item: item[1])
    assert worst[1] <= SHARDED_RTOL, worst
    large = [p for p in facts["shapes"] if p.endswith(("kernel", "position_embedding/embedding"))]
    assert len(large) >= 2 + 4 * 2 + 1  # patch and position tables, four projections a block, the head
    for path, shape in facts["shapes"].items():
        split = [[n // 2 if d == axis else n for d, n in enumerate(shape)] for axis in range(len(shape))]
        if path in large:  # each device holds one half, along one axis; so do its momentum slots
            assert facts["shares"][path] in ([s, s] for s in split), (path, shape, facts["shares"][path])
        else:  # norms, biases, tokens: whole on each device
            assert facts["shares"][path] == [shape, shape], (path, facts["shares"][path])
    slots = facts["slots"]
    assert len(slots) == sum(p.endswith("kernel") for p in large), sorted(slots)
    for path, shares in slots.items():
        kernel = next(p for p in large if path.endswith(p.replace("/", "_") + "_momentum"))
        assert shares == facts["shares"][kernel], (path, shares)
    assert np.isfinite(facts["loss"])
    assert "hidden_size 33 is not divisible by 2" in facts["uneven"], facts["uneven"]


def test_main_recipe_runs_both_phases(tmp_path, capsys):
    from keras_vit.commands import main_job as main

    args = [
        "--output_dir",
        str(tmp_path),
        "--epochs",
        "1",
        "--steps_per_epoch",
        "2",
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
    # Named for what it is (vit_ti16 resized to 1 block of 32 with 4-pixel patches), in both phases.
    assert first.model.name == second.model.name == "vit-d1w32p4"
    # Each phase's row ends with its epoch count and time per epoch (one epoch: that epoch's time).
    for phase, result in (("pretrain", first), ("finetune", second)):
        row = next(line for line in table.splitlines() if line.startswith(phase))
        assert row.split()[4:] == ["1", f"{result.epoch_seconds[0]:.1f}", "s"], row


# --- fine-tuning what the user names: a preset folder, a preset name, in a new run folder ------


TINY_PRESET = dict(image_size=16, depth=1, hidden_size=32, num_heads=2, mlp_dim=64, patch_size=4)


@pytest.fixture(scope="module")
def photos(tmp_path_factory):
    root = tmp_path_factory.mktemp("data") / "photos"
    write_photos(root, mirrored=True)  # two classes, a and b, of real photos; and their mirror images
    return root  # 8 a class: 5 to train on, 1 to validate, 2 to test


# The digits fine-tuning recipe as the main job has always run it (scripts/main.sh's second phase).
DIGITS_FINETUNE_AS_RUN = dict(
    dataset="digits", crop_area_min=0.8, horizontal_flip=False, label_smoothing=0.1, inception_crop=False,
    optimizer="sgd", momentum=0.9, weight_decay=0.0, learning_rate=0.03, batch_size=64, warmup_steps=20,
    decay="cosine", global_clipnorm=1.0, epochs=20,
)  # fmt: skip


def test_fine_tuning_the_digits_keeps_the_recipe_tuned_for_them():
    from keras_vit.commands.recipe_flags import parse_args

    main_job = ["--run-name", "main-finetune", "--init-from", "x.keras", "--image-size", "24"]
    config = parse_args(main_job, "digits_finetune")
    assert config.recipe_name == "digits_finetune"
    assert {k: getattr(config, k) for k in DIGITS_FINETUNE_AS_RUN} == DIGITS_FINETUNE_AS_RUN
    assert config.model_options == {"dropout_rate": 0.1, "representation_size": None}
    # The digits' data settings are the dataset's, whichever recipe trains on them.
    paper = make_config("paper_finetune")
    assert (paper.crop_area_min, paper.horizontal_flip, paper.label_smoothing) == (0.8, False, 0.1)
    assert paper.defaults["horizontal_flip"] == "dataset digits"


@pytest.mark.backend_free
def test_each_objectives_runs_have_folders_of_their_own_named_by_its_record():
    from keras_vit.training.objectives import OBJECTIVES
    from keras_vit.training.run_folder import run_name

    names = {
        objective: run_name(make_config("digits_pretrain", objective=objective), "pretrain", "vit", record)
        for objective, record in OBJECTIVES.items()
    }
    assert names == {
        "classification": "pretrain-vit-digits",
        "masked_patch_prediction": "pretrain-masked_patch_prediction-vit-digits",
        "mae": "pretrain-mae-vit-digits",
    }
    assert run_name(make_config("digits_pretrain", run_name="mine"), "pretrain", "vit", OBJECTIVES["mae"]) == "mine"


def test_fine_tuning_another_dataset_starts_from_the_papers_recipe_scaled_to_the_batch_with_its_flips():
    from keras_vit.commands.recipe_flags import parse_args
    from keras_vit.data.splits import DatasetInfo
    from keras_vit.training.config import with_dataset_defaults
    from keras_vit.training.recipe_presets import PAPER_FINETUNE

    config = parse_args(["--init-from", "x.keras", "--dataset", "photos/", "--batch-size", "32"], "digits_finetune")
    folder = DatasetInfo("photos/", 2, ("a", "b"), (None, None, 3))  # a folder's: flips keep its labels
    config = with_dataset_defaults(config, folder)
    assert config.recipe_name == "paper_finetune"
    schedule = ("optimizer", "momentum", "weight_decay", "warmup_steps", "decay", "global_clipnorm", "epochs")
    assert {k: getattr(config, k) for k in schedule} == {k: PAPER_FINETUNE[k] for k in schedule}
    assert config.learning_rate == PAPER_FINETUNE["learning_rate"] * 32 / PAPER_FINETUNE["batch_size"]
    assert (config.horizontal_flip, config.crop_area_min, config.label_smoothing) == (True, 0.08, 0.0)
    assert config.defaults["horizontal_flip"] == "dataset photos/" and "batch_size" not in config.defaults
    # What the user gives wins: a rate, a recipe.
    assert parse_args(["--dataset", "photos/", "--learning-rate", "0.1"], "digits_finetune").learning_rate == 0.1
    assert parse_args(["--dataset", "photos/", "--recipe", "digits_finetune"], "digits_finetune").learning_rate == 0.03


def finetune_command(*args):
    from keras_vit.commands import finetune as command

    return command.main(["--epochs", "1", "--batch_size", "4", "--warmup_steps", "1", "--progress", "0", *args])


def test_finetune_from_a_preset_folder_takes_its_model_and_writes_a_new_run_folder_each_run(
    photos, tmp_path, capsys, recwarn
):
    from keras_vit.commands import classify

    # A saved preset whose pre-processing is ImageNet's mean and std, at its own 16 px.
    preprocessing = ImagePreprocessing.from_normalization("imagenet", 16)
    base = keras_vit.create_model("vit_ti16", num_classes=3, preprocessing=preprocessing, **TINY_PRESET)
    randomize_keras(base)
    keras_vit.save_preset(base, tmp_path / "preset")
    first = finetune_command("--init_from", str(tmp_path / "preset"), "--dataset", str(photos),
                             "--output_dir", str(tmp_path / "runs"))  # fmt: skip
    assert first.run_dir == str(tmp_path / "runs" / "finetune-vit_ti16-photos")
    assert not [w for w in recwarn if "ran out of data" in str(w.message)]  # the splits end by design
    out = capsys.readouterr().out
    assert f"validation accuracy best {max(first.history['val_accuracy']):.4f} (epoch 1)" in out, out
    # A photo folder is not the digits: the paper's fine-tuning, its rate scaled to the batch, with
    # the folder's flips, said first and recorded with where each value came from.
    assert out.startswith("recipe paper_finetune:"), out[:300]
    assert "horizontal_flip True [dataset " in out and "learning_rate 7.8125e-05 [recipe paper_finetune, scaled" in out
    # The model's size, normalisation and weights (the features at the start equal the preset's).
    assert first.model.input_shape == (None, 16, 16, 3)
    assert first.checks["feature_cosine_similarity"] > 0.9999, first.checks
    with open(os.path.join(first.run_dir, "recipe.json")) as f:
        recorded = json.load(f)
    assert recorded["recipe"] == "finetune" and recorded["config"]["image_size"] == 16
    assert recorded["config"]["normalization"] == "imagenet" and recorded["config"]["init_from"].endswith("preset")
    ran = recorded["config"]
    # The model is the one loaded, said to come from --init-from (not the field's default vit_b16).
    assert (ran["model"], ran["defaults"]["model"]) == ("vit_ti16", f"--init-from {tmp_path / 'preset'}")
    assert (ran["recipe_name"], ran["horizontal_flip"], ran["label_smoothing"]) == ("paper_finetune", True, 0.0)
    assert (ran["optimizer"], ran["decay"], ran["learning_rate"]) == ("sgd", "cosine", 0.01 * 4 / 512)
    assert ran["defaults"]["horizontal_flip"] == f"dataset {photos}" and "batch_size" not in ran["defaults"]
    saved = keras_vit.load_model(os.path.join(first.run_dir, "model.keras"))
    assert saved.class_names == ("a", "b") and saved.preprocessing.mean == preprocessing.mean
    capsys.readouterr()
    classify.main([os.path.join(first.run_dir, "model.keras"), str(photos / "a"), "--top", "1"])
    # Lines "  1.  51.20%  a (0)": rank, probability, the folder's class name, its index.
    named = [line.split()[-2] for line in capsys.readouterr().out.splitlines() if line.strip()[:1].isdigit()]
    assert named and set(named) <= {"a", "b"}, named

    # The same command again: a new folder; the first run's files are untouched.
    before = {name: (first_path := os.path.join(first.run_dir, name), os.path.getmtime(first_path))[1]
              for name in ("model.keras", "log.csv", "recipe.json")}  # fmt: skip
    second = finetune_command("--init_from", str(tmp_path / "preset"), "--dataset", str(photos),
                              "--output_dir", str(tmp_path / "runs"))  # fmt: skip
    assert second.run_dir == first.run_dir + "-2"
    assert {name: os.path.getmtime(os.path.join(first.run_dir, name)) for name in before} == before
    for run in (first, second):
        with open(os.path.join(run.run_dir, "log.csv")) as f:
            assert [row["epoch"] for row in csv.DictReader(f)] == ["0"]
    # Resuming a finished run is refused, naming it.
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_:
        finetune_command("--init_from", str(tmp_path / "preset"), "--dataset", str(photos), "--resume",
                         "--output_dir", str(tmp_path / "runs"))  # fmt: skip
    printed = capsys.readouterr()
    assert exit_.value.code == 2 and f"{second.run_dir}, has finished" in printed.err
    assert "recipe " not in printed.out  # refused before the recipe's values are printed


def test_finetune_from_a_preset_name_served_by_a_mirror(photos, tmp_path, monkeypatch):
    from http_server import FileServer, download_env
    from upstream import write_original_npz

    from keras_vit.presets import catalog, download

    # A small model under the name of a real preset, its file in the original .npz layout
    # where the mirror keeps the publisher's path.
    name = "vit_ti16.augreg_in21k_ft_in1k"
    options = {k: v for k, v in TINY_PRESET.items() if k != "image_size"}
    preset = dataclasses.replace(catalog.PRESETS[name], image_size=16, num_classes=3, sha256=None, size=None,
                                 labels=None, options=options)  # fmt: skip
    monkeypatch.setitem(catalog.PRESETS, name, preset)
    with FileServer(tmp_path / "served") as server:
        download_env(monkeypatch, tmp_path / "home", mirror=server.url)
        path = tmp_path / "served" / download.source_url(preset.url)[len(server.url) :].lstrip("/")
        path.parent.mkdir(parents=True)
        write_original_npz(path, np.random.default_rng(0), 32, 1, 2, 64, 4, 17, 3)
        result = finetune_command("--init_from", name, "--dataset", str(photos), "--image_size", "24",
                                  "--output_dir", str(tmp_path / "runs"))  # fmt: skip
        assert len(server.requests) == 1
    # At the size asked for, the position embeddings resampled: the features of each image
    # at both sizes are closer than those of two images.
    assert result.model.input_shape == (None, 24, 24, 3) and result.model.class_names == ("a", "b")
    checks = result.checks
    assert checks["feature_cosine_similarity"] > checks["feature_cosine_other_images"], checks


@once_on("torch", "a hub name loads by one code on every backend (test_family.py); fine-tuning runs on each above")
def test_finetune_from_a_timm_hub_name_served_by_a_mirror(timm, photos, tmp_path, monkeypatch):
    from http_server import FileServer, download_env, hub_env

    # DINOv2 with registers, small (depth 2, 42 px: a 3x3 grid of 14 px patches), written by
    # timm's save_for_hf where the mirror keeps the hub's paths.
    architecture = "vit_small_patch14_reg4_dinov2"
    peer = small_timm_model(timm, architecture)
    with FileServer(tmp_path / "served") as server:
        download_env(monkeypatch, tmp_path / "home", mirror=server.url)
        hub_env(monkeypatch, server, tmp_path / "hf-cache")
        folder = tmp_path / "served" / "timm" / f"{architecture}.random" / "resolve" / "main"
        timm.models.save_for_hf(peer, folder, safe_serialization=True)
        result = finetune_command("--init-from", f"hf-hub:timm/{architecture}.random", "--dataset", str(photos),
                                  "--freeze", "backbone", "--output-dir", str(tmp_path / "runs"))  # fmt: skip
        assert len(server.requests) == 2  # its config.json and model.safetensors
    model = result.model
    assert model.spec.num_register_tokens == 4 and model.spec.layer_scale_init is not None
    assert model.input_shape == (None, 42, 42, 3) and model.class_names == ("a", "b")
    assert os.path.basename(result.run_dir) == f"finetune-{architecture}-photos"
    # The hub's weights, kept by the linear probe (a new head learns the folder's classes).
    saved = keras_vit.load_model(os.path.join(result.run_dir, "model.keras"))
    registers = {v.path: to_numpy(v) for v in saved.weights}["register_tokens/tokens"]
    np.testing.assert_array_equal(registers, peer.reg_token.detach().numpy())


@pytest.mark.parametrize("served", [False, True], ids=["file", "url"])
def test_finetune_from_a_timm_state_dict_with_init_model_builds_what_load_model_builds(
    timm, photos, tmp_path, monkeypatch, served
):
    if served and keras.backend.backend() != "torch":
        pytest.skip("run once, on torch: a URL is fetched into the file the other case loads on every backend")
    import torch
    from http_server import FileServer, download_env, hub_env

    from keras_vit.models.spec import ARCHITECTURE, ViTSpec

    # timm's ViT-Ti/16, two of its blocks, as a weights-only state dict (exact GELU): the
    # recipe builds it with the file's numerics and the depth given, as load_model does, from
    # the file or from its URL.
    state = timm.create_model("vit_tiny_patch16_224", pretrained=False, depth=2).state_dict()
    torch.save(state, tmp_path / "t.pth")
    expected = keras_vit.load_model(str(tmp_path / "t.pth"), model_name="vit_ti16", depth=2)
    assert expected.spec.gelu_approximate is False  # what the wrong route lost
    args = ("--init-model", "vit_ti16", "--depth", "2", "--dataset", str(photos), "--image-size", "32",
            "--freeze", "backbone", "--output-dir", str(tmp_path / "runs"))  # fmt: skip
    if served:
        (tmp_path / "served").mkdir()
        os.replace(tmp_path / "t.pth", tmp_path / "served" / "t.pth")
        with FileServer(tmp_path / "served") as server:
            download_env(monkeypatch, tmp_path / "home")
            hub_env(monkeypatch, server, tmp_path / "hf-cache")
            result = finetune_command("--init-from", f"{server.url.rstrip('/')}/t.pth", *args)
            assert len(server.requests) >= 1
    else:
        result = finetune_command("--init-from", str(tmp_path / "t.pth"), *args)
    architecture = [k for k in ViTSpec.fields_with_role(ARCHITECTURE) if k != "image_size"]
    built = {k: result.model.spec.option(k) for k in architecture}
    assert built == {k: expected.spec.option(k) for k in architecture}
    # Its backbone is the file's, frozen: the position embedding resampled to 32 px apart.
    trained = {v.path: to_numpy(v) for v in result.model.weights}
    np.testing.assert_array_equal(trained["block_1/mlp/fc2/kernel"], state["blocks.1.mlp.fc2.weight"].numpy().T)


def test_a_model_the_user_names_is_built_as_named():
    # The digits recipe's own model (patch 4, 128 wide, 16 px) gives way to the named one.
    config = make_config("digits_pretrain", model="vit_s16", depth=2)
    assert config.model_options == {"depth": 2, "representation_size": 128, "dropout_rate": 0.1}
    assert config.image_size is None  # the model's: 224
    assert make_config("digits_pretrain").model_options["patch_size"] == 4
    assert make_config("digits_pretrain").image_size == 16
    # Its run folder and figures name what it is, not the vit_ti16 it resizes.
    from keras_vit.training.pretrained import model_name

    assert model_name(make_config("digits_pretrain"), None) == "vit-d4w128p4"
    assert model_name(config, None) == "vit-d2w384p16"  # vit_s16 at depth 2
