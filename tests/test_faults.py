"""Real crashes survived: a training process killed with SIGKILL and started again, a kill
while a backup, a best model or an export is being written, and a full disk.

Each fault happens to a real child process (``tests/fault_child.py``, or a recipe run);
what is checked afterwards is the file on disk. (A download killed mid-way, and one that
stalls, are in test_download.py.) Where user namespaces allow it, the full disk is a real
one: a small tmpfs mounted in the child's own mount namespace; elsewhere it is the
kernel's file size limit, which fails the same write with EFBIG.
"""

import csv
import functools
import os
import random
import select
import signal
import subprocess
import sys
import time

import keras
import pytest
from fault_child import SCENARIOS, fingerprint, loads
from helpers import assert_close_to_scale, once_on, to_numpy

import keras_vit
from keras_vit.training import make_config, pretrain
from keras_vit.training.checkpointing import read_state

pytestmark = pytest.mark.skipif(os.name != "posix", reason="SIGKILL and mounts are POSIX")

HERE = os.path.dirname(os.path.abspath(__file__))
CHILD = os.path.join(HERE, "fault_child.py")


def child_env():
    return {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "PYTHONPATH": os.path.dirname(HERE)}


def read_line(child, prefix, timeout=240):
    """The child's next stdout line starting with ``prefix`` (its text after it)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ready, _, _ = select.select([child.stdout], [], [], 0.5)
        if ready:
            line = child.stdout.readline()
            if not line and child.poll() is not None:
                break
            if line.startswith(prefix):
                return line[len(prefix) :].strip()
    child.kill()
    raise AssertionError(f"no {prefix!r} line from the child; its stderr: {child.stderr.read()[-3000:]}")


def staged(folder, stem):
    """Whether a temporary file of ``stem`` is being written under ``folder``."""
    return any(n.startswith(f".{stem}.tmp-") for _, _, names in os.walk(folder) for n in names)


# The files these faults hit are written by the same code on every backend (keras-vit's
# staged writes around Keras' .keras and .weights.h5 writers, h5py and zipfile; an export
# converted by TensorFlow): they run in the tensorflow process, where the export is too.
# The kill mid-epoch, whose resume is each backend's own training state, runs on each.
SAME_WRITES = once_on("tensorflow", "the staged writes and Keras' file writers are one code for every backend")


@SAME_WRITES
@pytest.mark.parametrize("scenario", SCENARIOS)
def test_a_kill_while_a_file_is_written_leaves_the_previous_one_whole(scenario, tmp_path):
    child = subprocess.Popen([sys.executable, CHILD, scenario, str(tmp_path), "kill"], env=child_env(),
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    good = read_line(child, "GOOD ")
    target, stem = SCENARIOS[scenario]
    deadline = time.monotonic() + 120
    while not staged(tmp_path, stem) and time.monotonic() < deadline:
        time.sleep(0.001)
    child.send_signal(signal.SIGKILL)  # as soon as the new file is being written
    child.communicate()
    assert child.returncode == -signal.SIGKILL and staged(tmp_path, stem)
    path = os.path.join(tmp_path, target)
    files = sorted(os.path.relpath(os.path.join(r, n), tmp_path) for r, _, ns in os.walk(tmp_path) for n in ns)
    assert fingerprint(path) == good and loads(scenario, path), files
    if scenario.startswith("backup"):
        assert read_state(path)["epoch"] == 1  # a resumed run starts after the first epoch


@functools.cache
def own_mount_namespace():
    """Whether this machine lets an unprivileged process mount a tmpfs of its own."""
    command = ["unshare", "--user", "--map-root-user", "--mount", "true"]
    try:
        return subprocess.run(command, capture_output=True, timeout=30).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


@SAME_WRITES
@pytest.mark.parametrize("scenario", ["backup_weights", "best_model", "export"])
def test_a_full_disk_is_a_clear_error_and_the_previous_file_stays_whole(scenario, tmp_path):
    command, env = [sys.executable, CHILD, scenario, str(tmp_path), "full"], child_env()
    if own_mount_namespace():
        command = ["unshare", "--user", "--map-root-user", "--mount", *command]
        env["KERAS_VIT_TEST_TMPFS"] = "1"
    out = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    lines = {line.split(" ", 1)[0]: line.split(" ", 1)[1] for line in out.stdout.splitlines() if " " in line}
    assert {"GOOD", "ERROR", "AFTER"} <= set(lines), out.stderr[-3000:]
    reason = "No space left on device" if own_mount_namespace() else "File too large"
    said = f"{out.stdout}\n{out.stderr[-3000:]}"
    assert lines["ERROR"].startswith(f"DiskFullError [Errno 28] Could not write {tmp_path}"), said
    assert reason in lines["ERROR"] and "Nothing was half-written" in lines["ERROR"], said
    assert lines["AFTER"] == f"{lines['GOOD']} LOADS True LEFTOVERS 0", said


# Pre-training on the embedded digits, a step counter written after every step.
RUN = """
import sys, time, keras
from keras_vit.training import make_config, pretrain

class Steps(keras.callbacks.Callback):
    def __init__(self):
        super().__init__()
        self.done = 0
    def on_train_batch_end(self, batch, logs=None):
        time.sleep(0.05)  # steps of a tiny model take milliseconds: slowed, the kill lands where aimed
        self.done += 1
        with open(sys.argv[2], "w") as f:
            f.write(str(self.done))

config = make_config("digits_pretrain", output_dir=sys.argv[1], run_name="run", resume=True, **{OPTIONS})
pretrain(config, callbacks=[Steps()])
"""
STEPS, EPOCHS = 10, 4
OPTIONS = dict(depth=1, hidden_size=32, num_heads=2, mlp_dim=64, epochs=EPOCHS, steps_per_epoch=STEPS,
               batch_size=32, warmup_steps=2, progress=0)  # fmt: skip


def steps_done(counter):
    """The child's step count (0 before its first step; the child rewrites the file after
    every step, so a read may land on it empty: read once)."""
    text = counter.read_text().strip() if counter.exists() else ""
    return int(text) if text else 0


def logged_epochs(run_dir):
    with open(os.path.join(run_dir, "log.csv")) as f:
        return [int(row["epoch"]) for row in csv.DictReader(f) if row["epoch"] != "epoch"]


KILL_SEED = "KERAS_VIT_KILL_SEED"


def kill_step(seed):
    """The step the fault test kills its run after, from ``seed``: one of the second or third
    epoch, never an epoch's first or last."""
    steps = [s for s in range(STEPS + 2, 3 * STEPS - 1) if s % STEPS not in (0, STEPS - 1)]
    return random.Random(seed).choice(steps)


def test_the_kill_step_is_the_seeds_and_seeds_reach_every_allowed_step():
    assert kill_step(3) == kill_step(3)
    allowed = {s for s in range(STEPS + 2, 3 * STEPS - 1) if s % STEPS not in (0, STEPS - 1)}
    assert {kill_step(seed) for seed in range(200)} == allowed


# The tests that take this fixture are slow (tests/tiers.py): it kills a training run and runs it twice more.
@pytest.fixture(scope="module")
def killed_and_resumed(tmp_path_factory):
    """A run killed with SIGKILL mid-epoch and started again, and an uninterrupted run of the
    same config: ``(resumed model, whole run's RunResult, run folder, what the kill hit)``."""
    if keras.backend.backend() == "jax":  # the same backup and resume, in two processes there
        pytest.skip("on JAX: tests/test_processes.py kills a worker of a two-process run mid-epoch and resumes it")
    tmp_path = tmp_path_factory.mktemp("killed_and_resumed")
    code = RUN.replace("{OPTIONS}", repr(OPTIONS))
    run_dir, counter = tmp_path / "killed" / "run", tmp_path / "steps"
    command = [sys.executable, "-c", code, str(tmp_path / "killed"), str(counter)]
    # A step of the second or third epoch, never at an epoch's end, drawn with its own seed:
    # a new one each run (the test's seeded generators would kill at one step every time),
    # or KERAS_VIT_KILL_SEED's, which each assertion names so that a failure can be rerun.
    seed = int(os.environ.get(KILL_SEED) or random.SystemRandom().randrange(2**32))
    kill_at = kill_step(seed)
    child = subprocess.Popen(command, env=child_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and child.poll() is None and steps_done(counter) < kill_at:
        time.sleep(0.005)
    child.send_signal(signal.SIGKILL)
    _, err = child.communicate()
    killed = (
        f"aimed at step {kill_at} ({KILL_SEED}={seed} reruns it), killed after step {steps_done(counter)}; "
        f"the child's stderr:\n{err[-3000:]}"
    )
    assert child.returncode == -signal.SIGKILL, killed
    assert not (run_dir / "model.keras").exists(), killed  # it did not finish
    assert 1 <= read_state(run_dir / "backup")["epoch"] < EPOCHS, killed  # a finished epoch's backup to resume

    # Started again (with --resume, as the first time), it resumes from the backup and finishes.
    again = subprocess.run(command, env=child_env(), capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, f"{killed}\nstarted again: {again.stderr[-3000:]}"
    resumed = keras.saving.load_model(run_dir / "model.keras")

    # An uninterrupted run of the same config.
    whole = pretrain(make_config("digits_pretrain", output_dir=str(tmp_path / "whole"), run_name="run", **OPTIONS))
    return resumed, whole, run_dir, killed.split(";")[0]


@pytest.mark.slow
def test_a_training_run_killed_mid_epoch_resumes_and_finishes_as_an_uninterrupted_one(killed_and_resumed):
    resumed, whole, run_dir, killed = killed_and_resumed
    steps = (int(resumed.optimizer.iterations), int(whole.model.optimizer.iterations))
    assert steps == (EPOCHS * STEPS,) * 2, f"optimizer steps (resumed, whole): {steps}; {killed}"
    epochs = (logged_epochs(run_dir), logged_epochs(whole.run_dir))
    assert epochs == (list(range(EPOCHS)),) * 2, f"logged epochs (resumed, whole): {epochs}; {killed}"
    assert not (run_dir / "backup").exists()  # removed once the run finished
    assert isinstance(resumed, keras_vit.VisionTransformer)


# The backup carries the data position (the stream skips the finished epochs) and the random
# state (the dropout layers' seed generators; torch's global generator), so the resumed run
# repeats the uninterrupted run's operations on the same values.
@pytest.mark.slow
def test_a_training_run_killed_mid_epoch_ends_with_the_uninterrupted_runs_weights(killed_and_resumed):
    resumed, whole, _, killed = killed_and_resumed
    expected = {variable.path: to_numpy(variable) for variable in whole.model.weights}
    assert sorted(variable.path for variable in resumed.weights) == sorted(expected)
    # The same operations on the same values: equal up to float32 rounding at most.
    for variable in resumed.weights:
        assert_close_to_scale(to_numpy(variable), expected[variable.path], 1e-5, f"{variable.path}; {killed}")
