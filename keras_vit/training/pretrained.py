"""What a run starts from: the pre-trained model ``--init-from`` names (fine-tuning's, or
the masked autoencoder pre-training continues), the recipe's settings it decides (image
size, normalisation, a decoder), the checks of the start, and ``load_named``, which loads
a ``--teacher`` too."""

import dataclasses
import os

import keras
import numpy as np

from keras_vit import factory
from keras_vit.checks import flag
from keras_vit.layers.preprocessing import ImagePreprocessing
from keras_vit.models.mae_spec import MAESpec
from keras_vit.models.masked_autoencoder import MaskedAutoencoder
from keras_vit.models.masked_patches import MaskedPatchPrediction
from keras_vit.models.registry import get_spec
from keras_vit.models.spec import ARCHITECTURE, ViTSpec
from keras_vit.models.vit import VisionTransformer
from keras_vit.training.errors import MissingInputFileError, RecipeInputError


def load_pretrained(config):
    """The model to fine-tune from ``init_from``: what ``keras_vit.load_model`` loads from
    it (a checkpoint or URL that holds weights alone built into ``--init-model``, else
    ``--model``, with the numerics of the checkpoint's layout); a self-supervised model's
    backbone: masked patch prediction's, a masked autoencoder's encoder."""
    given, architecture = config.init_from, config.init_model or config.model
    source = _resolve(given, "--init-from", model_name=architecture if factory.is_url(given) else config.init_model)
    if source.kind == factory.CHECKPOINT and source.spec is None:  # weights alone, without --init-model
        source = _resolve(given, "--init-from", model_name=architecture)
    # Weights alone are built into the named architecture with the recipe's architecture
    # options (--depth 2), as load_model(path, model_name, depth=2) builds them; a source that
    # states its architecture keeps it (resolved() names the options that contradict it).
    fields = ViTSpec.fields_with_role(ARCHITECTURE) if source.kind == factory.CHECKPOINT else ()
    options = {k: v for k, v in config.model_options.items() if k in fields}
    model = factory.build(source, **options)  # a head the checkpoint has not is left fresh: fine-tuning replaces it
    return model.backbone if isinstance(model, (MaskedPatchPrediction, MaskedAutoencoder)) else model


@dataclasses.dataclass(frozen=True)
class PretrainingStart:
    """Where a masked autoencoder's pre-training continues from (``--init-from``)."""

    name: str
    spec: ViTSpec  # the encoder's
    preprocessing: ImagePreprocessing | None
    mae_spec: MAESpec | None  # the masked autoencoder's options the source states (decoder, mask ratio, loss)
    path: str  # the weights file


def pretraining_start(config):
    """What ``--init-from`` gives pre-training to continue from: a masked autoencoder
    (keras-vit's file, transformers' ``ViTMAEForPreTraining`` folder or hub name) or a ViT
    encoder (timm's ``.mae`` weights, any ViT), its weights and the options it states; None
    without ``--init-from``."""
    if not config.init_from:
        return None
    source = _resolve(config.init_from, "--init-from")
    if source.kind == factory.CHECKPOINT:
        raise RecipeInputError(
            f"--init-from {config.init_from!r} holds weights alone: pre-training continues from a model that states "
            "its architecture (a .keras file, a preset, a hub name or a model's folder)."
        )
    path = source.weights.fetch()
    if source.spec is not None:  # the architecture from the source's config
        size = source.spec.image_size
        preprocessing = ImagePreprocessing(size, **source.preprocessing) if source.preprocessing else None
        return PretrainingStart(source.name, source.spec, preprocessing, source.pretraining, path)
    model = factory.build(source)  # a file that holds its architecture
    name = model.name
    mae_spec = model.mae_spec if isinstance(model, MaskedAutoencoder) else None
    if isinstance(model, (MaskedPatchPrediction, MaskedAutoencoder)):
        model = model.backbone
    if not isinstance(model, VisionTransformer):
        raise RecipeInputError(
            f"--init-from {config.init_from!r} holds a {type(model).__name__}: expected a keras-vit model to continue."
        )
    return PretrainingStart(name, model.spec, model.preprocessing, mae_spec, path)


def with_start_options(config, start):
    """``config`` with the masked autoencoder options ``start`` states where the user gave
    none; a decoder given otherwise than the start's is an error (its weights have that shape)."""
    if start is None or start.mae_spec is None:
        return config
    stated, asked = start.mae_spec.to_config(), config.mae_spec
    taken = {k: v for k, v in stated.items() if k in config.defaults}
    conflicts = [
        f"{flag(k)} {getattr(asked, k)!r} (the model's: {v!r})"
        for k, v in stated.items()
        if k.startswith("decoder_") and k not in taken and getattr(asked, k) != v
    ]
    if conflicts:
        raise RecipeInputError(
            f"--init-from {config.init_from} has another decoder than the recipe asks: {'; '.join(conflicts)}. "
            "Expected no decoder options when continuing a masked autoencoder (drop them)."
        )
    defaults = {**config.defaults, **dict.fromkeys(taken, "the model's")}
    return dataclasses.replace(config, mae_options={**config.mae_options, **taken}, defaults=defaults)


def load_named(given, option):
    """The model ``given`` names, or None for a checkpoint without architecture."""
    source = _resolve(given, option)
    if source.kind == factory.CHECKPOINT:
        return None
    return factory.build(source)


def _resolve(given, option, model_name=None):
    """What ``given`` names (``factory.resolve``; ``model_name``: the architecture of a
    checkpoint or URL of weights alone), its errors the recipe's input errors."""
    try:
        source = factory.resolve(given, model_name=model_name, loading=True)
    except factory.NoWeightsError:
        raise RecipeInputError(
            f"{option} {given!r} is not a file, a folder or a preset: a model name alone has no "
            f"pre-trained weights. Expected a preset such as {_presets_of(given)}, a preset folder "
            "(keras_vit.save_preset) or a .keras file."
        ) from None
    except factory.InvalidModelFileError as error:
        if os.path.exists(given) or factory.is_url(given):
            raise RecipeInputError(f"{option} {given!r}: {error}") from None
        raise MissingInputFileError(f"{option} {given!r} is not a file or folder.") from None
    except ValueError as error:  # an unknown architecture, or one given for a model that states its own
        if model_name is None:
            raise
        raise RecipeInputError(f"{option} {given!r} built into the architecture {model_name!r}: {error}") from None
    return source


def _presets_of(model_name):
    names = factory.list_models(f"{model_name}.*", pretrained=True) or factory.list_models(pretrained=True)
    return ", ".join(names[:3])


# The fields a variant's name stands for (keras_vit.models.variants: vit_ti16 is ViT-Ti/16).
SIZE_FIELDS = ("patch_size", "hidden_size", "depth", "num_heads", "mlp_dim")


def model_name(config, pretrained):
    """The name of the model a run trains (its run folder's and its figures'): the loaded
    model's; else the variant named (``vit_ti16``), or, where the recipe's options resize
    it, a name of what it is: ``vit-d<depth>w<width>p<patch>``.

    >>> from keras_vit.training.config import make_config
    >>> model_name(make_config("digits_pretrain"), None)  # vit_ti16 resized: 4 blocks of 128, patch 4
    'vit-d4w128p4'
    >>> model_name(make_config("digits_pretrain", model="vit_s16", image_size=32), None)
    'vit_s16'
    """
    if pretrained is not None:
        return pretrained.name
    named = config.model  # a run without a loaded model pre-trains the named variant
    variant = get_spec(named)
    spec = variant.replace(**{k: v for k, v in config.model_options.items() if k in SIZE_FIELDS})
    if all(getattr(spec, k) == getattr(variant, k) for k in SIZE_FIELDS):
        return named
    family = "vit" if variant.resnet is None else named.rsplit("_vit", 1)[0] + "_vit"
    return f"{family}-d{spec.depth}w{spec.hidden_size}p{spec.patch_size}"


def resolved(config, pretrained):
    """``config`` with what it leaves to the model (image size, normalization) taken from it;
    an option that contradicts the pre-trained model is an error listing each conflict."""
    if pretrained is None:
        spec = get_spec(config.model).replace(**config.model_options)
        own_normalization = "vit"
    else:
        spec = pretrained.spec
        architecture = set(ViTSpec.fields_with_role(ARCHITECTURE))
        conflicts = [
            f"{flag(k)} {v!r} (the model's: {spec.option(k)!r})"
            for k, v in config.model_options.items()
            if k in architecture and spec.option(k) != v
        ]
        own_normalization = _normalization_of(pretrained.preprocessing)
        if config.normalization not in (None, own_normalization):
            conflicts.append(f"--normalization {config.normalization!r} (the model's: {own_normalization!r})")
        if conflicts:
            raise RecipeInputError(
                f"--init-from {config.init_from} is built otherwise than the recipe asks: {'; '.join(conflicts)}. "
                "Expected no architecture options for a pre-trained model (drop them, or pre-train that architecture)."
            )
    if config.image_size is None and spec.image_size[0] != spec.image_size[1]:
        raise RecipeInputError(f"The model takes {spec.image_size} images; give a square --image-size to train at.")
    own = {"image_size": spec.image_size[0], "normalization": own_normalization}
    taken = {k: v for k, v in own.items() if getattr(config, k) is None}
    source = "the model's" if pretrained is not None else "a new model's"
    defaults = {**config.defaults, **dict.fromkeys(taken, source)}
    if pretrained is not None and "model" in config.defaults:  # the model loaded, not the field's default
        taken["model"], defaults["model"] = pretrained.name, f"--init-from {config.init_from}"
    return dataclasses.replace(config, **taken, defaults=defaults)


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


def _cosine(a, b):
    return (a * b).sum(-1) / (np.linalg.norm(a, axis=-1) * np.linalg.norm(b, axis=-1) + 1e-12)


def start_checks(model, pretrained, images):
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
    # The new model's outputs and features in one pass (one predict function to compile).
    both = keras.Model(model.input, [model.output, model.feature_model().output])
    outputs, new = (to_numpy(x) for x in both.predict(images, verbose=0))
    checks = {"head_max_abs_output": float(np.abs(outputs).max())}
    size = tuple(pretrained.spec.image_size)
    small = to_numpy(keras.ops.image.resize(images, size, interpolation="bilinear", antialias=True))
    old = to_numpy(pretrained.feature_model().predict(small, verbose=0))
    checks["feature_cosine_similarity"] = float(_cosine(old, new).mean())
    checks["feature_cosine_other_images"] = float(_cosine(old, np.roll(old, 1, axis=0)).mean())
    top = [layer for layer in pretrained.layers if layer.name in ("pre_logits", "head")]
    # (A distilled model's classifier is two heads on two tokens, not one on the features.)
    if [layer.name for layer in top][-1:] == ["head"] and not (
        pretrained.spec.distillation_token and pretrained.spec.distillation_head
    ):

        def classify(features):
            for layer in top:
                features = layer(features)
            return to_numpy(features).argmax(-1)

        checks["pretrained_head_agreement"] = float((classify(old) == classify(new)).mean())
    return checks
