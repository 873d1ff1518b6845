"""Pre-training and fine-tuning driven by ``model.fit``, writing everything under one run folder.

``saved_models/<run>/``: ``model.keras`` (final), ``best.keras`` (best validation
accuracy), ``backup/`` (``checkpointing.RunBackup``: a killed run started again continues
from its last finished epoch), ``log.csv`` and ``tensorboard/``.
"""

import contextlib
import dataclasses
import difflib
import itertools
import json
import math
import os
import time
import warnings

import keras
import numpy as np

import keras_vit
from keras_vit.data import load_dataset, make_pipeline, mixes_labels
from keras_vit.factory import CHECKPOINT_EXTENSIONS
from keras_vit.layers.preprocessing import ImagePreprocessing
from keras_vit.models.masked_patches import MaskedPatchPrediction
from keras_vit.models.resize import copy_weights
from keras_vit.models.spec import ARCHITECTURE, ViTSpec
from keras_vit.saving import atomic_path, load_model, save_model
from keras_vit.training.checkpointing import BestModel, RunBackup, read_state
from keras_vit.training.config import OBJECTIVES
from keras_vit.training.distribution import check_strategy, distribution_scope
from keras_vit.training.epoch_times import EpochTimes
from keras_vit.training.errors import MissingInputFileError, RecipeInputError
from keras_vit.training.lora import add_lora, merge_lora, save_adapter
from keras_vit.training.optimizers import make_optimizer


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

    def summary(self):
        """One line: the best and last validation accuracy, the test accuracy, the time, the folder."""
        validation = self.history.get("val_accuracy") or [float("nan")]
        best = int(np.nanargmax(validation)) if not np.isnan(validation).all() else 0
        return (
            f"validation accuracy best {validation[best]:.4f} (epoch {best + 1}), last {validation[-1]:.4f}; "
            f"test accuracy {self.test_accuracy:.4f}; {self.seconds:.1f} s -> {self.run_dir}"
        )


def _run_name(config, recipe, model_name):
    # Another objective's run is another model: its own folder, so no backup of the other is resumed.
    kind = recipe if config.objective == "classification" else f"{recipe}-{config.objective}"
    return config.run_name or f"{kind}-{model_name}-{os.path.basename(str(config.dataset).rstrip('/'))}"


def _run_dir(config, name):
    """``(run folder, resumed)``: a new folder ``<name>``, else ``<name>-2``, ``<name>-3``, ...
    (made here, so two runs never share one); with ``resume``, the newest of them, if any."""
    base = os.path.join(config.output_dir, name)
    taken = list(itertools.takewhile(os.path.exists, (base if k == 1 else f"{base}-{k}" for k in itertools.count(1))))
    if config.resume and taken:
        if os.path.exists(os.path.join(taken[-1], "model.keras")):
            raise RecipeInputError(
                f"--resume: the newest run, {taken[-1]}, has finished (its model.keras is written). Expected a run "
                "stopped before its end; without --resume a new run starts."
            )
        return taken[-1], True  # from its backup, or from the start if it finished no epoch
    for k in itertools.count(len(taken) + 1):
        path = base if k == 1 else f"{base}-{k}"
        try:
            os.makedirs(path)  # not there before: this run's alone
            return path, False
        except FileExistsError:
            if not os.path.isdir(path):
                raise _unwritable(path, "a file is in the way") from None
        except OSError as error:
            raise _unwritable(path, f"{error.strerror or error} ({error.filename})") from None


def _unwritable(path, reason):
    return RecipeInputError(
        f"Cannot write the run folder {path}: {reason}. Expected --output_dir to be a folder this process "
        "can write (or one it can create)."
    )


CONFIG_FILE = "recipe.json"  # the run's whole configuration, beside its model


def _record_config(run_dir, config, recipe, resumed):
    """Writes the run's configuration, or, resuming, checks that it is the one the run began with."""
    path = os.path.join(run_dir, CONFIG_FILE)
    record = {"recipe": recipe, "config": dataclasses.asdict(config)}
    if resumed and os.path.isfile(path):
        with open(path) as f:
            began = json.load(f)
        # Resuming may change only how the run reports; everything else is the run's own.
        began["config"].update({k: record["config"][k] for k in ("resume", "progress")})
        differ = sorted(k for k in record["config"] if began["config"].get(k) != record["config"][k])
        if began["recipe"] != recipe or differ:
            changes = ", ".join(f"--{k} {began['config'].get(k)!r} -> {record['config'][k]!r}" for k in differ)
            raise RecipeInputError(
                f"--resume: {run_dir} began as another run ({changes or began['recipe'] + ' -> ' + recipe}). "
                "Expected the command that began it; without --resume a new run starts."
            )
        return
    with atomic_path(path) as temp:
        with open(temp, "w") as f:
            json.dump({**record, "keras_vit": keras_vit.__version__, "backend": keras.backend.backend()}, f,
                      indent=2, default=str)  # fmt: skip


def _pipelines(config, splits, drop_remainder):
    crop = (config.crop_area_min, 1.0) if config.crop_area_min else None
    # The pipeline's arguments of the same name as the recipe's fields.
    shared = ("image_size", "seed", "normalization", "mixup_alpha", "cutmix_factor")
    common = {name: getattr(config, name) for name in shared}
    # Each step's batch: one micro-batch of an update's accumulation_steps.
    common.update(batch_size=config.batch_size // config.accumulation_steps)
    common.update(one_hot=bool(config.label_smoothing))  # smoothing: categorical loss
    train = make_pipeline(
        splits.train,
        training=True,
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
    evaluate = lambda split: make_pipeline(split, training=False, drop_remainder=drop_remainder, **common)  # noqa: E731
    return train, evaluate(splits.validation), evaluate(splits.test)


def _check_splits(config, splits):
    """Each split holds images (a small folder's validation split can be empty)."""
    empty = [name for name in ("train", "validation", "test") if getattr(splits, name).num_examples == 0]
    if empty:
        raise RecipeInputError(
            f"The {' and '.join(empty)} split(s) of {config.dataset} are empty: expected enough images of each "
            "class for every split (a tenth of a class validates, a fifth tests: 5 images or more per class), "
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
        raise ValueError(f"The size of {config.dataset!r}'s training split is unknown: set --steps_per_epoch.")
    batches = split.num_examples / config.batch_size
    full = drop_remainder or _full_batches(config, split)
    return max(1, math.floor(batches) if full else math.ceil(batches))


def _check_objective(config, recipe):
    if config.objective not in OBJECTIVES:
        close = difflib.get_close_matches(str(config.objective), OBJECTIVES, n=1)
        raise ValueError(
            f"Unknown objective {config.objective!r}"
            + (f" (did you mean {close[0]}?)" if close else "")
            + f"; expected one of: {', '.join(OBJECTIVES)}."
        )
    if recipe == "finetune" and config.objective != "classification":
        raise ValueError(
            f"Fine-tuning trains a classifier: objective must be 'classification', got {config.objective!r} "
            "(a pre-training objective: pre-train with it, then fine-tune the saved model)."
        )


def _objective_terms(config):
    """``compile``'s loss and metrics; a masked patch prediction model computes its own."""
    if config.objective == "masked_patch_prediction":
        return {}
    return {"loss": _loss(config), "metrics": ["accuracy"]}


def _loss(config):
    if mixes_labels(config.mixup_alpha, config.cutmix_factor) or config.label_smoothing:
        return keras.losses.CategoricalCrossentropy(from_logits=True, label_smoothing=config.label_smoothing)
    return keras.losses.SparseCategoricalCrossentropy(from_logits=True)


def _fewshot_callback(config, splits):
    """The few-shot evaluation the config asks for (None for none), its shots checked now."""
    if not config.fewshot_every:
        return None
    from keras_vit.evaluation import FewShotCallback

    try:
        shots = [int(k) for k in str(config.fewshot_shots).split(",") if k.strip()]
    except ValueError:
        raise ValueError(
            f"--fewshot_shots expects comma-separated ints (1,5,10); got {config.fewshot_shots!r}."
        ) from None
    return FewShotCallback(splits.train, splits.validation, every=config.fewshot_every, shots=shots,
                           seeds=config.fewshot_seeds)  # fmt: skip


def _backup_dir(run_dir):
    return os.path.join(run_dir, "backup")


def _callbacks(run_dir, extra, fewshot=None, ema=False):
    return [
        # Before the loggers: it writes its numbers into the epoch's logs, which they record.
        *([fewshot] if fewshot is not None else []),
        RunBackup(_backup_dir(run_dir)),
        # After the backup (the weights being trained, to resume), before the best model: the
        # moving average is what is validated and saved.
        *([keras.callbacks.SwapEMAWeights(swap_on_epoch=True)] if ema else []),
        BestModel(os.path.join(run_dir, "best.keras"), monitor="val_accuracy"),
        keras.callbacks.CSVLogger(os.path.join(run_dir, "log.csv"), append=True),
        keras.callbacks.TensorBoard(os.path.join(run_dir, "tensorboard")),
        *extra,
    ]


def pretrain(config, callbacks=()):
    """Trains ``config.model`` from scratch; see ``recipes/pretrain.py``."""
    return _fit(config, "pretrain", callbacks)


def finetune(config, callbacks=()):
    """Fine-tunes a pre-trained model (``config.init_from``); see ``recipes/finetune.py``."""
    if not config.init_from:
        raise RecipeInputError(
            "Fine-tuning needs --init_from: a preset name or folder, a .keras file or a checkpoint load_weights reads."
        )
    return _fit(config, "finetune", callbacks)


def _pretrained(config):
    """The model to fine-tune from ``init_from`` (a preset name or folder, a ``.keras`` file;
    a masked patch prediction model's backbone), or None for a checkpoint without architecture."""
    source = config.init_from
    if os.path.isfile(source) and not source.endswith(".keras"):
        return None  # loaded into the model to fine-tune by load_weights
    if not os.path.exists(source):
        if os.sep in source or os.path.splitext(source)[1] in CHECKPOINT_EXTENSIONS:
            raise MissingInputFileError(f"--init_from {source!r} is not a file or folder.")
        if "." not in source and not source.startswith("hf-hub:"):
            raise RecipeInputError(
                f"--init_from {source!r} is not a file, a folder or a preset: a model name alone has no "
                f"pre-trained weights. Expected a preset such as {_presets_of(source)}, a preset folder "
                "(keras_vit.save_preset) or a .keras file."
            )
    model = load_model(source) if os.path.isfile(source) else keras_vit.create_model(source)
    return model.backbone if isinstance(model, MaskedPatchPrediction) else model


def _presets_of(model_name):
    names = keras_vit.list_models(f"{model_name}.*", pretrained=True) or keras_vit.list_models(pretrained=True)
    return ", ".join(names[:3])


def _model_name(config, recipe, pretrained):
    """The name of the model a run trains (its run folder's), e.g. ``vit_ti16``."""
    if pretrained is not None:
        return pretrained.name
    return config.init_model or config.model if recipe == "finetune" else config.model


def _resolved(config, recipe, pretrained):
    """``config`` with what it leaves to the model (image size, normalization) taken from it;
    an option that contradicts the pre-trained model is an error listing each conflict."""
    if pretrained is None:
        spec = keras_vit.get_spec(_model_name(config, recipe, None)).replace(**config.model_options)
        own_normalization = "vit"
    else:
        spec = pretrained.spec
        architecture = set(ViTSpec.fields_with_role(ARCHITECTURE))
        conflicts = [f"--{k} {v!r} (the model's: {getattr(spec, k)!r})" for k, v in config.model_options.items()
                     if k in architecture and getattr(spec, k) != v]  # fmt: skip
        own_normalization = _normalization_of(pretrained.preprocessing)
        if config.normalization not in (None, own_normalization):
            conflicts.append(f"--normalization {config.normalization!r} (the model's: {own_normalization!r})")
        if conflicts:
            raise RecipeInputError(
                f"--init_from {config.init_from} is built otherwise than the recipe asks: {'; '.join(conflicts)}. "
                "Expected no architecture options for a pre-trained model (drop them, or pre-train that architecture)."
            )
    if config.image_size is None and spec.image_size[0] != spec.image_size[1]:
        raise RecipeInputError(f"The model takes {spec.image_size} images; give a square --image_size to train at.")
    return dataclasses.replace(
        config,
        image_size=config.image_size or spec.image_size[0],
        normalization=config.normalization or own_normalization,
    )


def _normalization_of(preprocessing):
    """The recipes' name of a model's pre-processing mean and std ("vit" when it has none)."""
    if preprocessing is None:
        return "vit"
    for name in ("vit", "imagenet"):
        named = ImagePreprocessing.from_normalization(name, 1)
        if np.allclose(np.broadcast_to(named.mean, 3), np.broadcast_to(preprocessing.mean, 3)) and np.allclose(
            np.broadcast_to(named.std, 3), np.broadcast_to(preprocessing.std, 3)
        ):
            return name
    raise ValueError(
        f"The pre-trained model normalises with mean {preprocessing.mean} and std {preprocessing.std}; the recipes' "
        "pipelines know 'vit' (0.5, 0.5) and 'imagenet' (ImageNet's mean and std)."
    )


def _spec(config, recipe, num_classes, pretrained):
    """The model to train: the named model with the recipe's options for pre-training; for
    fine-tuning, the architecture of what is loaded with the recipe's task and dropouts."""
    task = dict(config.model_options, image_size=config.image_size, num_classes=num_classes)
    if recipe == "pretrain":
        return keras_vit.get_spec(config.model).replace(**task)
    base = pretrained.spec if pretrained is not None else keras_vit.get_spec(config.init_model or config.model)
    architecture = ViTSpec.fields_with_role(ARCHITECTURE)
    if pretrained is None:
        base = base.replace(**{k: v for k, v in task.items() if k in architecture})
    own = {k: v for k, v in task.items() if k not in architecture}
    # A zero head, so fine-tuning starts from the pre-trained features alone.
    return ViTSpec(**{k: getattr(base, k) for k in architecture}, **{**own, "head_zero_init": True})


def _build(config, recipe, class_names, pretrained):
    spec = _spec(config, recipe, len(class_names), pretrained)
    dtype = "mixed_bfloat16" if config.mixed_precision else None
    # What the evaluation pipeline does, so the saved model classifies raw images and its
    # exports pre-process as it was trained (and the masked objective reads pixel colours).
    preprocessing = ImagePreprocessing.from_normalization(config.normalization, spec.image_size)
    if config.objective == "masked_patch_prediction":
        # The ViT as its backbone, without classifier: the dataset's labels are unused.
        return MaskedPatchPrediction(spec, dtype, preprocessing, seed=config.seed, name=config.model)
    name = _model_name(config, recipe, pretrained)
    # class_names: the dataset's.
    model = keras_vit.VisionTransformer(spec, dtype=dtype, preprocessing=preprocessing, class_names=class_names,
                                        name=name)  # fmt: skip
    if recipe == "finetune":
        # A fresh zero head (and no pre-logits) for the new task, whatever the source holds; a
        # masked patch prediction model's [mask] embedding and head are left unused.
        fresh = ("head/", "pre_logits/")
        if pretrained is not None:
            unloaded = copy_weights(pretrained, model, exclude=fresh)
        else:
            report = keras_vit.load_weights(model, config.init_from, warn=False, exclude=fresh)
            unloaded = [v.path for v in model.weights if v.path not in report.loaded and not v.path.startswith(fresh)]
        if unloaded:
            raise ValueError(
                f"{config.init_from} left {', '.join(unloaded)} of the model to fine-tune freshly initialised; "
                "only the head and pre-logits layer may start fresh."
            )
    return model


FREEZE = ("backbone",)


def _check_fine_tuning(config, recipe, spec):
    """The fine-tuning techniques asked for fit the recipe and the model."""
    asked = [f"--{k}" for k in ("freeze", "lora_rank", "layer_decay") if getattr(config, k)]
    if recipe != "finetune" and asked:
        raise ValueError(f"{', '.join(asked)}: options of fine-tuning a pre-trained model (keras-vit finetune).")
    if config.freeze not in (None, *FREEZE):
        raise ValueError(f"--freeze must be one of {', '.join(FREEZE)}; got {config.freeze!r}.")
    if config.freeze and config.lora_rank:
        raise ValueError("--freeze backbone trains the head alone and --lora_rank adapters too: choose one.")
    if config.lora_rank:
        targets = config.lora_targets.split(",")
        widths = {"qkv": spec.hidden_size, "out": spec.hidden_size, "fc1": min(spec.hidden_size, spec.mlp_dim),
                  "fc2": min(spec.hidden_size, spec.mlp_dim)}  # fmt: skip
        unknown = [t for t in targets if t not in widths]
        if unknown:
            raise ValueError(f"--lora_targets must be some of {', '.join(widths)}; got {config.lora_targets!r}.")
        narrowest = min(widths[t] for t in targets)
        if config.lora_rank > narrowest:
            raise ValueError(
                f"--lora_rank must be from 1 to {narrowest} (the width of the narrowest projection it adapts); "
                f"got {config.lora_rank}."
            )


def _adapt(config, model):
    """Freezes the backbone or puts LoRA adapters on, as the config asks."""
    if config.freeze == "backbone":
        for variable in model.weights:
            variable.trainable = variable.path.startswith(("head/", "pre_logits/"))
    if config.lora_rank:
        add_lora(model, config.lora_rank, config.lora_alpha, config.lora_targets, train_norms=config.lora_norms)


def _cosine(a, b):
    return (a * b).sum(-1) / (np.linalg.norm(a, axis=-1) * np.linalg.norm(b, axis=-1) + 1e-12)


def start_checks(model, pretrained, images, pretrained_size):
    """What fine-tuning starts from, measured before any step.

    - ``head_max_abs_output``: the new zero head outputs exactly 0.
    - ``feature_cosine_similarity``: mean cosine similarity between the pre-trained model's
      pooled features of each image at its own resolution and the new model's features of
      the same image upsampled; ``feature_cosine_other_images`` is the same measure
      between *different* images at the pre-training resolution, the baseline it must beat.
    - ``pretrained_head_agreement``: the pre-trained classifier applied to the new
      model's features agrees with its own top-1 on this fraction of the images.
    """
    to_numpy = keras.ops.convert_to_numpy
    checks = {"head_max_abs_output": float(np.abs(to_numpy(model.predict(images, verbose=0))).max())}
    if pretrained is None:
        return checks
    small = to_numpy(keras.ops.image.resize(images, pretrained_size, interpolation="bilinear", antialias=True))
    old = to_numpy(pretrained.feature_model().predict(small, verbose=0))
    new = to_numpy(model.feature_model().predict(images, verbose=0))
    checks["feature_cosine_similarity"] = float(_cosine(old, new).mean())
    checks["feature_cosine_other_images"] = float(_cosine(old, np.roll(old, 1, axis=0)).mean())
    top = [layer for layer in pretrained.layers if layer.name in ("pre_logits", "head")]
    if [layer.name for layer in top][-1:] == ["head"]:

        def classify(features):
            for layer in top:
                features = layer(features)
            return to_numpy(features).argmax(-1)

        checks["pretrained_head_agreement"] = float((classify(old) == classify(new)).mean())
    return checks


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
    if keras.backend.backend() == "torch" or config.strategy == "mirrored":
        return False
    return config.jit_compile


def _fit(config, recipe, extra_callbacks):
    started = time.perf_counter()
    # Everything that can be wrong with the input is checked before training starts.
    with _input_checks():
        _check_objective(config, recipe)
        keras.utils.set_random_seed(config.seed)
        # Outside the distribution scope: only the source of the weights of the model to train.
        pretrained = _pretrained(config) if recipe == "finetune" else None
        config = _resolved(config, recipe, pretrained)
        splits = load_dataset(config.dataset, data_dir=config.data_dir, seed=config.seed)
        _check_splits(config, splits)
        fewshot = _fewshot_callback(config, splits)
        replicas = check_strategy(config.strategy, config.batch_size, config.accumulation_steps)
        train, validation, test = _pipelines(config, splits, drop_remainder=replicas > 1)
        updates = _steps_per_epoch(config, splits.train, drop_remainder=replicas > 1)
        steps = updates * config.accumulation_steps  # fit's steps: micro-batches
        # Their errors before the run folder is made.
        _check_fine_tuning(config, recipe, _spec(config, recipe, splits.info.num_classes, pretrained))
        run_dir, resumed = _run_dir(config, _run_name(config, recipe, _model_name(config, recipe, pretrained)))
        _record_config(run_dir, config, recipe, resumed)
    # One stream of batches across the epochs, `steps` an epoch: a run resumed from its
    # backup skips the epochs it has done, so it sees the batches the uninterrupted run
    # would (the skipped ones are read again, not trained on).
    train = train.repeat()
    state = read_state(_backup_dir(run_dir)) if resumed else None
    if state is not None:
        train = train.skip(state["epoch"] * steps)
    # The whole run sits in the scope: JAX's keras.distribution shards each batch at fit time.
    with distribution_scope(config.strategy, config.tpu):
        with _input_checks():  # the pre-trained weights, copied or loaded here
            model = _build(config, recipe, splits.info.class_names, pretrained)
            _adapt(config, model)
        model.compile(
            optimizer=make_optimizer(config, total_steps=updates * config.epochs, model=model),
            **_objective_terms(config),
            jit_compile=_jit_compile(config),
        )
        checks = {}
        if recipe == "finetune":
            images = np.concatenate([keras.ops.convert_to_numpy(x) for x, _ in validation])
            size = tuple(pretrained.input_shape[1:3]) if pretrained is not None else None
            checks = start_checks(model, pretrained, images, size)
        epochs = EpochTimes()  # last: each epoch's steps, validation and file writes
        with _finite_evaluation():
            history = model.fit(
                train,
                epochs=config.epochs,
                steps_per_epoch=steps,
                validation_data=validation,
                callbacks=[*_callbacks(run_dir, extra_callbacks, fewshot, ema=bool(config.ema)), epochs],
                verbose=config.progress,
                shuffle=False,  # the pipeline shuffles, seeded
            )
        if config.lora_rank:  # the adapter alone, and the model with it merged: a plain one
            save_adapter(model, os.path.join(run_dir, "adapter.npz"))
            save_model(merge_lora(model), os.path.join(run_dir, "model.keras"))
        else:
            save_model(model, os.path.join(run_dir, "model.keras"))
        with _finite_evaluation():  # for masked patch prediction: the colour accuracy on the corrupted patches
            test_accuracy = model.evaluate(test, verbose=0, return_dict=True)["accuracy"]
    seconds = time.perf_counter() - started
    return RunResult(model, run_dir, history.history, float(test_accuracy), seconds, checks, epochs.seconds)
