"""The run files that must survive a crash: the resumable backup and the best model.

Keras' own ``BackupAndRestore`` and ``ModelCheckpoint`` write their files in place: a
process killed while one is being written leaves a half-written file, and a backup whose
weights and epoch count are two files can be caught between them (the weights of epoch
``n``, the count of epoch ``n - 1``: a resumed run would train one epoch too many). Here
each file is written beside its target and renamed into place (``keras_vit.atomic``), and
the backup commits its parts with one rename.

A resumed run continues the uninterrupted one: besides the weights and the optimizer, the
backup holds the random state that training draws from (the seed generators of the
dropout layers, and on PyTorch the global generator that Keras' unseeded dropout uses), and
the run's data stream is skipped to the resumed epoch (``training/run.py``).
"""

import json
import math
import os

import keras
import numpy as np

from keras_vit import atomic, internals
from keras_vit.atomic import atomic_path
from keras_vit.factory import save_model
from keras_vit.training import processes

STATE = "state.json"


class RunBackup(keras.callbacks.BackupAndRestore):
    """``keras.callbacks.BackupAndRestore`` whose backup is never half-written.

    After each epoch the weights (the optimizer's state included) go to a new file,
    ``epoch-<n>.weights.h5``, and the random state to ``epoch-<n>.random.npz``; then
    ``state.json``, which names those files and the epoch count, replaces the previous one
    in a single rename: the commit. Older weight files are
    removed after it. A run killed at any moment, even while the backup is being written,
    finds either the old backup or the new one, whole, and resumes from it.

    Args:
        backup_dir: the folder of the backup (created when first written).
        delete_checkpoint: remove the backup when training ends (Keras' default, True).
        write: False in the processes of a run that do not write its files (they all
            restore from the backup).
        snapshot: called at each epoch's end in every process, the model to write
            (``processes.Snapshot``); default the model trained.

    Examples:
        >>> import tempfile, numpy as np, keras_vit
        >>> folder = tempfile.mkdtemp()
        >>> model = keras_vit.create_model("vit_ti16", image_size=16, num_classes=2, depth=1)
        >>> model.compile(optimizer="sgd", loss="sparse_categorical_crossentropy")
        >>> images, labels = np.zeros((4, 16, 16, 3)), np.zeros(4, "int32")
        >>> backup = RunBackup(folder, delete_checkpoint=False)
        >>> _ = model.fit(images, labels, epochs=2, callbacks=[backup], verbose=0)
        >>> sorted(os.listdir(folder)), read_state(folder)["epoch"]
        (['epoch-2.random.npz', 'epoch-2.weights.h5', 'state.json'], 2)
    """

    def __init__(self, backup_dir, delete_checkpoint=True, write=True, snapshot=None):
        super().__init__(backup_dir, save_freq="epoch", delete_checkpoint=delete_checkpoint and write)
        self.write, self.snapshot = write, snapshot
        self._pending_torch_state = None  # torch's generator state, set back at the first step

    def on_train_begin(self, logs=None):
        state = read_state(self.backup_dir)
        if state is None:
            return
        weights = os.path.join(self.backup_dir, state["weights"])
        if self.model.optimizer is not None and not self.model.optimizer.built:
            self.model.optimizer.build(self.model.trainable_variables)
        self.model.load_weights(weights)
        internals.set_initial_epoch(self.model, state["epoch"])  # fit reads it
        self._pending_torch_state = None
        if state.get("random"):
            with np.load(os.path.join(self.backup_dir, state["random"])) as saved:
                for i, variable in enumerate(_seed_states(self.model)):
                    variable.assign(saved[f"seed_{i}"])
                if "torch" in saved:
                    self._pending_torch_state = saved["torch"]

    def on_train_batch_begin(self, batch, logs=None):
        # fit draws from torch's global generator as it starts, after on_train_begin: the
        # saved state goes back in just before the first step.
        if self._pending_torch_state is not None:
            import torch

            torch.set_rng_state(torch.from_numpy(self._pending_torch_state))
            self._pending_torch_state = None

    def on_epoch_end(self, epoch, logs=None):
        model = self.snapshot() if self.snapshot is not None else self.model
        if self.write:
            with processes.alone():
                self._write(model, epoch + 1)

    def _write(self, model, done):
        names = {"weights": f"epoch-{done}.weights.h5", "random": f"epoch-{done}.random.npz"}
        os.makedirs(self.backup_dir, exist_ok=True)
        with atomic_path(os.path.join(self.backup_dir, names["weights"])) as staged:
            model.save_weights(staged)
        with atomic_path(os.path.join(self.backup_dir, names["random"])) as staged:
            with open(staged, "wb") as f:
                np.savez(f, **_random_state(model))
        with atomic_path(os.path.join(self.backup_dir, STATE)) as staged:
            with open(staged, "w") as f:
                json.dump({"epoch": done, **names}, f)
        # After the commit the old backup is no longer needed, nor what a killed writer left.
        for entry in os.listdir(self.backup_dir):
            leftover = atomic.is_leftover(entry)
            if leftover or (entry.startswith("epoch-") and entry not in names.values()):
                os.remove(os.path.join(self.backup_dir, entry))


def _seed_states(model):
    """The model's seed-generator states: its ``variables`` that are not ``weights``."""
    weights = {id(v) for v in model.weights}
    return [v for v in model.variables if id(v) not in weights]


def _random_state(model):
    """The arrays the backup keeps of the random state training draws from."""
    arrays = {f"seed_{i}": keras.ops.convert_to_numpy(v) for i, v in enumerate(_seed_states(model))}
    if keras.backend.backend() == "torch":
        import torch

        arrays["torch"] = torch.get_rng_state().numpy()
    return arrays


def read_state(backup_dir):
    """The committed backup's ``{"epoch": n, "weights": file, "random": file or None}``, or
    None if there is none."""
    path = os.path.join(backup_dir, STATE)
    if not os.path.exists(path):
        return None
    try:
        with open(path) as f:
            state = json.load(f)
        epoch, weights = int(state["epoch"]), os.path.basename(state["weights"])
        random = os.path.basename(state["random"]) if state.get("random") else None
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise ValueError(
            f"{path} is not a keras-vit backup state ({error!r}): remove the folder {backup_dir} to start the "
            "run afresh."
        ) from None
    for name in (weights, random):
        if name is not None and not os.path.isfile(os.path.join(backup_dir, name)):
            raise ValueError(f"{path} names {name}, which is not in {backup_dir}: remove the folder to start afresh.")
    return {"epoch": epoch, "weights": weights, "random": random}


class BestModel(keras.callbacks.Callback):
    """Saves the model to ``path`` (a ``.keras`` file, written atomically) each time
    ``monitor`` reaches a new maximum (a new minimum, ``lowest``) at the end of an epoch.

    Args:
        path: the ``.keras`` file.
        monitor: the epoch log to follow (default ``"val_accuracy"``); an epoch without
            it saves nothing.
        lowest: the best value is the lowest (a loss), not the highest.
        write, snapshot: as ``RunBackup``'s (the processes agree on the monitored value).
    """

    def __init__(self, path, monitor="val_accuracy", write=True, snapshot=None, lowest=False):
        super().__init__()
        self.path, self.monitor, self.best = path, monitor, -math.inf
        self.sign = -1.0 if lowest else 1.0  # the best is the highest of sign * value
        self.write, self.snapshot = write, snapshot

    def on_epoch_end(self, epoch, logs=None):
        value = (logs or {}).get(self.monitor)
        if value is not None and self.sign * float(value) > self.best:
            self.best = self.sign * float(value)
            model = self.snapshot() if self.snapshot is not None else self.model
            if self.write:
                with processes.alone():
                    save_model(model, self.path)
