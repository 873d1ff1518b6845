"""What the self-supervised pre-training models share (masked patch prediction, masked
autoencoders): a ``VisionTransformer`` as ``model.backbone`` whose weights keep the ViT's
paths, a loss of their own (``compile`` takes the optimiser alone), and a saved config
that is the backbone's with the model's options beside it."""

import keras
from keras import ops


class SelfSupervisedModel(keras.Model):
    """The shared part; a subclass sets ``backbone`` and ``OWN_TERMS`` (what ``compile``
    says it computes) and passes its options to ``config_with``."""

    OWN_TERMS = "its own loss"

    def compile(self, optimizer="rmsprop", loss=None, metrics=None, **kwargs):
        if loss is not None or metrics is not None:
            raise ValueError(
                f"{type(self).__name__} computes {self.OWN_TERMS}: "
                "compile it with the optimiser only, e.g. model.compile(optimizer)."
            )
        super().compile(optimizer=optimizer, **kwargs)

    def compile_from_config(self, config):
        # Keras' own skips models that override compile; this one's takes the same config.
        self.compile(**keras.saving.deserialize_keras_object(config))
        self.optimizer.build(self.trainable_variables)

    def with_regularisers(self, loss):
        """``loss`` plus the layers' regularisers, if any."""
        if self.losses:
            loss = loss + ops.sum([ops.cast(extra, loss.dtype) for extra in self.losses])
        return loss

    def pixel_scale(self):
        """The backbone's pre-processing ``(mean, std)`` in 0..1 units (none: the ViT's 0.5, 0.5)."""
        preprocessing = self.backbone.preprocessing
        return (0.5, 0.5) if preprocessing is None else (preprocessing.mean, preprocessing.std)

    def config_with(self, **options):
        """The backbone's config (its spec at the top level, as a VisionTransformer file has
        it, so that load_weights reads this file's patch grid) with this model's options."""
        config = {k: v for k, v in self.backbone.get_config().items() if k not in ("name", "trainable")}
        config.update(name=self.name, trainable=self.trainable, **options)
        return config

    @classmethod
    def from_config(cls, config):
        return cls(**config)
