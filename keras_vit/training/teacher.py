"""What ``--teacher`` adds to a run (DeiT's distillation, ``training/distillation.py``): the
teacher loaded and checked, the student's spec given the distillation token and head, the
line that says what the recipe's model lost for them, and the ``Distiller`` that trains the
student with the teacher."""

import keras

from keras_vit.models.vit import VisionTransformer
from keras_vit.training import processes
from keras_vit.training.distillation import Distiller, check_teacher
from keras_vit.training.errors import RecipeInputError
from keras_vit.training.pretrained import load_named


def load_teacher(config, num_classes, class_names):
    """The ``--teacher`` model (a preset, hub name, folder or ``.keras`` file of a classifier
    of the dataset's classes), or None without one."""
    if not config.teacher:
        return None
    teacher = load_named(config.teacher, "--teacher")
    if teacher is None:
        raise RecipeInputError(
            f"--teacher {config.teacher!r} holds weights alone: expected a model that classifies (a preset, a hub "
            "name, a preset folder or a .keras file)."
        )
    try:
        check_teacher(teacher, num_classes, class_names, given=f"--teacher {config.teacher}")
    except ValueError as error:
        raise RecipeInputError(str(error)) from None
    return teacher


def student_spec(config, spec):
    """``spec`` with DeiT's distillation token and head where the run has a teacher, and
    without the pre-logits layer a recipe (not the user) gave it: DeiT's two heads read the
    pooled features and the token themselves."""
    if not config.teacher or (spec.distillation_token and spec.distillation_head):
        return spec
    changes = dict(distillation_token=True, distillation_head=True)
    if spec.representation_size is not None and "representation_size" in config.defaults:
        changes["representation_size"] = None
    try:
        return spec.replace(**changes)
    except ValueError as error:
        raise ValueError(f"--teacher gives the student DeiT's distillation token and head: {error}") from None


def student_note(config, spec):
    """The line that says what ``--teacher`` took from the recipe's model, or None."""
    size = config.model_options.get("representation_size")
    if config.teacher and size is not None and spec.representation_size is None:
        return (f"--teacher: the student has no pre-logits layer (representation_size {size} "
                f"[{config.defaults['representation_size']}] dropped): DeiT's two heads read the pooled features "
                "and the distillation token")  # fmt: skip
    return None


def with_teacher(config, student, teacher):
    """What ``fit`` trains: ``student`` alone, or the ``Distiller`` of it and ``teacher``."""
    if teacher is None:
        return student
    return Distiller(student, _teacher_copy(config, teacher), config.distillation, config.distillation_temperature,
                     config.distillation_weight)  # fmt: skip


def _teacher_copy(config, teacher):
    """The teacher, made again in the distribution's scope where there is one (its weights
    then placed as the student's)."""
    if config.strategy == "default" and processes.count() == 1:
        return teacher
    if isinstance(teacher, VisionTransformer):  # its class, pre-processing and class names kept
        copy = type(teacher).from_config(teacher.get_config())
    else:
        copy = keras.models.clone_model(teacher)
    copy.set_weights(teacher.get_weights())
    return copy


def trained(model):
    """What a run saves and returns of the model it trains: a distiller's student."""
    return model.student if isinstance(model, Distiller) else model
