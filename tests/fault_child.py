"""The child process of tests/test_faults.py: writes a good file, then writes it again and
is killed, or runs out of disk space, while doing so.

    python tests/fault_child.py SCENARIO FOLDER kill
    python tests/fault_child.py SCENARIO[,SCENARIO...] FOLDER full

Each scenario first writes its file once, completely (the previous good file), and prints
``GOOD <fingerprint>`` (the SHA-256 of its bytes; of every file, for a folder). Then:

- ``kill``: the second write's rename into place blocks forever, so the parent's SIGKILL,
  sent as soon as a temporary file appears beside the target, lands while the new file is
  being written or is complete but not committed;
- ``full``: the second write finds too little room (a small file system mounted on
  FOLDER when the parent runs us in our own mount namespace with ``KERAS_VIT_TEST_TMPFS=1``,
  else a file size limit), and the child prints ``ERROR <type> <message>`` and
  ``AFTER <fingerprint> LOADS <bool> LEFTOVERS <count>``, then exits (the file system
  goes with it, so the checks are made here). Several scenarios run one after another, each
  in FOLDER/<scenario> on a file system of its own, each line after the scenario's name:
  a child's start-up costs more than a scenario.
"""

import hashlib
import json
import os
import resource
import signal
import subprocess
import sys
import time

# scenario -> (the target, relative to FOLDER; the stem of the file whose write is killed).
SCENARIOS = {
    "backup_weights": ("backup", "epoch-2"),  # killed while the new weights are written
    "backup_state": ("backup", "state"),  # killed at the commit: new weights whole, state not yet moved
    "best_model": ("best.keras", "best"),
    "export": ("", "model_float32"),
}


def fingerprint(path):
    """The SHA-256 of what is committed at ``path`` (a file, a folder's files, a backup)."""
    digest = hashlib.sha256()
    paths = [path]
    if os.path.isfile(os.path.join(path, "state.json")):  # a backup is its state and the weights it names
        with open(os.path.join(path, "state.json")) as f:
            paths = [os.path.join(path, n) for n in ("state.json", json.load(f)["weights"])]
    elif os.path.isdir(path):
        paths = sorted(os.path.join(root, n) for root, _, names in os.walk(path) for n in names)
    for file in paths:
        if ".tmp-" in file or ".old-" in file:  # staged, not committed: not part of what is there
            continue
        digest.update(os.path.relpath(file, path).encode())
        with open(file, "rb") as f:
            digest.update(f.read())
    return digest.hexdigest()


def block_commits(watched):
    """Makes every rename of a temporary file onto a path containing ``watched`` hang."""
    replace = os.replace

    def hanging_replace(src, dst, *args, **kwargs):
        if ".tmp-" in os.path.basename(os.fspath(src)) and os.path.basename(os.fspath(dst)).startswith(watched):
            print("BLOCKED", flush=True)
            while True:
                time.sleep(1)
        return replace(src, dst, *args, **kwargs)

    os.replace = hanging_replace


def leave_little_room(folder, target):
    """Makes the next write of ``target``'s largest file fail for want of space: the file
    system mounted on ``folder`` (when the parent ran us in our own mount namespace) is
    shrunk to what is used plus half that file; else a file size limit of half that file
    (EFBIG, the kernel's answer to the same write)."""
    files = [target] if os.path.isfile(target) else [os.path.join(r, n) for r, _, ns in os.walk(target) for n in ns]
    room = max(os.path.getsize(f) for f in files) // 2
    if os.environ.get("KERAS_VIT_TEST_TMPFS"):
        disk = os.statvfs(folder)
        used = (disk.f_blocks - disk.f_bfree) * disk.f_frsize  # the file system's own count, in whole pages
        subprocess.run(["mount", "-o", f"remount,size={used + room}", folder], check=True)
    else:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # the write fails instead of killing us
        resource.setrlimit(resource.RLIMIT_FSIZE, (room, resource.RLIM_INFINITY))


def loads(scenario, target):
    """Whether the scenario's file loads as what it is."""
    import numpy as np

    import keras_vit
    from keras_vit.training.checkpointing import read_state

    try:
        if scenario.startswith("backup"):
            state = read_state(target)
            model = tiny_model()
            model.optimizer.build(model.trainable_variables)  # the backup holds its state too
            model.load_weights(os.path.join(target, state["weights"]))
        elif scenario == "best_model":
            keras_vit.load_model(target)
        else:
            from ai_edge_litert.interpreter import Interpreter

            interpreter = Interpreter(os.path.join(target, "model_float32.tflite"))
            interpreter.allocate_tensors()
            images = interpreter.get_input_details()[0]
            interpreter.set_tensor(images["index"], np.zeros(images["shape"], images["dtype"]))
            interpreter.invoke()
            assert np.isfinite(interpreter.get_tensor(interpreter.get_output_details()[0]["index"])).all()
        return True
    except Exception as error:
        print("UNLOADABLE", type(error).__name__, error, file=sys.stderr)
        return False


IMAGES = bytes(4 * 16 * 16 * 3)  # replaced by four black uint8 images in main()


def tiny_model(width=32):
    import keras_vit

    model = keras_vit.create_model("vit_ti16", image_size=16, num_classes=3, depth=1, hidden_size=width,
                                   num_heads=2, mlp_dim=2 * width)  # fmt: skip
    model.compile(optimizer="adam", loss="sparse_categorical_crossentropy", metrics=["accuracy"])
    return model


def fit(model, epochs, callbacks, initial_epoch=0):
    import numpy as np

    rng = np.random.default_rng(0)
    images, labels = rng.random((8, 16, 16, 3), "float32"), rng.integers(0, 3, 8)
    model.fit(images, labels, validation_data=(images, labels), epochs=epochs, initial_epoch=initial_epoch,
              callbacks=callbacks, verbose=0)  # fmt: skip


def run_scenario(scenario, folder, mode, say):
    from keras_vit.export import export_model
    from keras_vit.training.checkpointing import BestModel, RunBackup

    if mode == "full" and os.environ.get("KERAS_VIT_TEST_TMPFS"):
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256m", "tmpfs", folder], check=True)
    target, watched = os.path.join(folder, SCENARIOS[scenario][0]).rstrip("/"), SCENARIOS[scenario][1]
    # The previous good file.
    model = tiny_model()
    if scenario.startswith("backup"):
        fit(model, 1, [RunBackup(target, delete_checkpoint=False)])
    elif scenario == "best_model":
        fit(model, 1, [BestModel(target, monitor="accuracy")])
    else:
        export_model(model, folder, formats="tflite_float32", verification_images=IMAGES)
    say("GOOD", fingerprint(target))

    # The second write: killed, or out of space.
    if mode == "kill":
        block_commits(watched)
    else:
        leave_little_room(folder, target)
    try:
        if scenario.startswith("backup"):
            fit(model, 2, [RunBackup(target, delete_checkpoint=False)])  # resumes at epoch 1, writes epoch 2
        elif scenario == "best_model":
            fit(model, 1, [BestModel(target, monitor="accuracy")])
        else:
            export_model(model, folder, formats="tflite_float32", verification_images=IMAGES, overwrite=True)
    except Exception as error:  # what the user would see
        say("ERROR", type(error).__name__, str(error).replace("\n", " "))
    resource.setrlimit(resource.RLIMIT_FSIZE, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
    leftovers = [n for _, _, ns in os.walk(folder) for n in ns if ".tmp-" in n or ".old-" in n]
    say("AFTER", fingerprint(target), "LOADS", loads(scenario, target), "LEFTOVERS", len(leftovers))


def main(scenarios, folder, mode):
    global IMAGES
    import numpy as np

    IMAGES = np.zeros((4, 16, 16, 3), "uint8")
    scenarios = scenarios.split(",")
    unknown = [s for s in scenarios if s not in SCENARIOS]
    if unknown or (mode == "kill" and len(scenarios) > 1):
        raise SystemExit(
            f"expected one scenario to kill or several to fill, of {', '.join(SCENARIOS)}; got {scenarios}"
        )
    if len(scenarios) == 1:
        run_scenario(scenarios[0], folder, mode, lambda *words: print(*words, flush=True))
        return
    for scenario in scenarios:
        os.makedirs(os.path.join(folder, scenario))
        run_scenario(scenario, os.path.join(folder, scenario), mode, lambda *words: print(scenario, *words, flush=True))


if __name__ == "__main__":
    main(*sys.argv[1:4])
