"""The training recipe's step beside a bare ``model.fit`` of the same model on the same batches.

What a user's first command costs beyond the model itself: the recipe (``keras-vit
pretrain``, the main job's first phase) runs ``model.fit`` with its tf.data pipeline,
validation, the resumable backup, the best model, the CSV and TensorBoard logs. The bare
run fits the same model (same spec, optimizer, schedule, loss and seed) on one epoch of
the recipe's own batches, held in memory, with no callbacks and no validation. Both run
in one process, taking turns for ``--repeats`` rounds, and each round's step time is the
median over the steps after the first epoch (which compiles); the ratio's spread is over
rounds.

    KERAS_BACKEND=tensorflow python benchmarks/recipe_overhead.py          # the digits recipe
    KERAS_BACKEND=jax python benchmarks/recipe_overhead.py --epochs 4 --repeats 3
    python benchmarks/recipe_overhead.py --quick                             # a few steps (tests)

One CSV row per round goes to --csv (default saved_models/benchmarks/recipe_overhead.csv),
appended as soon as it is measured, and a summary line to stdout.
"""

import argparse
import csv
import os
import platform
import statistics
import sys
import tempfile
import time

import keras
import numpy as np

from keras_vit.data import load_dataset
from keras_vit.training import run
from keras_vit.training.config import make_config
from keras_vit.training.objectives import OBJECTIVES
from keras_vit.training.optimizers import make_optimizer
from keras_vit.training.pretrained import resolved
from keras_vit.training.recipes import PRETRAIN

FIELDS = ("backend", "recipe", "round", "epochs", "recipe_step_ms", "bare_step_ms", "ratio", "machine")


class StepTimes(keras.callbacks.Callback):
    """Seconds of each training step, per epoch (from one batch's end to the next's)."""

    def __init__(self):
        super().__init__()
        self.epochs = []

    def on_epoch_begin(self, epoch, logs=None):
        self.epochs.append([])
        self._last = time.perf_counter()

    def on_train_batch_end(self, batch, logs=None):
        now = time.perf_counter()
        self.epochs[-1].append(now - self._last)
        self._last = now

    def steady_median(self):
        """The median step after the first epoch, and after each epoch's first step."""
        steps = [step for epoch in self.epochs[1:] for step in epoch[1:]]
        if not steps:
            raise ValueError("time at least two epochs of two steps each (--epochs)")
        return statistics.median(steps)


def recipe_step(config):
    """The recipe's median step in seconds: ``keras-vit pretrain`` as the command runs it."""
    timer = StepTimes()
    run.pretrain(config, callbacks=[timer])
    return timer.steady_median()


def bare_step(config):
    """The same model's median step under a bare ``fit`` on the recipe's batches in memory."""
    keras.utils.set_random_seed(config.seed)
    config = resolved(config, None)  # the image size and normalisation the recipe trains with
    splits = load_dataset(config.dataset, data_dir=config.data_dir, seed=config.seed)
    objective = OBJECTIVES[config.objective]
    train, _, _ = run._pipelines(config, objective, splits, replicas=1, shard=None)
    # The recipe's stream runs across its epochs (and on): one epoch's batches, held in memory.
    steps = run._steps_per_epoch(config, splits.train, drop_remainder=False) * config.accumulation_steps
    batches = list(train.take(steps).as_numpy_iterator())
    images = np.concatenate([images for images, _ in batches])
    labels = np.concatenate([labels for _, labels in batches])
    spec = PRETRAIN.spec(config, splits.info.num_classes, None)
    model = run._build(config, PRETRAIN, objective, spec, splits.info.class_names, None)
    model.compile(
        optimizer=make_optimizer(config, total_steps=len(batches) * config.epochs),
        **objective.compile_terms(config),
        jit_compile=run._jit_compile(config),
    )
    timer = StepTimes()
    model.fit(
        images,
        labels,
        batch_size=config.batch_size,
        epochs=config.epochs,
        shuffle=False,
        verbose=0,
        callbacks=[timer],
    )
    return timer.steady_median()


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--recipe", default="digits_pretrain", help="the training recipe (default: %(default)s)")
    parser.add_argument("--epochs", type=int, default=4, help="epochs per run, the first one not timed")
    parser.add_argument("--repeats", type=int, default=3, help="rounds, recipe and bare taking turns")
    parser.add_argument("--quick", action="store_true", help="2 epochs of 3 steps, 1 round (tests)")
    parser.add_argument("--csv", default=os.path.join("saved_models", "benchmarks", "recipe_overhead.csv"))
    args = parser.parse_args(argv)
    overrides = dict(epochs=args.epochs, progress=0)
    if args.quick:
        args.repeats = 1
        overrides.update(epochs=2, steps_per_epoch=3, depth=1)
    ratios = []
    os.makedirs(os.path.dirname(os.path.abspath(args.csv)), exist_ok=True)
    new_file = not os.path.exists(args.csv)
    with open(args.csv, "a", newline="") as f:
        writer = csv.DictWriter(f, FIELDS)
        if new_file:
            writer.writeheader()
        for round_ in range(args.repeats):
            with tempfile.TemporaryDirectory() as output:
                config = make_config(args.recipe, output_dir=output, **overrides)
                recipe, bare = recipe_step(config), bare_step(config)
            ratios.append(recipe / bare)
            writer.writerow(
                dict(
                    backend=keras.backend.backend(),
                    recipe=args.recipe,
                    round=round_,
                    epochs=config.epochs,
                    recipe_step_ms=round(recipe * 1e3, 2),
                    bare_step_ms=round(bare * 1e3, 2),
                    ratio=round(recipe / bare, 3),
                    machine=platform.processor() or platform.machine(),
                )
            )
            f.flush()
    print(
        f"{keras.backend.backend()} {args.recipe}: recipe step / bare fit step = {statistics.median(ratios):.3f} "
        f"({min(ratios):.3f}-{max(ratios):.3f} over {len(ratios)} rounds)"
    )
    return ratios


if __name__ == "__main__":
    sys.exit(0 if main() else 1)
