"""DeiT's distillation (Touvron et al., "Training data-efficient image transformers &
distillation through attention", 2021): a student ViT with a distillation token learns the
labels through its class token's head and a teacher's predictions through the distillation
token's head.

``Distiller`` wraps the student and the teacher for ``fit``: each training step runs the
teacher in inference mode on the student's augmented batch, brought back to pixels and
pre-processed as the teacher's own input (its resolution, its normalisation), and the loss
is ``(1 - weight) * label loss(class head) + weight * distillation loss(distillation head)``.
Evaluation and prediction are the student's alone (the two heads' mean, as timm infers).
The run saves the student: a plain ``VisionTransformer``.
"""

import difflib
import numbers

import keras
from keras import ops

from keras_vit.internals import set_untracked
from keras_vit.layers.preprocessing import ImagePreprocessing
from keras_vit.models.vit import VisionTransformer
from keras_vit.vocabulary import DISTILLATIONS


@keras.saving.register_keras_serializable(package="keras_vit")
class HardDistillation(keras.losses.Loss):
    """DeiT's hard distillation: the cross-entropy of the student's logits against the
    teacher's top class. ``y_true``: the teacher's logits; ``y_pred``: the student's.

    >>> import numpy as np
    >>> teacher, student = np.array([[0.0, 5.0]]), np.array([[0.0, 0.0]])
    >>> round(float(HardDistillation()(teacher, student)), 4)  # -log(1/2)
    0.6931
    """

    def __init__(self, reduction="mean_with_sample_weight", name="hard_distillation", **kwargs):
        super().__init__(reduction=reduction, name=name, **kwargs)

    def call(self, y_true, y_pred):
        labels = ops.argmax(y_true, axis=-1)
        return keras.losses.sparse_categorical_crossentropy(labels, y_pred, from_logits=True)


@keras.saving.register_keras_serializable(package="keras_vit")
class SoftDistillation(keras.losses.Loss):
    """Soft distillation (Hinton et al., 2015): ``temperature ** 2`` times the KL divergence
    from the teacher's softened distribution to the student's, per example. ``y_true``: the
    teacher's logits; ``y_pred``: the student's. (DeiT's code divides this sum by the number
    of classes as well: its weight is that much smaller.)

    >>> import numpy as np
    >>> logits = np.array([[1.0, 2.0, 3.0]])
    >>> float(SoftDistillation(temperature=2.0)(logits, logits))  # the same distribution
    0.0
    """

    def __init__(self, temperature=1.0, reduction="mean_with_sample_weight", name="soft_distillation", **kwargs):
        super().__init__(reduction=reduction, name=name, **kwargs)
        self.temperature = _positive(temperature, "temperature")

    def call(self, y_true, y_pred):
        teacher = ops.log_softmax(ops.cast(y_true, "float32") / self.temperature, axis=-1)
        student = ops.log_softmax(ops.cast(y_pred, "float32") / self.temperature, axis=-1)
        divergence = ops.sum(ops.exp(teacher) * (teacher - student), axis=-1)
        return divergence * self.temperature**2

    def get_config(self):
        return {**super().get_config(), "temperature": self.temperature}


def distillation_loss(kind, temperature=1.0):
    """The loss of ``kind`` (``"hard"`` or ``"soft"``); the temperature is the soft one's."""
    if kind not in DISTILLATIONS:
        close = difflib.get_close_matches(str(kind), DISTILLATIONS, n=1)
        hint = f" (did you mean {close[0]}?)" if close else ""
        raise ValueError(f"distillation must be one of {', '.join(DISTILLATIONS)}; got {kind!r}{hint}.")
    return HardDistillation() if kind == "hard" else SoftDistillation(temperature)


def _positive(value, name):
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not value > 0:
        raise ValueError(f"{name} must be a number above 0; got {name}={value!r}.")
    return float(value)


def _weight(value):
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not 0.0 <= value <= 1.0:
        raise ValueError(f"weight must be a number in [0, 1]; got weight={value!r}.")
    return float(value)


def teacher_classes(teacher):
    """How many classes ``teacher`` outputs, and their names where it knows them (a keras-vit model)."""
    try:
        shape = teacher.output_shape
    except (AttributeError, ValueError):  # a subclassed model: no static output
        shape = None
    if not isinstance(shape, tuple) or len(shape) != 2 or shape[-1] is None:
        raise ValueError(
            f"A teacher outputs one row of class logits per image, (batch, classes); {teacher.name!r} outputs {shape}."
        )
    names = teacher.class_names if isinstance(teacher, VisionTransformer) else None
    return shape[-1], names


def check_teacher(teacher, num_classes, class_names=None, given="the teacher"):
    """``teacher`` classifies the student's classes: as many, and the same names in the same
    order where both have names."""
    count, names = teacher_classes(teacher)
    if count != num_classes:
        raise ValueError(
            f"{given} classifies {count} classes; the student learns {num_classes}: expected a teacher trained on "
            "the same classes."
        )
    if names is not None and class_names is not None and list(map(str, names)) != list(map(str, class_names)):
        raise ValueError(
            f"{given} classifies {', '.join(map(str, names[:5]))}{', ...' if len(names) > 5 else ''}; the student "
            f"learns {', '.join(map(str, class_names[:5]))}{', ...' if len(class_names) > 5 else ''}: expected the "
            "same classes in the same order."
        )


def teacher_input(teacher, student_size):
    """The layer that turns raw 0..255 images into ``teacher``'s input: resized to its size
    (the student's where it takes any), normalised as its pre-processing says (a keras-vit
    model without one: the ViT's [-1, 1], the recipes' default). No center crop: the batch
    is already the crop training chose. A Keras model that is not keras-vit's takes raw
    pixels (as Keras' applications do, their rescaling inside); a keras-hub classifier, its
    preprocessor's image converter (which ``predict`` applies)."""
    converter = getattr(getattr(teacher, "preprocessor", None), "image_converter", None)
    if converter is not None:  # keras-hub's: raw images resized and scaled as it was trained
        return converter
    if isinstance(teacher, VisionTransformer):
        size, own = teacher.spec.image_size, teacher.preprocessing
        if own is None:
            return ImagePreprocessing.from_normalization("vit", size, name="teacher_input")
        return ImagePreprocessing(size, crop_mode="squash", interpolation=own.interpolation, antialias=own.antialias,
                                  mean=own.mean, std=own.std, name="teacher_input")  # fmt: skip
    shape = getattr(teacher, "input_shape", None)
    known = isinstance(shape, tuple) and len(shape) == 4 and None not in shape[1:3]
    return ImagePreprocessing.from_normalization(None, tuple(shape[1:3]) if known else tuple(student_size),
                                                 name="teacher_input")  # fmt: skip


class Distiller(keras.Model):
    """A student ``VisionTransformer`` with DeiT's distillation token, trained from a teacher.

    ``compile`` as the student's classifier (the class head's loss, metrics); ``fit`` trains the
    student's weights alone (the teacher is frozen and runs in inference mode); ``evaluate``
    and ``predict`` are the student's. Not saved itself: save ``distiller.student``.

    Args:
        student: a ``VisionTransformer`` with ``distillation_token`` and ``distillation_head``.
        teacher: any Keras model from images to class logits, of the student's classes.
        distillation: ``"hard"`` (the teacher's top class) or ``"soft"`` (its softened
            distribution at ``temperature``).
        temperature: the soft distillation's temperature (above 0).
        weight: the distillation term's share of the loss, in [0, 1].
        teacher_preprocessing: raw 0..255 images to the teacher's input (default
            ``teacher_input``: the teacher's size and normalisation).

    Examples:
        >>> import numpy as np, keras_vit
        >>> tiny = dict(image_size=16, num_classes=3, depth=1, hidden_size=32, num_heads=2, mlp_dim=64)
        >>> teacher = keras_vit.create_model("vit_ti16", **tiny)
        >>> student = keras_vit.create_model("vit_ti16", distillation_token=True, **tiny)
        >>> distiller = Distiller(student, teacher, distillation="soft", temperature=2.0)
        >>> distiller.compile("adam", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        >>> history = distiller.fit(np.zeros((4, 16, 16, 3)), np.zeros(4, "int32"), verbose=0)
        >>> tuple(distiller.predict(np.zeros((2, 16, 16, 3)), verbose=0).shape)
        (2, 3)
    """

    def __init__(self, student, teacher, distillation="hard", temperature=1.0, weight=0.5, teacher_preprocessing=None,
                 **kwargs):  # fmt: skip
        if not isinstance(student, VisionTransformer) or not (
            student.spec.distillation_token and student.spec.distillation_head and student.spec.include_top
        ):
            raise ValueError(
                "A student has DeiT's distillation token and its head: expected a keras_vit.VisionTransformer built "
                "with distillation_token=True, distillation_head=True and a classifier."
            )
        check_teacher(teacher, student.spec.num_classes, student.class_names)
        super().__init__(name=kwargs.pop("name", f"{student.name}_distilled"), dtype=student.dtype_policy, **kwargs)
        self.student, self.teacher = student, teacher
        teacher.trainable = False  # its weights are not trained, whatever the optimiser holds
        self.distillation = distillation_loss(distillation, temperature)
        self.weight = _weight(weight)
        self.teacher_preprocessing = teacher_preprocessing or teacher_input(teacher, student.spec.image_size)
        # The student's normalisation, undone to give the teacher the batch's pixels.
        own = student.preprocessing or ImagePreprocessing.from_normalization("vit", student.spec.image_size)
        self._pixel_mean, self._pixel_std = own.mean, own.std
        # The two heads apart (the student's output is their mean): its layers, not tracked again.
        heads = [student.get_layer(name).output for name in ("head", "head_dist")]
        set_untracked(self, "_heads", keras.Model(student.inputs, heads, name="heads"))
        self.built = True  # the student and the teacher are

    @property
    def backbone(self):
        """The student: the ViT that evaluation reads, as a pre-training model's ``backbone``."""
        return self.student

    def pixels(self, images):
        """The student's input (normalised images) back to 0..255 pixels."""
        mean = ops.convert_to_tensor(self._pixel_mean, "float32")
        std = ops.convert_to_tensor(self._pixel_std, "float32")
        return (ops.cast(images, "float32") * std + mean) * 255.0

    def teacher_logits(self, images):
        """The teacher's logits of the student's input, in inference mode, as constants."""
        logits = self.teacher(self.teacher_preprocessing(self.pixels(images)), training=False)
        return ops.stop_gradient(ops.cast(logits, "float32"))

    def call(self, images, training=None):
        if not training:
            return self.student(images, training=training)
        logits, distilled = self._heads(images, training=training)
        mean = (ops.cast(logits, "float32") + ops.cast(distilled, "float32")) / 2.0
        return {"logits": mean, "class": logits, "distillation": distilled, "teacher": self.teacher_logits(images)}

    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
        if not isinstance(y_pred, dict):  # evaluation: the student's own classification loss
            return super().compute_loss(x, y, y_pred, sample_weight, training)
        # The compiled loss of the class head (with the layers' regularisers, if any).
        labels = super().compute_loss(x, y, y_pred["class"], sample_weight, training)
        distilled = self.distillation(y_pred["teacher"], y_pred["distillation"], sample_weight)
        return (1.0 - self.weight) * ops.cast(labels, "float32") + self.weight * ops.cast(distilled, "float32")

    def compute_metrics(self, x, y, y_pred, sample_weight=None):
        # The metrics of the student's prediction (the two heads' mean) in training too.
        predicted = y_pred["logits"] if isinstance(y_pred, dict) else y_pred
        return super().compute_metrics(x, y, predicted, sample_weight)
