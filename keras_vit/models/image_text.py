"""``ImageTextModel``: an image tower and a text tower that score images against texts (CLIP,
SigLIP), with the text tower's tokenizer and the learned scale (and bias) of their scores."""

import keras
import numpy as np

from keras_vit.images import as_model_input
from keras_vit.text.encoders import encoder_from_file
from keras_vit.text.tokenizer import TextTokenizer

# How a pair turns its scaled cosines into probabilities: over the texts (CLIP's softmax), or
# each image-text pair alone (SigLIP's sigmoid, with the learned bias).
SCORINGS = ("softmax", "sigmoid")
# transformers' zero-shot pipeline's template, the default of ``classify``.
DEFAULT_TEMPLATE = "This is a photo of {}."


def _normalised(x):
    return x / keras.ops.sqrt(keras.ops.sum(keras.ops.square(x), axis=-1, keepdims=True))


@keras.saving.register_keras_serializable(package="keras_vit")
class ImageTextModel(keras.Model):
    """Two towers and what scores a pair: ``logit_scale`` (the log of the cosines' scale)
    and, for ``scoring="sigmoid"``, ``logit_bias``.

    Args:
        image_encoder: a ``VisionTransformer`` whose output is the image embedding (CLIP's
            projection is its head) and whose ``preprocessing`` makes its pixels.
        text_encoder: a text tower (``keras_vit.models.text_tower``): token ids to the
            text embedding.
        tokenizer: the text tower's ``TextTokenizer`` (texts are tokenized outside the graph).
        scoring: ``"softmax"`` (CLIP's) or ``"sigmoid"`` (SigLIP's).

    Call with ``{"images": pixels, "token_ids": ids}`` for the ``(images, texts)`` logits.
    Saved as a ``.keras`` file, the tokenizer's vocabulary is the file's assets (its
    ``tokenizer.json`` or ``spiece.model``), its settings the config.
    """

    def __init__(self, image_encoder, text_encoder, tokenizer, scoring="softmax", **kwargs):
        super().__init__(**kwargs)
        if scoring not in SCORINGS:
            raise ValueError(f"scoring must be one of {SCORINGS}; got {scoring!r}.")
        widths = image_encoder.output_shape[-1], text_encoder.output_shape[-1]
        if widths[0] != widths[1]:
            raise ValueError(
                f"The towers' embeddings must be of one width to be compared; got {widths[0]} for the images "
                f"and {widths[1]} for the texts."
            )
        self.image_encoder, self.text_encoder, self.tokenizer = image_encoder, text_encoder, tokenizer
        self.scoring = scoring
        # As the upstreams start them: CLIP at log(1 / 0.07), SigLIP at log(10) and -10.
        start = np.log(10.0) if scoring == "sigmoid" else np.log(1 / 0.07)
        self.logit_scale = self.add_weight(shape=(), initializer=keras.initializers.Constant(start), name="logit_scale")
        self.logit_bias = None
        if scoring == "sigmoid":
            self.logit_bias = self.add_weight(
                shape=(), initializer=keras.initializers.Constant(-10.0), name="logit_bias"
            )
        self.built = True  # both towers are built models: nothing waits for an input shape

    @property
    def preprocessing(self):
        return self.image_encoder.preprocessing

    def tokenize(self, texts):
        """The tokenizer's ids of ``texts``, ``(len(texts), context_length)`` int32."""
        return self.tokenizer(texts)

    def encode_images(self, images):
        """L2-normalised image embeddings of ``images`` (what ``classify`` takes, or pixels
        already made by ``model.preprocessing``)."""
        return _normalised(self.image_encoder(as_model_input(images, self.preprocessing)))

    def encode_texts(self, texts):
        """L2-normalised text embeddings of ``texts`` (strings, or token ids)."""
        ids = texts if isinstance(texts, np.ndarray) and texts.dtype.kind in "iu" else self.tokenize(texts)
        return _normalised(self.text_encoder(ids))

    def logits(self, image_embeddings, text_embeddings):
        """The ``(images, texts)`` scores of normalised embeddings, before softmax or sigmoid."""
        logits = keras.ops.exp(self.logit_scale) * keras.ops.matmul(
            image_embeddings, keras.ops.transpose(text_embeddings)
        )
        return logits if self.logit_bias is None else logits + self.logit_bias

    def call(self, inputs):
        images = _normalised(self.image_encoder(inputs["images"]))
        return self.logits(images, _normalised(self.text_encoder(inputs["token_ids"])))

    def label_embeddings(self, labels, templates=None):
        """``(labels, width)`` normalised text embeddings, one per label: the label written
        into every template (``"{}"`` its place; default transformers' zero-shot pipeline's,
        ``DEFAULT_TEMPLATE``), the templates' embeddings averaged as open_clip does
        (normalised, mean, normalised)."""
        labels, templates = checked_labels(labels, templates)
        texts = self.encode_texts([template.format(label) for label in labels for template in templates])
        return _normalised(keras.ops.mean(keras.ops.reshape(texts, (len(labels), len(templates), -1)), axis=1))

    def classify(self, images, labels, templates=None):
        """``(images, labels)`` probabilities that each image shows each label (its
        ``label_embeddings``), scored as the pair's ``scoring``."""
        logits = self.logits(self.encode_images(images), self.label_embeddings(labels, templates))
        scored = keras.ops.softmax(logits, axis=-1) if self.scoring == "softmax" else keras.ops.sigmoid(logits)
        return keras.ops.convert_to_numpy(scored)

    def zero_shot_classifier(self, labels, templates=None, name=None):
        """A ``VisionTransformer`` classifier of ``labels`` that needs no text tower: the image
        tower, its embedding L2-normalised (``normalize_embedding``; CLIP's projection its
        ``embedding`` layer), and a head whose kernel is the ``label_embeddings`` times the
        pair's scale, its bias the pair's bias (SigLIP) or zero. Its class names are the
        labels; it outputs ``classify``'s logits (CLIP: softmax them) or its sigmoid
        probabilities (SigLIP, ``classifier_activation="sigmoid"``), and it saves and
        exports as any keras-vit classifier."""
        from keras_vit.models.vit import VisionTransformer

        labels, templates = checked_labels(labels, templates)
        embeddings = keras.ops.convert_to_numpy(self.label_embeddings(labels, templates))
        tower = self.image_encoder
        spec = tower.spec.replace(
            include_top=True,
            num_classes=len(labels),
            embedding_size=tower.spec.num_classes if tower.spec.include_top else None,  # its head, the projection
            normalize_embedding=True,
            classifier_activation="sigmoid" if self.scoring == "sigmoid" else None,
        )
        name = name or f"{tower.name}_zero_shot"
        classifier = VisionTransformer(spec, tower.dtype_policy, tower.preprocessing, class_names=labels, name=name)
        for layer in tower.layers:
            if layer.weights:
                classifier.get_layer("embedding" if layer.name == "head" else layer.name).set_weights(
                    layer.get_weights()
                )
        scale = np.exp(keras.ops.convert_to_numpy(self.logit_scale))
        bias = 0.0 if self.logit_bias is None else keras.ops.convert_to_numpy(self.logit_bias)
        kernel = (scale * embeddings.T).astype("float32")
        classifier.get_layer("head").set_weights([kernel, np.full(len(labels), bias, "float32")])
        return classifier

    def get_config(self):
        tokenizer = self.tokenizer.get_config()
        # The vocabulary is the saved file's assets (save_assets), not a string in its config.
        tokenizer["encoder"] = {"kind": tokenizer["encoder"]["kind"]}
        return {
            **super().get_config(),
            "image_encoder": keras.saving.serialize_keras_object(self.image_encoder),
            "text_encoder": keras.saving.serialize_keras_object(self.text_encoder),
            "tokenizer": tokenizer,
            "scoring": self.scoring,
        }

    def save_assets(self, dir_path):
        self.tokenizer.encoder.save_file(dir_path)

    def load_assets(self, dir_path):
        self.tokenizer.encoder = encoder_from_file(self.tokenizer.encoder.kind, dir_path)

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        towers = {
            name: keras.saving.deserialize_keras_object(config.pop(name)) for name in ("image_encoder", "text_encoder")
        }
        return cls(**towers, tokenizer=TextTokenizer.from_config(config.pop("tokenizer")), **config)


def checked_labels(labels, templates=None):
    """The labels and templates as lists, or a ``ValueError`` for none, an empty one, or a
    template without ``{}``."""
    labels = [labels] if isinstance(labels, str) else list(labels)
    templates = (
        [DEFAULT_TEMPLATE] if templates is None else [templates] if isinstance(templates, str) else list(templates)
    )
    if not labels:
        raise ValueError("classify needs labels: expected a list of strings, got none.")
    empty = [repr(label) for label in labels if not isinstance(label, str) or not label.strip()]
    if empty:
        raise ValueError(f"every label must be a non-empty string; got {', '.join(empty)}.")
    repeated = sorted({label for label in labels if labels.count(label) > 1})
    if repeated:
        raise ValueError(
            f"each label must be given once (a class each); got {', '.join(map(repr, repeated))} twice or more."
        )
    wrong = [repr(t) for t in templates if not isinstance(t, str) or t.count("{}") != 1]
    if not templates or wrong:
        raise ValueError(f"each template must hold one '{{}}' where the label goes; got {', '.join(wrong) or 'none'}.")
    return labels, templates
