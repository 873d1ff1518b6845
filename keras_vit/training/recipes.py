"""The two recipes as records: where a run's model comes from, the spec it trains and what
each recipe allows. ``PRETRAIN`` trains a new model (or continues a masked autoencoder from
``--init-from``); ``FINETUNE`` trains a pre-trained one on the dataset's classes, with the
techniques of fine-tuning. ``training/run.py`` reads the record and never the recipe's name."""

import dataclasses
from collections.abc import Callable

from keras_vit.models.graph import TASK_LAYERS
from keras_vit.models.input_size import copy_weights
from keras_vit.models.registry import get_spec
from keras_vit.models.spec import ARCHITECTURE, ViTSpec
from keras_vit.training.errors import RecipeInputError
from keras_vit.training.pretrained import load_pretrained, pretraining_start, resolved, with_start_options
from keras_vit.training.teacher import student_spec


@dataclasses.dataclass(frozen=True)
class Recipe:
    """``start(config)``: what the run starts from (None: nothing); ``configured(config,
    start)``: the recipe's settings the start decides; ``spec(config, num_classes, start)``:
    the model to train; ``check(config, objective)``: raises for an objective the recipe
    cannot train; ``initialise(config, model, start)``: the start's weights in the model;
    ``fine_tunes``: the techniques of fine-tuning and the checks of the start apply."""

    name: str
    start: Callable
    configured: Callable
    spec: Callable
    check: Callable
    initialise: Callable
    fine_tunes: bool


def _task(config, num_classes):
    return dict(config.model_options, image_size=config.image_size, num_classes=num_classes)


def _pretraining_spec(config, num_classes, start):
    """The named model with the recipe's options, or the one pre-training continues."""
    base = get_spec(config.model) if start is None else start.spec
    _check_image_size(config, base, start)
    return student_spec(config, base.replace(**_task(config, num_classes)))


def _fine_tuning_spec(config, num_classes, pretrained):
    """The architecture of what is loaded with the recipe's task and dropouts."""
    base = pretrained.spec
    _check_image_size(config, base, pretrained)
    architecture = ViTSpec.fields_with_role(ARCHITECTURE)
    own = {k: v for k, v in _task(config, num_classes).items() if k not in architecture}
    # A zero head, so fine-tuning starts from the pre-trained features alone.
    spec = ViTSpec.from_config({**{k: base.option(k) for k in architecture}, **own, "head_zero_init": True})
    return student_spec(config, spec)


def _check_image_size(config, base, pretrained):
    """``--image-size`` a whole number of patches (of the model's stride), said in flags."""
    patch = base.patch_size if pretrained is not None else config.model_options.get("patch_size", base.patch_size)
    stride = base.stride // base.patch_size * patch  # a hybrid's ResNet stride times the patch
    if config.image_size % stride == 0:
        return
    given = f"the patch size {patch} of --init-from {config.init_from}" if pretrained else f"--patch-size {patch}"
    if stride != patch:
        given = f"the model's stride {stride} (its ResNet stem's {stride // patch} x {given})"
    below = config.image_size // stride * stride
    close = " or ".join(str(k) for k in (below, below + stride) if k > 0)
    raise RecipeInputError(
        f"--image-size {config.image_size} is not divisible by {given}: expected a whole number of patches, "
        f"a multiple of {stride} such as {close}."
    )


def _pretraining_objective_check(config, objective):
    if config.init_from and not objective.continues:
        raise ValueError(
            f"--init-from in pre-training continues a masked autoencoder (--objective mae); got {objective.name!r} "
            "(to train a pre-trained model on labels, fine-tune it: keras-vit finetune --init-from)."
        )


def _fine_tuning_objective_check(config, objective):
    if not objective.labelled:
        raise ValueError(
            f"Fine-tuning trains a classifier: objective must be 'classification', got {objective.name!r} "
            "(a pre-training objective: pre-train with it, then fine-tune the saved model)."
        )


def _copy_pretrained(config, model, pretrained):
    """The pre-trained weights in the model to fine-tune: all but a fresh zero head (and no
    pre-logits) for the new task, whatever the source holds; a masked patch prediction
    model's [mask] embedding and head are left unused."""
    unloaded = copy_weights(pretrained, model, exclude=TASK_LAYERS)
    fresh = ("distillation_token/",) if config.teacher else ()  # a student's new token, as DeiT draws it
    unloaded = [path for path in unloaded if not path.startswith(fresh)]
    if unloaded:
        raise ValueError(
            f"{config.init_from} left {', '.join(unloaded)} of the model to fine-tune freshly initialised; "
            "only the head and pre-logits layer may start fresh."
        )


def _pretraining_options(config, start):
    return with_start_options(resolved(config, start), start)


def _no_weights(config, model, start):
    """Pre-training starts fresh (a continued masked autoencoder loads its own: objectives.py)."""


PRETRAIN = Recipe("pretrain", pretraining_start, _pretraining_options, _pretraining_spec,
                  _pretraining_objective_check, _no_weights, fine_tunes=False)  # fmt: skip
FINETUNE = Recipe("finetune", load_pretrained, resolved, _fine_tuning_spec, _fine_tuning_objective_check,
                  _copy_pretrained, fine_tunes=True)  # fmt: skip
