"""Training in several real processes on 127.0.0.1 (JAX's multi-process runtime, gloo on
CPU): the same weights as one process, each process its own half of every batch, one
writer, a killed worker resumed, a masked autoencoder and a distilled student as in one
process (their resume from a backup in this process: the kill itself is the sharded run's);
and the clear errors where it cannot run."""

import csv
import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import keras
import numpy as np
import pytest
from helpers import randomize_keras

from keras_vit.data import load_dataset, make_pipeline
from keras_vit.training import make_config, pretrain
from keras_vit.training.errors import RecipeInputError

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
jax_only = pytest.mark.skipif(keras.backend.backend() != "jax", reason="several processes train on JAX")

# Each process: a tiny pre-training run that records the training images it fed (a checksum
# per image, per step) and every file it wrote; process `die` SIGKILLs itself mid-epoch 2.
WORKER = textwrap.dedent(
    """
    import builtins, json, os, signal, sys
    import keras
    import tensorflow as tf
    import keras_vit.training.run as run
    from keras_vit.training import make_config, pretrain

    out, strategy, resume, die = sys.argv[1], sys.argv[2], sys.argv[3] == "1", int(sys.argv[4])
    # The runs, one after another in the same processes (JSON): each run folder's name and its
    # objective's options (a masked autoencoder's, a teacher's); by default one run, "run".
    objectives = json.loads(sys.argv[5]) if len(sys.argv) > 5 else {"run": {}}
    index = int(os.environ.get("KERAS_DISTRIBUTION_PROCESS_ID", 0))
    seen, written = [], []
    make_pipeline = run.make_pipeline

    def recording(split, training, **options):
        dataset = make_pipeline(split, training=training, **options)
        if not training:
            return dataset

        def record(images):
            seen.append(images.numpy().sum(axis=(1, 2, 3)).round(2).tolist())
            return images

        def note(images, labels):
            return tf.ensure_shape(tf.py_function(record, [images], tf.float32), images.shape), labels

        return dataset.map(note)

    run.make_pipeline = recording
    open_, replace = builtins.open, os.replace

    def noting(path, mode="r", *args, **kwargs):
        if any(m in mode for m in "wax") and str(path).startswith(os.path.join(out, "run")):
            written.append(str(path))
        return open_(path, mode, *args, **kwargs)

    def renaming(source, target, *args, **kwargs):
        written.append(str(target))
        return replace(source, target, *args, **kwargs)

    builtins.open, os.replace = noting, renaming

    class Die(keras.callbacks.Callback):
        def on_train_batch_begin(self, batch, logs=None):
            if index == die and self.epoch == 1 and batch == 1:
                os.kill(os.getpid(), signal.SIGKILL)

        def on_epoch_begin(self, epoch, logs=None):
            self.epoch = epoch

    for name, objective in objectives.items():
        options = dict(RUN, strategy=strategy, output_dir=out, run_name=name, resume=resume)
        pretrain(make_config("digits_pretrain", **{**options, **objective}), callbacks=[Die()])
    with open_(os.path.join(out, f"seen-{index}.json"), "w") as f:
        json.dump({"seen": seen, "written": written}, f)
    """
)


# Every run's recipe, in the worker and in this process. No MixUp: each process mixes the
# images of its own part of a batch (as timm's Mixup does in each process), which one
# process's whole batch cannot match.
RUN = dict(image_size=16, patch_size=8, hidden_size=32, num_heads=2, depth=1, mlp_dim=64, representation_size=32,
           epochs=2, batch_size=16, steps_per_epoch=3, warmup_steps=0, optimizer="sgd", progress=0,
           fewshot_every=1, fewshot_shots="1,2", fewshot_seeds=2, mixup_alpha=None)  # fmt: skip


def _environment(**variables):
    env = {**os.environ, "KERAS_BACKEND": "jax", "JAX_PLATFORMS": "cpu", "PYTHONPATH": ROOT}
    return {**env, **variables}


def _worker(tmp_path):
    path = tmp_path / "worker.py"
    path.write_text(f"RUN = {RUN!r}\n{WORKER}")
    return str(path)


def _launch(worker, out, strategy, resume=False, die=-1, timeout=240, objectives=None):
    """``keras-vit launch`` of two worker processes; its exit status and output."""
    command = [sys.executable, "-m", "keras_vit", "launch", "--num_processes", "2", worker, str(out), strategy,
               str(int(resume)), str(die), json.dumps(objectives or {"run": {}})]  # fmt: skip
    done = subprocess.run(command, env=_environment(), capture_output=True, text=True, timeout=timeout, cwd=ROOT)
    return done.returncode, done.stdout + done.stderr


def _weights(out, run="run"):
    model = keras.saving.load_model(os.path.join(out, run, "model.keras"), compile=False)
    return [keras.ops.convert_to_numpy(w) for w in model.weights]


def _log(out):
    with open(os.path.join(out, "run", "log.csv")) as f:
        return list(csv.DictReader(f))


def _record(out, index):
    with open(os.path.join(out, f"seen-{index}.json")) as f:
        return json.load(f)


@pytest.fixture(scope="module")
def one_process(tmp_path_factory):
    """The reference: the same run in one process, the same global batch."""
    tmp = tmp_path_factory.mktemp("one")
    out = tmp / "out"
    done = subprocess.run([sys.executable, _worker(tmp), str(out), "default", "0", "-1"], env=_environment(),
                          capture_output=True, text=True, timeout=240, cwd=ROOT)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return out


@jax_only
def test_two_processes_data_parallel_train_as_one(one_process, tmp_path):
    out = tmp_path / "out"
    status, output = _launch(_worker(tmp_path), out, "data_parallel")
    assert status == 0, output[-3000:]
    for expected, actual in zip(_weights(one_process), _weights(out), strict=True):
        np.testing.assert_allclose(actual, expected, rtol=1e-5, atol=1e-6)
    # Each process fed its own half of every global batch, the one process's batch.
    reference, first, second = (_record(o, i)["seen"] for o, i in ((one_process, 0), (out, 0), (out, 1)))
    steps = min(len(reference), len(first), len(second))
    assert steps >= 6
    for step in range(steps):
        assert len(first[step]) == len(second[step]) == len(reference[step]) // 2
        np.testing.assert_allclose(first[step] + second[step], reference[step], rtol=1e-6)
        assert first[step] != second[step]
    # The epoch's numbers over the whole validation split, once: the one process's.
    for row, expected in zip(_log(out), _log(one_process), strict=True):
        for key in ("val_accuracy", "fewshot_1shot", "fewshot_2shot", "loss"):
            np.testing.assert_allclose(float(row[key]), float(expected[key]), rtol=1e-5, err_msg=key)
    # Process 0 wrote the run's files, process 1 none; one TensorBoard writer.
    assert _record(out, 0)["written"] and _record(out, 1)["written"] == []
    assert len(os.listdir(out / "run" / "tensorboard" / "train")) == 1


@jax_only
def test_sharded_run_killed_mid_epoch_resumes_to_the_same_weights(one_process, tmp_path):
    worker, out = _worker(tmp_path), tmp_path / "out"
    status, output = _launch(worker, out, "sharded", die=1)
    assert status == 128 + signal.SIGKILL, output[-3000:]  # process 1's SIGKILL, process 0 stopped
    with open(out / "run" / "backup" / "state.json") as f:
        assert json.load(f)["epoch"] == 1
    assert not (out / "run" / "model.keras").exists()
    status, output = _launch(worker, out, "sharded", resume=True)
    assert status == 0, output[-3000:]
    for expected, actual in zip(_weights(one_process), _weights(out), strict=True):
        np.testing.assert_allclose(actual, expected, rtol=1e-5, atol=1e-6)
    assert [row["epoch"] for row in _log(out)] == ["0", "1"]
    assert _record(out, 1)["written"] == []


@pytest.fixture(scope="module")
def digits_teacher(tmp_path_factory):
    import keras_vit

    names = load_dataset("digits").info.class_names
    teacher = keras_vit.create_model("vit_ti16", image_size=24, patch_size=8, depth=1, hidden_size=32, num_heads=2,
                                     mlp_dim=64, num_classes=10, class_names=names)  # fmt: skip
    randomize_keras(teacher, seed=3)  # every weight drawn (the head too: not its zeros)
    head = teacher.get_layer("head")
    head.kernel.assign(head.kernel * 30.0)  # confident: its targets far from another teacher's
    path = str(tmp_path_factory.mktemp("teacher") / "teacher.keras")
    keras_vit.save_model(teacher, path)
    return path


def _objectives(teacher):
    """The two objectives beside classification, each in a run folder of its name."""
    return {
        "mae": dict(objective="mae", mask_ratio=0.5, decoder_width=16, decoder_depth=1, decoder_heads=2),
        "distillation": dict(
            teacher=teacher, distillation="soft", distillation_temperature=2.0, representation_size=None
        ),
    }


def _one_process(out, name, objective, callbacks=(), **more):
    """A run of ``RUN`` with ``objective`` in this process (a JAX one, as the workers are), its
    few-shot numbers left out (the weights are compared; the epoch's numbers in the test above)."""
    options = {**RUN, **objective, "fewshot_every": 0, "output_dir": str(out), "run_name": name, **more}
    config = make_config("digits_pretrain", **options)
    return pretrain(config, callbacks=list(callbacks))


@pytest.fixture(scope="module")
def objectives_in_one_process(digits_teacher, tmp_path_factory):
    """Each objective's whole run in this process: the weights the others must reach."""
    out = tmp_path_factory.mktemp("objectives")
    objectives = _objectives(digits_teacher)
    for name, objective in objectives.items():
        _one_process(out, name, objective)
    return out, objectives


def _assert_same_weights(expected, actual):
    assert len(expected) == len(actual) > 10
    for want, got in zip(expected, actual, strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


@jax_only
@pytest.mark.slow
def test_a_masked_autoencoder_and_a_distilled_student_in_two_processes_train_as_in_one(
    objectives_in_one_process, tmp_path
):
    one, objectives = objectives_in_one_process
    more = {"fewshot_every": 0}
    out = tmp_path / "out"
    both = {name: {**objective, **more} for name, objective in objectives.items()}
    status, output = _launch(_worker(tmp_path), out, "data_parallel", objectives=both)
    assert status == 0, output[-3000:]
    for name in objectives:
        _assert_same_weights(_weights(one, name), _weights(out, name))


class _Stopped(Exception):
    pass


class _StopMidEpoch(keras.callbacks.Callback):
    """Stops a run at epoch 2's second step, as a kill would there: training never ends, the
    first epoch's backup stays (a real kill of two processes: the sharded test above)."""

    def on_epoch_begin(self, epoch, logs=None):
        self.epoch = epoch

    def on_train_batch_begin(self, batch, logs=None):
        if self.epoch == 1 and batch == 1:
            raise _Stopped


class _Steps(keras.callbacks.Callback):
    taken = 0

    def on_train_batch_begin(self, batch, logs=None):
        self.taken += 1


@jax_only
@pytest.mark.slow
@pytest.mark.parametrize("name", ["mae", "distillation"])
def test_a_masked_autoencoder_or_a_distilled_student_stopped_mid_epoch_resumes_to_the_whole_runs_weights(
    name, objectives_in_one_process, tmp_path
):
    one, objectives = objectives_in_one_process
    with pytest.raises(_Stopped):
        _one_process(tmp_path, name, objectives[name], callbacks=[_StopMidEpoch()])
    assert not (tmp_path / name / "model.keras").exists()
    with open(tmp_path / name / "backup" / "state.json") as f:
        assert json.load(f)["epoch"] == 1
    steps = _Steps()
    _one_process(tmp_path, name, objectives[name], callbacks=[steps], resume=True)
    assert steps.taken == RUN["steps_per_epoch"]  # the second epoch alone: the first was in the backup
    _assert_same_weights(_weights(one, name), _weights(tmp_path, name))


@jax_only
def test_a_batch_the_processes_cannot_split_stops_both_before_training(tmp_path):
    command = [sys.executable, "-m", "keras_vit", "launch", "--num_processes", "2", "pretrain", "--strategy",
               "data_parallel", "--batch_size", "15", "--depth", "1", "--output_dir", str(tmp_path)]  # fmt: skip
    done = subprocess.run(command, env=_environment(), capture_output=True, text=True, timeout=240, cwd=ROOT)
    assert done.returncode == 2, done.stderr[-3000:]
    assert "batch_size 15 is not divisible by the 2 devices" in done.stderr
    assert os.listdir(tmp_path) == []


def _config(tmp_path, **processes):
    return make_config("digits_pretrain", output_dir=str(tmp_path), depth=1, epochs=1, **processes)


@jax_only
@pytest.mark.parametrize(
    "processes, expected",
    [
        (dict(num_processes=2, process_id=2), "--process-id must be from 0 to 1 (--num-processes 2); got 2"),
        (dict(num_processes=2, process_id=0, coordinator_address="localhost"), "must be process 0's host:port"),
        (dict(num_processes=2, process_id=0), "several processes need one of ('data_parallel', 'sharded')"),
        (dict(process_id=1), "expected --num-processes (or KERAS_DISTRIBUTION_NUM_PROCESSES) with them"),
    ],
)
def test_processes_the_run_cannot_have_are_refused_before_it_starts(tmp_path, processes, expected):
    strategy = "default" if "need one of" in expected else "data_parallel"
    processes.setdefault("coordinator_address", "127.0.0.1:1")
    with pytest.raises(RecipeInputError) as error:
        pretrain(_config(tmp_path, strategy=strategy, **processes))
    assert expected in str(error.value)
    assert os.listdir(tmp_path) == []


@jax_only
def test_an_unreachable_coordinator_is_an_error_within_the_wait(tmp_path):
    config = _config(tmp_path, strategy="data_parallel", num_processes=2, process_id=1,
                     coordinator_address="127.0.0.1:9", coordinator_timeout=1.0)  # fmt: skip
    started = time.monotonic()
    with pytest.raises(RecipeInputError, match="No coordinator answered at 127.0.0.1:9 within 1.0 s"):
        pretrain(config)
    assert time.monotonic() - started < 30
    assert os.listdir(tmp_path) == []


@pytest.mark.skipif(keras.backend.backend() == "jax", reason="the backends that cannot")
def test_other_backends_name_the_engine_that_trains_across_processes(tmp_path, monkeypatch):
    expected = {"tensorflow": "keras-team/keras#20585", "torch": "one device with torch"}[keras.backend.backend()]
    with pytest.raises(RecipeInputError, match="KERAS_BACKEND=jax") as error:
        pretrain(_config(tmp_path, strategy="default", num_processes=2, process_id=0))
    assert expected in str(error.value)
    if keras.backend.backend() == "tensorflow":  # TensorFlow's own way to ask for workers
        cluster = {"worker": ["127.0.0.1:2222", "127.0.0.1:2223"]}
        monkeypatch.setenv("TF_CONFIG", json.dumps({"cluster": cluster, "task": {"type": "worker", "index": 0}}))
        with pytest.raises(RecipeInputError, match="keras-team/keras#20585"):
            pretrain(_config(tmp_path, strategy="mirrored"))
    assert os.listdir(tmp_path) == []


def test_each_process_reads_its_part_of_every_batch():
    splits = load_dataset("digits")
    options = dict(image_size=16, batch_size=8, seed=3)

    def batches(split, training, take=None, **more):
        dataset = make_pipeline(split, training=training, drop_remainder=training, **options, **more)
        return [[keras.ops.convert_to_numpy(t) for t in batch] for batch in dataset.take(take or -1)]

    # A whole epoch (the split's size not a multiple of the batch): both processes leave its
    # last partial batch out, so their parts stay each step's halves, epoch after epoch.
    assert splits.train.num_examples % 8
    whole = batches(splits.train, True)
    parts = [batches(splits.train, True, shard=(i, 2)) for i in range(2)]
    assert len(whole) == splits.train.num_examples // 8
    for batch, first, second in zip(whole, *parts, strict=True):
        for tensor, a, b in zip(batch, first, second):
            np.testing.assert_array_equal(np.concatenate([a, b]), tensor)
    # Evaluation: the last batch filled with blanks of weight 0, each real image once.
    evaluation = batches(splits.validation, False, pad_to_batches=True)
    weights = np.concatenate([w for *_, w in evaluation])
    assert len(weights) % 8 == 0 and weights.sum() == splits.validation.num_examples
    assert {len(images) for images, *_ in evaluation} == {8}
    parts = [batches(splits.validation, False, pad_to_batches=True, shard=(i, 2)) for i in range(2)]
    for batch, first, second in zip(evaluation, *parts, strict=True):
        for tensor, a, b in zip(batch, first, second):
            np.testing.assert_array_equal(np.concatenate([a, b]), tensor)
    with pytest.raises(ValueError, match="does not split into 3 equal parts"):
        make_pipeline(splits.train, training=True, shard=(0, 3), **options)


@pytest.mark.parametrize(
    "argv, expected",
    [
        (["--num_processes", "0", "pretrain"], "--num-processes must be at least 1; got 0"),
        (["pretrian"], "Unknown command 'pretrian' (did you mean pretrain?)"),
        (["missing.py"], "no script 'missing.py'"),
    ],
)
def test_launch_refuses_what_it_cannot_start(argv, expected, capsys):
    from keras_vit.commands import launch

    with pytest.raises(SystemExit) as stop:
        launch.main(argv)
    assert stop.value.code == 2
    assert expected in capsys.readouterr().err
