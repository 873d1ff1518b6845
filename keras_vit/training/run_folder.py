"""A run's folder: ``saved_models/<run>``, a new one for each run (``<name>-2``, ...) unless
it resumes, with the configuration it ran with (``recipe.json``) and its backup."""

import dataclasses
import itertools
import json
import os

import keras

from keras_vit.atomic import atomic_path, unwritable
from keras_vit.checks import flag
from keras_vit.training import processes
from keras_vit.training.errors import RecipeInputError
from keras_vit.version import __version__


def run_name(config, recipe, model_name, objective):
    """The run's folder name: ``config.run_name``, else the recipe's, the objective's where its
    record says so (``Objective.in_run_name``), the model's and the dataset's."""
    kind = f"{recipe}-{objective.name}" if objective.in_run_name else recipe
    return config.run_name or f"{kind}-{model_name}-{os.path.basename(str(config.dataset).rstrip('/'))}"


def _numbered(base, k):
    return base if k == 1 else f"{base}-{k}"


def open_run_dir(config, name):
    """``(run folder, resumed)``: a new folder ``<name>``, else ``<name>-2``, ``<name>-3``, ...
    (made here, so two runs never share one); with ``resume``, the newest of them, if any.
    In a run of several processes, process 0 chooses and makes it, and the others take it
    (on a filesystem they share)."""
    base = os.path.join(config.output_dir, name)
    if not processes.is_writer():
        k, resumed = processes.agree((0, 0))
        if k == 0:
            raise RecipeInputError("Process 0 could not open the run folder (its error says why).")
        path = _numbered(base, k)
        if not os.path.isdir(path):
            raise RecipeInputError(
                f"Process {processes.index()} cannot see the run folder {path} that process 0 made: expected "
                "--output-dir on a filesystem every process shares."
            )
        return path, bool(resumed)
    try:
        k, resumed = _open(config, base)
    except RecipeInputError:
        processes.agree((0, 0))  # the others stop too
        raise
    processes.agree((k, int(resumed)))
    return _numbered(base, k), resumed


def _open(config, base):
    taken = list(itertools.takewhile(os.path.exists, (_numbered(base, k) for k in itertools.count(1))))
    if config.resume and taken:
        if os.path.exists(os.path.join(taken[-1], "model.keras")):
            raise RecipeInputError(
                f"--resume: the newest run, {taken[-1]}, has finished (its model.keras is written). Expected a run "
                "stopped before its end; without --resume a new run starts."
            )
        return len(taken), True  # from its backup, or from the start if it finished no epoch
    for k in itertools.count(len(taken) + 1):
        path = _numbered(base, k)
        try:
            os.makedirs(path)  # not there before: this run's alone
            return k, False
        except OSError as error:
            if not (isinstance(error, FileExistsError) and os.path.isdir(path)):  # else taken meanwhile: the next
                raise RecipeInputError(str(unwritable(path, error, "--output-dir"))) from None


CONFIG_FILE = "recipe.json"  # the run's whole configuration, beside its model
# What may differ between the processes of a run and between its launches: how it reports
# and where its processes meet, not what it trains.
PER_LAUNCH = ("resume", "progress", "coordinator_address", "num_processes", "process_id", "coordinator_timeout")
# Nor where the values came from (a value given again on the command line is the same value).
PROVENANCE = ("recipe_name", "defaults")


def record_config(run_dir, config, recipe, resumed):
    """Writes the run's configuration, or, resuming, checks that it is the one the run began with."""
    path = os.path.join(run_dir, CONFIG_FILE)
    record = {"recipe": recipe, "config": dataclasses.asdict(config)}
    if resumed and os.path.isfile(path):
        with open(path) as f:
            began = json.load(f)
        # Resuming may change only how the run reports; everything else is the run's own.
        began["config"].update({k: record["config"][k] for k in (*PER_LAUNCH, *PROVENANCE)})
        differ = sorted(k for k in record["config"] if began["config"].get(k) != record["config"][k])
        if began["recipe"] != recipe or differ:
            changes = ", ".join(f"{flag(k)} {began['config'].get(k)!r} -> {record['config'][k]!r}" for k in differ)
            raise RecipeInputError(
                f"--resume: {run_dir} began as another run ({changes or began['recipe'] + ' -> ' + recipe}). "
                "Expected the command that began it; without --resume a new run starts."
            )
        return
    if not processes.is_writer():
        return
    with atomic_path(path) as temp:
        with open(temp, "w") as f:
            json.dump({**record, "keras_vit": __version__, "backend": keras.backend.backend()}, f,
                      indent=2, default=str)  # fmt: skip


def backup_dir(run_dir):
    return os.path.join(run_dir, "backup")
