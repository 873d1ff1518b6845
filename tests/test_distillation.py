"""DeiT's distillation (``keras_vit/training/distillation.py``): the hard and soft losses
against numpy written apart, a training step's loss with the teacher on its own input
(another size and normalisation), the teacher untouched by training, and the recipes'
``--teacher`` giving the student a distillation token and head."""

import os

import keras
import numpy as np
import pytest
from helpers import TINY_ENCODER, randomize_keras, to_numpy

import keras_vit
from keras_vit.data import load_dataset
from keras_vit.layers.preprocessing import ImagePreprocessing
from keras_vit.training import finetune, make_config, pretrain
from keras_vit.training.distillation import Distiller, HardDistillation, SoftDistillation

TINY = dict(depth=1, num_classes=4, **TINY_ENCODER)


def numpy_log_softmax(x):
    x = x.astype(np.float64)
    shifted = x - x.max(axis=-1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))


def numpy_hard(teacher, student):
    """Cross-entropy of the student against the teacher's top class, averaged."""
    return -numpy_log_softmax(student)[np.arange(len(student)), teacher.argmax(-1)].mean()


def numpy_soft(teacher, student, temperature):
    """T^2 KL(teacher_T || student_T) per example, averaged."""
    p = numpy_log_softmax(teacher / temperature)
    q = numpy_log_softmax(student / temperature)
    return (np.exp(p) * (p - q)).sum(-1).mean() * temperature**2


def test_the_hard_and_soft_losses_equal_numpy():
    rng = np.random.default_rng(0)
    teacher, student = (rng.normal(scale=3.0, size=(8, 5)).astype("float32") for _ in range(2))
    hard = float(to_numpy(HardDistillation()(teacher, student)))
    np.testing.assert_allclose(hard, numpy_hard(teacher, student), rtol=1e-5)
    for temperature in (1.0, 3.0):
        soft = float(to_numpy(SoftDistillation(temperature)(teacher, student)))
        np.testing.assert_allclose(soft, numpy_soft(teacher, student, temperature), rtol=1e-5)
    # Not the same numbers by accident: the two losses and the temperatures differ here.
    assert abs(numpy_soft(teacher, student, 3.0) - numpy_soft(teacher, student, 1.0)) > 0.1


def small_pair(teacher_size=24):
    """A student at 16 px with the ViT's normalisation and a teacher at ``teacher_size``
    with ImageNet's and dropout (which inference mode turns off)."""
    student = keras_vit.create_model("vit_ti16", image_size=16, patch_size=4, distillation_token=True, **TINY,
                                     preprocessing=ImagePreprocessing.from_normalization("vit", 16))  # fmt: skip
    teacher = keras_vit.create_model(
        "vit_ti16", image_size=teacher_size, patch_size=4, dropout_rate=0.5, **TINY,
        preprocessing=ImagePreprocessing.from_normalization("imagenet", teacher_size, interpolation="bicubic",
                                                            antialias=True),
    )  # fmt: skip
    randomize_keras(student, seed=1)
    randomize_keras(teacher, seed=2)
    return student, teacher


@pytest.mark.parametrize("distillation", ["hard", "soft"])
def test_a_training_steps_loss_is_the_class_heads_and_the_teachers_on_its_own_input(distillation):
    student, teacher = small_pair()
    rng = np.random.default_rng(0)
    raw = rng.integers(0, 256, size=(6, 16, 16, 3)).astype("float32")
    labels = rng.integers(0, 4, size=6)
    distiller = Distiller(student, teacher, distillation, temperature=2.0, weight=0.3)
    distiller.compile("sgd", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    x = to_numpy(student.preprocessing(raw))
    loss = distiller.compute_loss(x, labels, distiller(x, training=True), training=True)
    # Apart: the teacher on the raw pixels through its own pre-processing, in inference mode
    # (its resize to 24 px and ImageNet's normalisation), and the student's class and
    # distillation heads apart from its graph.
    teacher_logits = teacher.predict(to_numpy(teacher.preprocessing(raw)), verbose=0)
    heads = keras.Model(student.input, [student.get_layer(n).output for n in ("head", "head_dist")])
    class_logits, distilled = (to_numpy(h) for h in heads.predict(x, verbose=0))
    label_term = -numpy_log_softmax(class_logits)[np.arange(6), labels].mean()
    distill = numpy_hard(teacher_logits, distilled) if distillation == "hard" else numpy_soft(
        teacher_logits, distilled, 2.0)  # fmt: skip
    np.testing.assert_allclose(float(to_numpy(loss)), 0.7 * label_term + 0.3 * distill, rtol=2e-5)
    # Prediction and evaluation are the student's: the two heads' mean.
    np.testing.assert_allclose(to_numpy(distiller.predict(x, verbose=0)), (class_logits + distilled) / 2, atol=1e-5)


def plain_teacher():
    """A Keras model of its own, its rescaling inside (as Keras' applications): raw pixels in."""
    inputs = keras.Input((20, 20, 3))
    x = keras.layers.Rescaling(1 / 255.0)(inputs)
    outputs = keras.layers.Dense(4)(keras.layers.Flatten()(x))
    return keras.Model(inputs, outputs, name="plain")


def keras_hub_teacher():
    """keras-hub's ViT classifier at 32 px, scaling to [-1, 1] in its image converter."""
    keras_hub = pytest.importorskip("keras_hub")
    backbone = keras_hub.models.ViTBackbone(image_shape=(32, 32, 3), patch_size=16, num_layers=1, num_heads=2,
                                            hidden_dim=16, mlp_dim=32)  # fmt: skip
    converter = keras_hub.layers.ViTImageConverter(image_size=(32, 32), scale=1 / 127.5, offset=-1.0)
    preprocessor = keras_hub.models.ViTImageClassifierPreprocessor(image_converter=converter)
    return randomize_keras(keras_hub.models.ViTImageClassifier(backbone=backbone, num_classes=4,
                                                               preprocessor=preprocessor), seed=4)  # fmt: skip


@pytest.mark.parametrize("make_teacher", [plain_teacher, keras_hub_teacher], ids=["plain keras", "keras-hub"])
def test_a_keras_model_of_any_kind_teaches_from_the_raw_batch_as_it_takes_it(make_teacher):
    teacher = make_teacher()
    if make_teacher is plain_teacher:
        randomize_keras(teacher, seed=4)
    student, _ = small_pair()
    raw = np.random.default_rng(0).integers(0, 256, size=(4, 16, 16, 3)).astype("float32")
    distiller = Distiller(student, teacher, "soft", weight=1.0)
    x = to_numpy(student.preprocessing(raw))
    logits = to_numpy(distiller.teacher_logits(x))
    # Apart: keras-hub's predict applies its own pre-processing; the plain model takes pixels at its size.
    bigger = to_numpy(keras.ops.image.resize(raw, teacher.input_shape[1:3] if make_teacher is plain_teacher else
                                             (32, 32), interpolation="bilinear", antialias=False))  # fmt: skip
    expected = teacher.predict(bigger if make_teacher is plain_teacher else raw, verbose=0)
    np.testing.assert_allclose(logits, expected, rtol=1e-4, atol=1e-4 * np.abs(expected).max())
    assert np.abs(expected).max() > 0.1  # informative logits


def test_fit_trains_the_student_and_leaves_the_teacher_as_it_was():
    student, teacher = small_pair()
    before = [to_numpy(w).copy() for w in teacher.weights]
    token = to_numpy(student.get_layer("distillation_token").token).copy()
    distiller = Distiller(student, teacher, "soft", temperature=3.0, weight=0.5)
    distiller.compile(keras.optimizers.Adam(1e-2), loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    rng = np.random.default_rng(0)
    x = rng.normal(size=(8, 16, 16, 3)).astype("float32")
    distiller.fit(x, rng.integers(0, 4, size=8), epochs=2, batch_size=4, verbose=0)
    assert not teacher.trainable and len(distiller.trainable_weights) == len(student.trainable_weights)
    for was, weight in zip(before, teacher.weights):
        np.testing.assert_array_equal(to_numpy(weight), was, err_msg=weight.path)
    assert np.abs(to_numpy(student.get_layer("distillation_token").token) - token).max() > 1e-4


def test_a_student_needs_the_distillation_token_and_a_teacher_its_classes():
    student, teacher = small_pair()
    with pytest.raises(ValueError, match="distillation_token=True"):
        Distiller(teacher, student)
    other = keras_vit.create_model("vit_ti16", image_size=16, patch_size=4, **{**TINY, "num_classes": 3})
    with pytest.raises(ValueError, match="classifies 3 classes; the student learns 4"):
        Distiller(student, other)
    named = keras_vit.create_model("vit_ti16", image_size=16, patch_size=4, **TINY, class_names=list("abcd"))
    student.class_names = list("abdc")
    with pytest.raises(ValueError, match="classifies a, b, c, d; the student learns a, b, d, c"):
        Distiller(student, named)


@pytest.fixture(scope="module")
def digits_teacher(tmp_path_factory):
    """A saved classifier of the digits' classes (random weights: the recipes' plumbing is tested here)."""
    names = load_dataset("digits").info.class_names
    teacher = keras_vit.create_model("vit_ti16", image_size=32, patch_size=8, depth=1, num_classes=len(names),
                                     class_names=names, **TINY_ENCODER)  # fmt: skip
    path = str(tmp_path_factory.mktemp("teacher") / "teacher.keras")
    keras_vit.save_model(teacher, path)
    return path


@pytest.mark.slow
def test_the_recipes_distil_into_a_student_with_a_distillation_token(digits_teacher, tmp_path, capsys):
    tiny = dict(epochs=1, steps_per_epoch=2, depth=1, progress=0, output_dir=str(tmp_path))
    # Pre-training: the digits recipe's model (patches' average) gets the token and its head,
    # and loses the recipe's pre-logits layer, saying so in the run's first lines.
    result = pretrain(make_config("digits_pretrain", teacher=digits_teacher, **tiny))
    student = keras_vit.load_model(os.path.join(result.run_dir, "model.keras"))
    assert type(student) is keras_vit.VisionTransformer and student.spec.distillation_token
    assert student.spec.representation_size is None
    assert "the student has no pre-logits layer (representation_size 128 [recipe digits_pretrain] dropped)" in (
        capsys.readouterr().out
    )
    # A pre-logits layer the user asks for stays, and DeiT's heads cannot take it: one error.
    with pytest.raises(ValueError, match="--teacher gives the student DeiT's distillation token and head"):
        pretrain(make_config("digits_pretrain", teacher=digits_teacher, representation_size=64, **tiny))
    assert os.path.isfile(os.path.join(result.run_dir, "best.keras")) and result.model.spec.distillation_token
    # Fine-tuning a model without the token: its weights are the pre-trained model's, the new
    # token's position row first (no class token), zero.
    plain = pretrain(make_config("digits_pretrain", run_name="plain", **tiny))
    source = os.path.join(plain.run_dir, "model.keras")
    tuned = finetune(make_config("digits_finetune", init_from=source, teacher=digits_teacher, distillation="soft",
                                 learning_rate=1e-9, **tiny))  # fmt: skip
    assert tuned.model.spec.num_prefix_tokens == 1 and np.isfinite(tuned.test_accuracy)
    table = to_numpy(tuned.model.get_layer("position_embedding").embedding)
    before = to_numpy(keras_vit.load_model(source).get_layer("position_embedding").embedding)
    assert table.shape[1] == before.shape[1] + 1  # (a step of rate 1e-9 moves nothing above 1e-6)
    np.testing.assert_allclose(table[:, 0], 0.0, atol=1e-6)
    np.testing.assert_allclose(table[:, 1:], before, atol=1e-6)
