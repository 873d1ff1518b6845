"""Low-rank adaptation (LoRA, Hu et al. 2021) of a ViT's projections, on Keras' own LoRA.

``add_lora`` turns on ``keras.layers.Dense.enable_lora`` in the encoder's projections
(``qkv``, ``out`` of attention; ``fc1``, ``fc2`` of the MLP) and freezes every other weight
but the classifier (and, if asked, the norms). Each projection then computes
``x @ (W + alpha / rank * A @ B)`` with ``W`` frozen and ``B`` starting at zero, so the
model starts as it was. keras-vit's qkv is one fused projection, so one adapter covers
query, key and value (PEFT's per-name matching cannot find them in timm's fused layout).

What is trained travels as an adapter (``save_adapter``: the LoRA factors, the head, the
norms if trained, and what they fit), which ``load_adapter`` puts on the same base model on
any backend; ``merge_lora`` gives a plain model with ``W + alpha / rank * A @ B`` in each
kernel, to save and export like any other.
"""

import json

import keras
import numpy as np

from keras_vit.atomic import atomic_path
from keras_vit.internals import sublayers
from keras_vit.models.graph import TASK_LAYERS
from keras_vit.models.rebuild import rebuild

TARGETS = ("qkv", "out", "fc1", "fc2")
DEFAULT_TARGETS = ("qkv", "out")  # the attention projections, as the LoRA paper's ViT and LLM use
_FORMAT = "keras-vit-lora/1"


def _targets(targets):
    """``targets`` (a tuple, or "qkv,out") as a checked tuple of ``TARGETS``."""
    targets = tuple(targets.split(",")) if isinstance(targets, str) else tuple(targets)
    unknown = sorted(set(targets) - set(TARGETS))
    if unknown or not targets:
        raise ValueError(f"LoRA targets must be some of {', '.join(TARGETS)}; got {', '.join(targets) or 'none'}.")
    return targets


def narrowest_projection(spec, targets):
    """The narrowest side of the projections ``targets`` names in a model of ``spec``: the
    highest LoRA rank they can have.

    >>> import keras_vit
    >>> narrowest_projection(keras_vit.get_spec("vit_ti16"), "qkv,out")
    192
    """
    sides = {"qkv": (spec.hidden_size,), "out": (spec.hidden_size,), "fc1": (spec.hidden_size, spec.mlp_dim),
             "fc2": (spec.hidden_size, spec.mlp_dim)}  # fmt: skip
    return min(min(sides[target]) for target in _targets(targets))


def _projections(model, targets):
    """The encoder's Dense layers named in ``targets``, in order."""
    return [
        layer
        for layer in sublayers(model)
        if isinstance(layer, keras.layers.Dense) and layer.name in targets and layer.path.startswith("block_")
    ]


def _is_norm(path):
    return "norm" in path.rsplit("/", 1)[0].rsplit("/", 1)[-1]


def add_lora(model, rank, alpha=None, targets=DEFAULT_TARGETS, train_norms=False):
    """Puts rank-``rank`` adapters on ``model``'s projections and leaves only them (with the
    head, and the norms if ``train_norms``) trainable. Returns the number of trainable weights.

    Args:
        model: a built ``keras_vit.VisionTransformer``, not quantized.
        rank: the adapters' rank, from 1 to the narrowest side of a target projection.
        alpha: the adapters' scale is ``alpha / rank`` (default ``alpha = rank``: scale 1).
        targets: which projections, some of ``TARGETS``.
        train_norms: also train the LayerNorms' scales and offsets.

    Examples:
        >>> import keras_vit
        >>> model = keras_vit.create_model("vit_ti16", image_size=16, num_classes=2, depth=1, hidden_size=32,
        ...                                num_heads=2, mlp_dim=64)
        >>> add_lora(model, rank=4)  # qkv: 32x4 + 4x96; out: 32x4 + 4x32; head: 32x2 + 2
        834
    """
    targets = _targets(targets)
    layers = _projections(model, targets)
    narrowest = narrowest_projection(model.spec, targets)
    if isinstance(rank, bool) or not isinstance(rank, (int, np.integer)) or not 1 <= rank <= narrowest:
        raise ValueError(f"LoRA rank must be an int from 1 to {narrowest} (the narrowest projection); got {rank!r}.")
    if any(layer.lora_enabled for layer in layers):
        raise ValueError("The model has LoRA adapters already: add_lora once, on the base model.")
    for layer in layers:
        layer.enable_lora(int(rank), lora_alpha=alpha)
    adapters = {v.path for layer in layers for v in (layer.lora_kernel_a, layer.lora_kernel_b)}
    for variable in model.weights:
        variable.trainable = (
            variable.path in adapters
            or variable.path.startswith(TASK_LAYERS)
            or (train_norms and _is_norm(variable.path))
        )
    return int(sum(np.prod(v.shape) for v in model.trainable_weights))


def _lora_layers(model):
    return [layer for layer in sublayers(model) if getattr(layer, "lora_enabled", False)]


def save_adapter(model, path):
    """Writes what LoRA fine-tuning changed (the factors, the trainable head and norms) and
    what it fits (rank, scale, targets, the base's architecture) to ``path`` (``.npz``)."""
    layers = _lora_layers(model)
    if not layers:
        raise ValueError("The model has no LoRA adapters to save (keras_vit.training.lora.add_lora adds them).")
    about = {
        "format": _FORMAT,
        "rank": layers[0].lora_rank,
        "alpha": layers[0].lora_alpha,
        "targets": sorted({layer.name for layer in layers}, key=TARGETS.index),
        "spec": model.spec.to_config(),
        "class_names": list(model.class_names) if model.class_names else None,
    }
    arrays = {v.path: keras.ops.convert_to_numpy(v) for v in model.weights if v.trainable}
    with atomic_path(path) as staged:
        with open(staged, "wb") as f:
            np.savez(f, __about__=np.array(json.dumps(about)), **arrays)


def load_adapter(model, path):
    """Puts the adapter at ``path`` (``save_adapter``) on ``model``, its base: the same
    architecture and classes. Returns ``model``, with LoRA on as when it was saved."""
    with np.load(path, allow_pickle=False) as stored:
        about = json.loads(str(stored["__about__"]))
        arrays = {k: stored[k] for k in stored.files if k != "__about__"}
    if about.get("format") != _FORMAT:
        raise ValueError(f"{path} is not a keras-vit LoRA adapter (expected format {_FORMAT}).")
    spec = model.spec.to_config()
    differ = sorted(k for k in ("hidden_size", "depth", "num_heads", "mlp_dim", "patch_size", "num_classes")
                    if about["spec"][k] != spec[k])  # fmt: skip
    if differ:
        said = ", ".join(f"{k} {about['spec'][k]} (the model's: {spec[k]})" for k in differ)
        raise ValueError(f"The adapter {path} fits another model: {said}.")
    norms = any(_is_norm(name) for name in arrays)
    add_lora(model, about["rank"], about["alpha"], about["targets"], train_norms=norms)
    variables = {v.path: v for v in model.weights}
    for name, value in arrays.items():
        variables[name].assign(value)
    if about["class_names"] and not model.class_names:
        model.class_names = tuple(about["class_names"])
    return model


def merge_lora(model):
    """A plain copy of ``model`` with each adapter folded into its kernel,
    ``W + alpha / rank * A @ B``: no LoRA left, the same outputs (to float32 rounding)."""
    layers = {layer.path: layer for layer in _lora_layers(model)}
    merged = rebuild(model, model.spec)
    source = {v.path: v for v in model.weights}
    for variable in merged.weights:
        value = keras.ops.convert_to_numpy(source[variable.path]).astype(np.float32)
        layer = layers.get(variable.path.rsplit("/", 1)[0])
        if layer is not None and variable.path.endswith("/kernel"):
            a, b = (
                keras.ops.convert_to_numpy(w).astype(np.float32) for w in (layer.lora_kernel_a, layer.lora_kernel_b)
            )
            value = value + (layer.lora_alpha / layer.lora_rank) * (a @ b)
        variable.assign(value)
    return merged
