"""What a run learns, as data: one ``Objective`` record for each ``--objective`` (how its
model is built, its loss, the metric that judges a run, its checks). ``training/run.py``
reads the record and never the objective's name; a teacher (``training/teacher.py``) adds
DeiT's distillation to a labelled objective."""

import dataclasses
from collections.abc import Callable

import keras

from keras_vit.checkpoints import load_weights
from keras_vit.data import mixes_labels
from keras_vit.models import masked_autoencoder
from keras_vit.models.masked_autoencoder import MaskedAutoencoder
from keras_vit.models.masked_patches import MaskedPatchPrediction
from keras_vit.models.vit import VisionTransformer
from keras_vit.training import processes


@dataclasses.dataclass(frozen=True)
class Objective:
    """``build(config, spec, dtype, preprocessing, name, class_names, start)``: the model to
    train (``start``: what pre-training continues from, or None); ``labelled``: trained on the
    labels with ``compile``'s loss and accuracy (else the model computes its own loss); a run
    is judged by ``judged_by`` (its best model's; "loss": the lowest); ``check(config, spec)``
    raises for options the model cannot have; ``continues``: pre-training may continue a
    model of this kind from ``--init-from``; ``measured``: what the run's figures measure,
    where they are not the labels' accuracy; ``in_run_name``: a run's folder names the
    objective (another objective's run is another model: its own folder, so that no backup
    of the other is resumed)."""

    name: str
    build: Callable
    labelled: bool
    judged_by: str = "accuracy"
    check: Callable = lambda config, spec: None
    continues: bool = False
    measured: str | None = None
    in_run_name: bool = True

    def compile_terms(self, config):
        """``compile``'s loss and metrics; a self-supervised model computes its own."""
        if not self.labelled:
            return {}
        # Weighted: the blanks that fill an evaluation's last batch count for nothing.
        return {"loss": _label_loss(config), "weighted_metrics": [_accuracy(config)]}


def _one_hot_labels(config):
    """Whether the pipeline gives one-hot labels (mixed, or smoothed): else class indices."""
    return mixes_labels(config.mixup_alpha, config.cutmix_factor) or bool(config.label_smoothing)


def _label_loss(config):
    # Weighted by the examples' weights (evaluation batches filled with blanks of weight 0);
    # the same mean as Keras' default where there are none.
    reduction = "mean_with_sample_weight"
    if _one_hot_labels(config):
        return keras.losses.CategoricalCrossentropy(
            from_logits=True, label_smoothing=config.label_smoothing, reduction=reduction
        )
    return keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction=reduction)


def _accuracy(config):
    # An object, not Keras' "accuracy" string: the string's metric is made (its variables
    # too) inside the first trace of the train step, which TensorFlow then traces again.
    if _one_hot_labels(config):
        return keras.metrics.CategoricalAccuracy(name="accuracy")
    return keras.metrics.SparseCategoricalAccuracy(name="accuracy")


def _classifier(config, spec, dtype, preprocessing, name, class_names, start):
    return VisionTransformer(spec, dtype=dtype, preprocessing=preprocessing, class_names=class_names, name=name)


def _masked_patches(config, spec, dtype, preprocessing, name, class_names, start):
    # The ViT as its backbone, without classifier: the dataset's labels are unused.
    return MaskedPatchPrediction(spec, dtype, preprocessing, seed=config.seed, name=name)


def _autoencoder(config, spec, dtype, preprocessing, name, class_names, start):
    """The encoder and a decoder of its own; continued from ``start``'s weights where given."""
    model = MaskedAutoencoder(spec, dtype, preprocessing, config.mae_spec, seed=config.seed, name=name)
    if start is not None:
        _continue_from(model, start)
    return model


def _continue_from(model, start):
    """``start``'s weights in the masked autoencoder: all of them, or the encoder's where the
    file has no decoder (which then starts fresh). The two position tables stay MAE's fixed ones."""
    fixed = ("position_embedding/", "decoder_position_embedding/")
    try:
        load_weights(model, start.path, warn=False, exclude=fixed)
    except ValueError:  # no decoder in the file: the encoder's, or the encoder's own error
        load_weights(model.backbone, start.path, warn=False, exclude=fixed)
        if processes.is_writer():
            print(f"--init-from {start.path}: the encoder's weights; the decoder starts fresh (the file has none)")


def _check_autoencoder(config, spec):
    masked_autoencoder.check_options(spec, config.mae_spec)


OBJECTIVES = {
    objective.name: objective
    for objective in (
        Objective("classification", _classifier, labelled=True, in_run_name=False),
        Objective(
            "masked_patch_prediction",
            _masked_patches,
            labelled=False,
            measured="masked patch prediction (colour accuracy on the corrupted patches)",
        ),
        Objective(
            "mae",
            _autoencoder,
            labelled=False,
            judged_by="loss",
            check=_check_autoencoder,
            continues=True,
            measured="masked autoencoder (reconstruction loss on the hidden patches)",
        ),
    )
}
