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
import resource
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
    """Whether a temporary file or folder of ``stem`` is being written under ``folder``."""
    return any(n.startswith(f".{stem}.tmp-") for _, dirs, names in os.walk(folder) for n in names + dirs)


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


FULL_DISK = ("backup_weights", "best_model", "export")


@pytest.fixture(scope="module")
def full_disks(tmp_path_factory):
    """What one child said of each ``FULL_DISK`` scenario (its lines, by their first word),
    each run on a disk of its own, and the folder of each; with the child's whole output."""
    folder = tmp_path_factory.mktemp("full")
    command, env = [sys.executable, CHILD, ",".join(FULL_DISK), str(folder), "full"], child_env()
    if own_mount_namespace():
        command = ["unshare", "--user", "--map-root-user", "--mount", *command]
        env["KERAS_VIT_TEST_TMPFS"] = "1"
    out = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    said = {scenario: {} for scenario in FULL_DISK}
    for line in out.stdout.splitlines():
        scenario, word, rest = (line.split(" ", 2) + ["", ""])[:3]
        if scenario in said:
            said[scenario][word] = rest
    return said, folder, f"{out.stdout}\n{out.stderr[-3000:]}"


@SAME_WRITES
@pytest.mark.slow  # the module fixture's child
@pytest.mark.parametrize("scenario", FULL_DISK)
def test_a_full_disk_is_a_clear_error_and_the_previous_file_stays_whole(scenario, full_disks):
    said, folder, output = full_disks
    lines = said[scenario]
    assert {"GOOD", "ERROR", "AFTER"} <= set(lines), output
    reason = "No space left on device" if own_mount_namespace() else "File too large"
    assert lines["ERROR"].startswith(f"DiskFullError [Errno 28] Could not write {folder / scenario}"), output
    assert reason in lines["ERROR"] and "Nothing was half-written" in lines["ERROR"], output
    assert lines["AFTER"] == f"{lines['GOOD']} LOADS True LEFTOVERS 0", output


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


# --- The command line stopped: SIGTERM or Ctrl-C during an export, and a full disk ------

EXPORTED = ("savedmodel", "model_float32.tflite")  # what `keras-vit export --formats` below writes


def export_command(model, output):
    return [sys.executable, "-m", "keras_vit", "export", str(model), "--output", str(output),
            "--formats", "savedmodel,tflite_float32"]  # fmt: skip


def tiny_model_file(folder):
    from fault_child import tiny_model

    path = os.path.join(folder, "model.keras")
    tiny_model().save(path)
    return path


def processes_naming(text):
    """The ids of the processes whose command line holds ``text``."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if text.encode() in f.read():
                    found.append(int(pid))
        except OSError:
            pass  # ended meanwhile
    return found


def every_file(folder):
    return sorted(os.path.relpath(os.path.join(r, n), folder) for r, ds, ns in os.walk(folder) for n in ns + ds)


# SIGTERM on every backend: on JAX and PyTorch the export is converted by a TensorFlow child
# process, which must go too; Ctrl-C (SIGINT) takes the same way out, tested once.
@pytest.mark.slow
@pytest.mark.parametrize("number", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_stopped_export_says_so_in_one_line_and_leaves_no_files(number, tmp_path):
    if number == signal.SIGINT and keras.backend.backend() != "torch":
        pytest.skip("run once, on torch: Ctrl-C raises where SIGTERM does (keras_vit/commands/interrupts.py)")
    model, output, scratch = tiny_model_file(str(tmp_path)), tmp_path / "out" / "export", tmp_path / "tmp"
    scratch.mkdir()  # the system's temporary folder for the export (its child's job files)
    env = {**child_env(), "TMPDIR": str(scratch)}
    # Ctrl-C's default restored: a test run started in the background (nohup, `&`) ignores
    # SIGINT, and a child inherits that, so the export would never see it.
    child = subprocess.Popen(export_command(model, output), env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))  # fmt: skip
    # The signal goes as soon as an export file is being written, or, on JAX and PyTorch, as
    # soon as the TensorFlow child that writes them runs (on a loaded machine its staged files
    # can come and go between two looks, and the export end before the signal).
    converting = keras.backend.backend() != "tensorflow"
    deadline, converters = time.monotonic() + 300, []
    while not (staged(tmp_path, "savedmodel") or staged(tmp_path, "model_float32") or converters):
        assert child.poll() is None, f"the export ended before it was stopped: {child.stderr.read()[-3000:]}"
        assert time.monotonic() < deadline, "no staged export file after 300 s"
        converters = processes_naming(str(scratch)) if converting else []
        time.sleep(0.005)
    converters = converters or processes_naming(str(scratch))
    assert bool(converters) == converting, converters
    child.send_signal(number)
    _, err = child.communicate(timeout=120)
    name = "SIGTERM" if number == signal.SIGTERM else "Ctrl-C (SIGINT)"
    assert child.returncode == 128 + number, err[-3000:]
    assert err.strip() == (
        f"keras-vit export: stopped by {name}; the files it was writing are removed, those it had finished are kept"
    ), err[-3000:]
    assert every_file(tmp_path) == ["model.keras", "tmp"], "left behind"  # the output folder it made, too
    assert not [pid for pid in converters if os.path.exists(f"/proc/{pid}")], "the export's child outlived it"


@once_on("torch", "the export's child is started by the same Python code on every backend")
def test_a_stop_while_the_exports_child_starts_kills_the_child(tmp_path, monkeypatch):
    # A SIGTERM that lands inside Popen (the child started, Popen not yet returned) would stop
    # the export before it knows its child, which then ran on, orphaned, writing its files.
    from keras_vit.export import convert

    class Stopped(Exception):
        pass

    def stop(number, frame):
        raise Stopped

    started, popen = [], subprocess.Popen

    def popen_then_stopped(*args, **kwargs):
        started.append(popen(*args, **kwargs))
        os.kill(os.getpid(), signal.SIGTERM)  # as the user's signal would, before Popen returns
        return started[-1]

    monkeypatch.setattr(convert.subprocess, "Popen", popen_then_stopped)
    previous = signal.signal(signal.SIGTERM, stop)
    try:
        with pytest.raises(Stopped):
            convert.convert_in_process("tensorflow", None, str(tmp_path / "model.keras"), {})
    finally:
        signal.signal(signal.SIGTERM, previous)
    (child,) = started
    assert child.poll() == -signal.SIGKILL, "the export's child outlived it"


@SAME_WRITES  # the leftovers are removed by keras_vit.atomic, before any backend's export
@pytest.mark.slow
def test_an_export_removes_what_a_killed_one_left_and_nothing_else(tmp_path):
    model, output = tiny_model_file(str(tmp_path)), tmp_path / "export"
    output.mkdir()
    left = [".model_float32.tmp-1a2b3c4d.tflite", ".labels.tmp-00ff00ff.txt", ".savedmodel.tmp-5e5e5e5e/",
            ".export_scratch.tmp-0badf00d/", ".model_float32.old-12345678.tflite"]  # fmt: skip
    for name in left:  # as a SIGKILL during an export leaves them: staged files and folders
        if name.endswith("/"):
            (output / name / "variables").mkdir(parents=True)
            (output / name / "saved_model.pb").write_bytes(b"\0" * 1000)
        else:
            (output / name).write_bytes(b"\0" * 1000)
    mine = [".notes.tmp-1a2b3c4d.txt", ".model_float32.tmp-mine.tflite", "notes.txt"]  # the user's: kept
    for name in mine:
        (output / name).write_text("the user's")
    (output / "model_float32.tflite").write_bytes(b"an earlier export")  # the .old- copy's target: it is there
    command = [*export_command(model, output), "--overwrite"]
    done = subprocess.run(command, env=child_env(), capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert sorted(os.listdir(output)) == sorted([*EXPORTED, *mine])
    assert all((output / name).read_text() == "the user's" for name in mine)


@SAME_WRITES
def test_a_full_disk_during_an_export_is_one_line_and_exit_status_2(tmp_path):
    model, output = tiny_model_file(str(tmp_path)), tmp_path / "export"

    def little_room():  # the kernel's file size limit: the write fails with EFBIG (no SIGXFSZ)
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (os.path.getsize(model) // 4, resource.RLIM_INFINITY))

    done = subprocess.run(export_command(model, output), env=child_env(), capture_output=True, text=True, timeout=600,
                          preexec_fn=little_room)  # fmt: skip
    assert done.returncode == 2, done.stderr[-3000:]
    said = done.stderr.strip()
    assert said.startswith("error: ") and "\n" not in said, done.stderr[-3000:]
    assert f"Could not write {output}" in said and "File too large" in said and "Nothing was half-written" in said, said
    assert every_file(tmp_path) == ["model.keras"], "left behind"


@SAME_WRITES
def test_a_folder_set_aside_by_a_killed_swap_is_put_back_and_one_replaced_is_removed(tmp_path):
    from keras_vit.atomic import remove_leftovers

    for name in (".savedmodel.old-1a2b3c4d", ".figures.old-1a2b3c4d", "figures"):  # killed mid-swap
        (tmp_path / name).mkdir()
        (tmp_path / name / "saved_model.pb").write_text(name)
    removed = remove_leftovers([tmp_path / "savedmodel", tmp_path / "figures"])
    assert removed == [str(tmp_path / ".figures.old-1a2b3c4d")]
    assert sorted(os.listdir(tmp_path)) == ["figures", "savedmodel"]
    assert (tmp_path / "savedmodel" / "saved_model.pb").read_text() == ".savedmodel.old-1a2b3c4d"  # the previous one
    assert (tmp_path / "figures" / "saved_model.pb").read_text() == "figures"
