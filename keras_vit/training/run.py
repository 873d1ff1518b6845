"""Pre-training and fine-tuning driven by ``model.fit``, writing everything under one run folder.

``saved_models/<run>/``: ``model.keras`` (final), ``best.keras`` (best validation
accuracy), ``backup/`` (``checkpointing.RunBackup``: a killed run started again continues
from its last finished epoch), ``log.csv`` and ``tensorboard/``.
"""

import contextlib
import dataclasses
import difflib
import functools
import math
import os
import time
import warnings

import keras
import numpy as np

from keras_vit.checks import flag
from keras_vit.data import load_dataset, make_pipeline
from keras_vit.factory import save_model
from keras_vit.layers.preprocessing import ImagePreprocessing
from keras_vit.models.graph import TASK_LAYERS
from keras_vit.training import processes
from keras_vit.training.checkpointing import BestModel, RunBackup, read_state
from keras_vit.training.config import FREEZE, describe, with_dataset_defaults
from keras_vit.training.distribution import check_strategy, distribution_scope
from keras_vit.training.epoch_times import EpochTimes
from keras_vit.training.errors import RecipeInputError
from keras_vit.training.lora import add_lora, merge_lora, narrowest_projection, save_adapter
from keras_vit.training.objectives import OBJECTIVES
from keras_vit.training.optimizers import make_optimizer
from keras_vit.training.pretrained import model_name, start_checks
from keras_vit.training.recipes import FINETUNE, PRETRAIN
from keras_vit.training.run_folder import backup_dir, open_run_dir, record_config, run_name
from keras_vit.training.teacher import load_teacher, student_note, trained, with_teacher


@contextlib.contextmanager
def _input_checks():
    # The errors of the checks and loading before training are the input's, not bugs.
    try:
        yield
    except RecipeInputError:
        raise
    except (ValueError, OSError) as error:
        raise RecipeInputError(str(error)) from error


@dataclasses.dataclass
class RunResult:
    model: keras.Model
    run_dir: str
    history: dict
    test_accuracy: float
    seconds: float
    checks: dict  # fine-tuning start checks (head output, feature similarity)
    epoch_seconds: list = dataclasses.field(default_factory=list)  # each epoch's wall time
    test_loss: float = float("nan")
    metric: str = "accuracy"  # what the run is judged by: "loss" (lowest best) where it has no accuracy
    measured: str | None = None  # what its figures measure, where not the labels' accuracy (Objective's)

    def summary(self):
        """One line: the best and last validation accuracy (or loss), the test's, the time, the folder."""
        validation = self.history.get(f"val_{self.metric}") or [float("nan")]
        pick = np.nanargmin if self.metric == "loss" else np.nanargmax
        best = int(pick(validation)) if not np.isnan(validation).all() else 0
        test = self.test_loss if self.metric == "loss" else self.test_accuracy
        return (
            f"validation {self.metric} best {validation[best]:.4f} (epoch {best + 1}), last {validation[-1]:.4f}; "
            f"test {self.metric} {test:.4f}; {self.seconds:.1f} s -> {self.run_dir}"
        )


def _pipelines(config, objective, splits, replicas, shard):
    """The training, validation and test pipelines: across several devices, full training
    batches and evaluation batches filled with blanks of weight 0; across several processes,
    each process's part of every batch (``shard``)."""
    drop_remainder = replicas > 1
    crop = (config.crop_area_min, 1.0) if config.crop_area_min else None
    # The pipeline's arguments of the same name as the recipe's fields.
    shared = ("image_size", "seed", "normalization", "mixup_alpha", "cutmix_factor")
    common = {name: getattr(config, name) for name in shared}
    # Each step's batch: one micro-batch of an update's accumulation_steps.
    common.update(batch_size=config.batch_size // config.accumulation_steps)
    common.update(one_hot=bool(config.label_smoothing))  # smoothing: categorical loss
    common.update(shard=shard)
    train = make_pipeline(
        splits.train,
        training=True,
        epochs=config.epochs,  # one stream across the epochs, the same however often it is read
        # Full batches only, where the split has one (a freshly shuffled remainder is left
        # out each epoch): every step has the recipe's batch size, and a compiled train
        # step is compiled once, not again for a smaller last batch.
        drop_remainder=drop_remainder or _full_batches(config, splits.train),
        inception_crop=config.inception_crop,
        crop_area_range=crop,
        horizontal_flip=config.horizontal_flip,
        rand_augment=config.rand_augment,
        **common,
    )
    # A self-supervised objective computes its own loss and accuracy, without example weights.
    pad = drop_remainder and objective.labelled
    evaluate = lambda split: make_pipeline(split, training=False, drop_remainder=drop_remainder and not pad,  # noqa: E731
                                           pad_to_batches=pad, **common)  # fmt: skip
    return train, evaluate(splits.validation), evaluate(splits.test)


def _check_splits(config, splits):
    """Each split holds images (a small folder's validation split can be empty)."""
    empty = [name for name in ("train", "validation", "test") if getattr(splits, name).num_examples == 0]
    if empty:
        raise RecipeInputError(
            f"The {' and '.join(empty)} split(s) of --dataset {config.dataset} are empty: expected enough images of "
            "each class for every split (a tenth of each class validates and a fifth tests, rounded: 6 images or more "
            "per class, as a tenth of 5 rounds to none), "
            "or train/, validation/ and test/ folders."
        )


def _full_batches(config, split):
    """Whether the training split holds at least one full batch (its size known)."""
    return split.num_examples is not None and split.num_examples >= config.batch_size


def _steps_per_epoch(config, split, drop_remainder):
    """Optimizer updates per epoch (each one ``accumulation_steps`` steps of ``fit``)."""
    if config.steps_per_epoch:
        return config.steps_per_epoch
    if split.num_examples is None:
        raise ValueError(f"The size of {config.dataset!r}'s training split is unknown: set --steps-per-epoch.")
    batches = split.num_examples / config.batch_size
    full = drop_remainder or _full_batches(config, split)
    return max(1, math.floor(batches) if full else math.ceil(batches))


def _objective(config, recipe):
    """The record of ``config.objective``, checked against the recipe and the teacher."""
    objective = OBJECTIVES.get(config.objective)
    if objective is None:
        close = difflib.get_close_matches(str(config.objective), OBJECTIVES, n=1)
        raise ValueError(
            f"Unknown objective {config.objective!r}"
            + (f" (did you mean {close[0]}?)" if close else "")
            + f"; expected one of: {', '.join(OBJECTIVES)}."
        )
    if config.teacher and not objective.labelled:
        raise ValueError(
            f"--teacher distils a classifier: objective must be 'classification', got {config.objective!r}."
        )
    recipe.check(config, objective)
    return objective


def _fewshot_callback(config, splits):
    """The few-shot evaluation the config asks for (None for none), its shots checked now."""
    if not config.fewshot_every:
        return None
    from keras_vit.evaluation import FewShotCallback

    try:
        shots = [int(k) for k in str(config.fewshot_shots).split(",") if k.strip()]
    except ValueError:
        raise ValueError(
            f"--fewshot-shots expects comma-separated ints (1,5,10); got {config.fewshot_shots!r}."
        ) from None
    # Across processes, each computes its part of every batch's features and all get the whole.
    predict = processes.predict if processes.count() > 1 else None
    return FewShotCallback(splits.train, splits.validation, every=config.fewshot_every, shots=shots,
                           seeds=config.fewshot_seeds, predict=predict)  # fmt: skip


def _callbacks(run_dir, extra, snapshot, fewshot=None, ema=False, metric="accuracy"):
    write = processes.is_writer()  # in a run of several processes, process 0 writes
    return [
        # Before the loggers: it writes its numbers into the epoch's logs, which they record.
        *([fewshot] if fewshot is not None else []),
        RunBackup(backup_dir(run_dir), write=write, snapshot=snapshot),
        # After the backup (the weights being trained, to resume), before the best model: the
        # moving average is what is validated and saved.
        *([keras.callbacks.SwapEMAWeights(swap_on_epoch=True)] if ema else []),
        BestModel(
            os.path.join(run_dir, "best.keras"),
            monitor=f"val_{metric}",
            lowest=metric == "loss",
            write=write,
            snapshot=lambda: trained(snapshot()),  # a distiller's student
        ),  # fmt: skip
        *(
            [
                keras.callbacks.CSVLogger(os.path.join(run_dir, "log.csv"), append=True),
                keras.callbacks.TensorBoard(os.path.join(run_dir, "tensorboard")),
            ]
            if write
            else []
        ),
        *extra,
    ]


def pretrain(config, callbacks=()):
    """Trains ``config.model`` from scratch; see ``recipes/pretrain.py``."""
    return _fit(config, PRETRAIN, callbacks)


def finetune(config, callbacks=()):
    """Fine-tunes a pre-trained model (``config.init_from``); see ``recipes/finetune.py``."""
    if not config.init_from:
        raise RecipeInputError(
            "Fine-tuning needs --init-from: a preset name or folder, a .keras file or a checkpoint load_weights reads."
        )
    return _fit(config, FINETUNE, callbacks)


def _build(config, recipe, objective, spec, class_names, start):
    """The model of ``spec`` to train, with the weights of what the run starts from."""
    dtype = "mixed_bfloat16" if config.mixed_precision else None
    # What the evaluation pipeline does, so the saved model classifies raw images and its
    # exports pre-process as it was trained (and the masked objective reads pixel colours).
    preprocessing = ImagePreprocessing.from_normalization(config.normalization, spec.image_size)
    model = objective.build(config, spec, dtype, preprocessing, model_name(config, start), class_names, start)
    recipe.initialise(config, model, start)
    return model


def _check_fine_tuning(config, recipe, spec):
    """The fine-tuning techniques asked for fit the recipe and the model."""
    asked = [flag(k) for k in ("freeze", "lora_rank", "layer_decay") if getattr(config, k)]
    if not recipe.fine_tunes and asked:
        raise ValueError(f"{', '.join(asked)}: options of fine-tuning a pre-trained model (keras-vit finetune).")
    if config.freeze not in (None, *FREEZE):
        raise ValueError(f"--freeze must be one of {', '.join(FREEZE)}; got {config.freeze!r}.")
    if config.freeze and config.lora_rank:
        raise ValueError("--freeze backbone trains the head alone and --lora-rank adapters too: choose one.")
    if config.lora_rank:
        narrowest = narrowest_projection(spec, config.lora_targets)
        if config.lora_rank > narrowest:
            raise ValueError(
                f"--lora-rank must be from 1 to {narrowest} (the width of the narrowest projection it adapts); "
                f"got {config.lora_rank}."
            )


def _adapt(config, model):
    """Freezes the backbone or puts LoRA adapters on, as the config asks."""
    if config.freeze == "backbone":
        for variable in model.weights:
            variable.trainable = variable.path.startswith(TASK_LAYERS)
    if config.lora_rank:
        add_lora(model, config.lora_rank, config.lora_alpha, config.lora_targets, train_norms=config.lora_norms)


@contextlib.contextmanager
def _finite_evaluation():
    # The validation and test pipelines end where their split does, which Keras, not knowing
    # a filtered (folder) dataset's length, reports as "ran out of data"; the training stream
    # repeats, so the warning could only ever be about those.
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Your input ran out of data", category=UserWarning)
        yield


def _jit_compile(config):
    # torch.compile is not what Keras' jit_compile means on torch; and XLA clusters under
    # MirroredStrategy read replica variables across devices, which TensorFlow rejects
    # (its "tf.Variable on a different device" known issue): both run without it.
    # None is Keras' own choice, "auto": no XLA for TensorFlow without an accelerator (its
    # graph optimiser fuses the model's matmuls into the CPU's oneDNN kernels instead).
    if keras.backend.backend() == "torch" or config.strategy == "mirrored":
        return False
    return "auto" if config.jit_compile is None else config.jit_compile


def _save(config, model, run_dir):
    if config.lora_rank:  # the adapter alone, and the model with it merged: a plain one
        save_adapter(model, os.path.join(run_dir, "adapter.npz"))
        save_model(merge_lora(model), os.path.join(run_dir, "model.keras"))
    else:
        save_model(model, os.path.join(run_dir, "model.keras"))


def _compiled(config, recipe, objective, spec, class_names, start, teacher, total_updates):
    """The model to train, adapted and compiled (in the distribution's scope, or outside it
    for the writer's copy); with a teacher, the ``Distiller`` of the student and a copy of it."""
    with _input_checks():  # the pre-trained weights, copied or loaded here
        student = _build(config, recipe, objective, spec, class_names, start)
        _adapt(config, student)
    model = with_teacher(config, student, teacher)
    model.compile(
        optimizer=make_optimizer(config, total_steps=total_updates, model=student),
        **objective.compile_terms(config),
        jit_compile=_jit_compile(config),
    )
    # Built here, as Keras builds it on JAX and PyTorch: on TensorFlow outside a strategy,
    # Keras builds it inside the first trace of the train step, which is then traced again.
    model.optimizer.build(model.trainable_variables)
    return model


def _fit(config, recipe, extra_callbacks):
    started = time.perf_counter()
    # Everything that can be wrong with the input is checked before training starts.
    with _input_checks():
        # Joined first: nothing may compute on JAX before.
        processes.join(config)
        objective = _objective(config, recipe)
        keras.utils.set_random_seed(config.seed)
        # Outside the distribution scope: only the source of the weights of the model to train.
        # Fine-tuning: the pre-trained model; pre-training: where a masked autoencoder continues from.
        start = recipe.start(config)
        config = recipe.configured(config, start)
        splits = load_dataset(config.dataset, data_dir=config.data_dir, seed=config.seed)
        if config.train_fraction is not None:  # fewer labelled images
            splits = dataclasses.replace(splits, train=splits.train.labelled_share(config.train_fraction, config.seed))
        config = with_dataset_defaults(config, splits.info)
        teacher = load_teacher(config, splits.info.num_classes, splits.info.class_names)
        _check_splits(config, splits)
        fewshot = _fewshot_callback(config, splits)
        # Their errors before the run folder is made.
        spec = recipe.spec(config, splits.info.num_classes, start)
        replicas = check_strategy(config.strategy, config.batch_size, config.accumulation_steps, spec)
        shard = (processes.index(), processes.count()) if processes.count() > 1 else None
        train, validation, test = _pipelines(config, objective, splits, replicas, shard)
        updates = _steps_per_epoch(config, splits.train, drop_remainder=replicas > 1)
        steps = updates * config.accumulation_steps  # fit's steps: micro-batches
        _check_fine_tuning(config, recipe, spec)
        objective.check(config, spec)
        # The run folder (--resume of a finished run is refused there), then the recipe as it
        # will train, once every input is checked.
        run_dir, resumed = open_run_dir(config, run_name(config, recipe.name, model_name(config, start), objective))
        if processes.is_writer():
            print(describe(config), flush=True)
            note = student_note(config, spec)
            if note:
                print(note, flush=True)
        record_config(run_dir, config, recipe.name, resumed)
    # One stream of batches across the epochs, `steps` an epoch: a run resumed from its
    # backup skips the epochs it has done, so it sees the batches the uninterrupted run
    # would (the skipped ones are read again, not trained on).
    state = read_state(backup_dir(run_dir)) if resumed else None
    if state is not None:
        train = train.skip(state["epoch"] * steps)
    # The whole run sits in the scope: JAX's keras.distribution shards each batch at fit time.
    build = functools.partial(_compiled, config, recipe, objective, spec, splits.info.class_names, start, teacher,
                              updates * config.epochs)  # fmt: skip
    with distribution_scope(config.strategy, config.tpu, across_processes=processes.count() > 1):
        model = build()
        snapshot = processes.snapshot(model, build, split=config.strategy == "sharded")
        checks = {}
        if recipe.fine_tunes and processes.count() == 1:  # the checks predict in one process
            images = np.concatenate([keras.ops.convert_to_numpy(x) for x, *_ in validation])
            checks = start_checks(trained(model), start, images)
        epochs = EpochTimes()  # last: each epoch's steps, validation and file writes
        with _finite_evaluation():
            history = model.fit(
                train,
                epochs=config.epochs,
                steps_per_epoch=steps,
                validation_data=validation,
                callbacks=[
                    *_callbacks(
                        run_dir, extra_callbacks, snapshot, fewshot, ema=bool(config.ema), metric=objective.judged_by
                    ),
                    epochs,
                ],  # fmt: skip
                verbose=processes.fit_verbosity(config.progress),  # the writer's alone; bars on a terminal
                shuffle=False,  # the pipeline shuffles, seeded
            )
        written = trained(snapshot())
        if processes.is_writer():
            with processes.alone():
                _save(config, written, run_dir)
        with _finite_evaluation():  # for masked patch prediction: the colour accuracy on the corrupted patches
            tested = model.evaluate(test, verbose=0, return_dict=True)
    seconds = time.perf_counter() - started
    return RunResult(
        trained(model),
        run_dir,
        history.history,
        float(tested.get("accuracy", "nan")),
        seconds,
        checks,
        epochs.seconds,
        test_loss=float(tested["loss"]),
        metric=objective.judged_by,
        measured=objective.measured,
    )
