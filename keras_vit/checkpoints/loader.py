"""``load_weights``: any supported checkpoint into a keras-vit model, on any backend."""

import dataclasses
import math
import os
import warnings

import keras
import numpy as np

from keras_vit.checkpoints import keras_hub_config, layouts, readers
from keras_vit.checkpoints.resample import resample_position_embedding
from keras_vit.checks import pair as checks_pair
from keras_vit.models.graph import TASK_LAYERS


@dataclasses.dataclass
class LoadReport:
    """What ``load_weights`` did: the file's layout and what was loaded, kept or resized."""

    container: str
    layout: str
    loaded: list
    fresh: dict  # Keras path -> why it kept its initial value
    resampled: dict  # Keras path -> (old shape, new shape)
    unused: list  # checkpoint keys nothing was loaded from
    source_grid: tuple | None = None  # the file's patch grid (None: no position embedding read)
    grid_assumed: bool = False  # the file states no grid: a square one was assumed


@dataclasses.dataclass(frozen=True)
class Checkpoint:
    """A checkpoint file as read once: its container, its layout and its arrays, the wrapper
    prefix stripped (stand-ins whose data is read when used: ``readers.LazyArray``). What
    ``trained_numerics`` and ``load_weights`` take in place of a path, so that a load that
    asks both reads the file and tells its layout once."""

    path: str
    container: str
    layout: layouts.Layout
    arrays: dict


def read_checkpoint(path, safe_mode=True):
    """The ``Checkpoint`` of a file (or a keras-hub preset folder).

    >>> import numpy as np, os, tempfile
    >>> path = os.path.join(tempfile.mkdtemp(), "timm.npz")
    >>> np.savez(path, **{"module.patch_embed.proj.weight": np.zeros((8, 3, 16, 16), "float32")})
    >>> checkpoint = read_checkpoint(path)
    >>> checkpoint.container, checkpoint.layout.name, list(checkpoint.arrays)
    ('npz', 'timm', ['patch_embed.proj.weight'])
    """
    path = os.fspath(path)
    if keras_hub_config.is_preset_folder(path):
        container, arrays = "keras_hub", keras_hub_config.read_weights(path)
    else:
        container, arrays = readers.read_arrays(path, safe_mode=safe_mode)
    layout, arrays = layouts.detect_layout(arrays)
    return Checkpoint(path, container, layout, arrays)


def load_weights(
    model,
    path,
    resample_method=None,
    resample_antialias=None,
    warn=True,
    exclude=(),
    source_grid=None,
    safe_mode=True,
):
    """Loads a checkpoint into ``model``, recognising its format and layout by content.

    Reads the original google-research ``.npz`` files, timm state dicts (``.pth``,
    ``.bin``, ``.safetensors``), HF transformers ViT checkpoints as on the hub
    (``model.safetensors``, ``pytorch_model.bin``), keras-vit ``.keras`` files (any
    architecture-compatible size) and ``.weights.h5`` files of the same architecture.

    - Position embeddings of another grid are resampled in 2D (class token kept apart),
      by default as the peer that wrote the layout does (``layouts.LAYOUTS``).
    - A classifier (or pre-logits layer) of another size, or none in the file, stays
      freshly initialised, with a warning: load a 1000-class checkpoint into a 10-class
      model to fine-tune it.
    - Anything else that is missing or of the wrong shape is an error naming the key, the
      expected and the given shape; then nothing at all is assigned.

    Args:
        model: a model from ``keras_vit.create_model`` / ``VisionTransformer``.
        path: the checkpoint file (or the ``Checkpoint`` that ``read_checkpoint`` read of it).
        resample_method: ``"bilinear"``, ``"bicubic"`` or ``"nearest"`` (default: the peer's).
        resample_antialias: antialias while resampling (default: the peer's).
        warn: emit warnings for fresh weights, unused keys and numerics that differ from
            what the checkpoint was trained with.
        exclude: Keras variable path prefixes to leave as initialised, e.g.
            ``("head/",)`` for a fresh classifier even when the class counts agree.
        source_grid: the ``(h, w)`` patch grid of the file's position embeddings. keras-vit
            files and HF checkpoints state theirs (a 3x5 grid loaded into a 5x3 model is
            resampled, not copied); for the others a square grid is assumed (and said, in
            the report and a warning, when the model's grid is not square).
        safe_mode: True (the default) refuses what could run code while loading: a
            PyTorch pickle holding more than tensors, a ``.keras`` file with a ``Lambda``
            layer's Python function. False loads them: only for files you trust.

    Returns:
        A ``LoadReport``.

    Examples:
        >>> import os, tempfile, keras_vit
        >>> source = keras_vit.create_model("vit_ti16", image_size=32, num_classes=10, depth=1)
        >>> path = os.path.join(tempfile.mkdtemp(), "source.keras")
        >>> source.save(path)
        >>> target = keras_vit.create_model("vit_ti16", image_size=48, num_classes=10, depth=1)
        >>> report = keras_vit.load_weights(target, path)
        >>> list(report.resampled)
        ['position_embedding/embedding']
    """
    if isinstance(path, Checkpoint):
        checkpoint, path = path, path.path
    else:
        path = os.fspath(path)
        if not keras_hub_config.is_preset_folder(path):
            if not os.path.isfile(path):
                raise FileNotFoundError(f"No checkpoint file at {path!r} (nor a keras-hub preset folder).")
            if readers.sniff_container(path) == "keras_weights":
                model.load_weights(path)  # same architecture only; Keras names the mismatch
                return LoadReport("keras_weights", "keras", [v.path for v in model.weights], {}, {}, [])
        checkpoint = read_checkpoint(path, safe_mode=safe_mode)
    container, layout = checkpoint.container, checkpoint.layout
    arrays = _check_architecture(model, layout, checkpoint.arrays)
    method, antialias = layout.resampling
    method = resample_method or method
    antialias = antialias if resample_antialias is None else resample_antialias

    stated_grid = checks_pair(source_grid) if source_grid is not None else layout.file_grid(path)
    grid_info = {"source_grid": stated_grid, "grid_assumed": False}
    values, fresh, resampled, used, errors = {}, {}, {}, set(), []
    for variable in model.weights:
        key_path = variable.path
        if key_path.startswith(tuple(exclude)):
            fresh[key_path] = "excluded by the caller"
            continue
        source, groups = layout.find_source(key_path)
        if source is None:
            errors.append(f"{key_path}: keras-vit has no {layout.name} mapping for this weight")
            continue
        keys = source.resolve(groups)
        missing = [k for k in keys if k not in arrays]
        expected = tuple(variable.shape)
        if missing:
            if key_path.startswith(TASK_LAYERS):
                fresh[key_path] = f"not in the checkpoint ({missing[0]})"
            else:
                errors.append(f"{key_path}: missing key {missing[0]!r} (expected shape {expected})")
            continue
        problem = _content_problem(keys, [arrays[k] for k in keys], variable)
        if problem:
            errors.append(f"{key_path}: {problem}")
            continue
        # The shape it will have, from stand-ins that hold no data: read once more to assign.
        value = source.transform(*[_stand_in(arrays[k]) for k in keys])
        if key_path == "position_embedding/embedding":
            original_shape = value.shape
            value, grid_info = _resample(model, value, method, antialias, keys[0], stated_grid)
            if grid_info["source_grid"] != model.spec.grid_size:
                resampled[key_path] = (original_shape, expected)
        if value.shape != expected:
            if key_path.startswith(TASK_LAYERS):
                fresh[key_path] = f"checkpoint shape {value.shape} != model shape {expected}"
                used.update(keys)
                continue
            errors.append(f"{key_path}: key {keys[0]!r} has shape {value.shape}, expected {expected}")
            continue
        values[key_path] = (source, groups)  # read again to assign: one array in memory at a time
        used.update(keys)

    if errors:
        listing = "\n  ".join(errors[:20]) + ("\n  ..." if len(errors) > 20 else "")
        raise ValueError(
            f"Checkpoint {path} ({layout.name} layout) does not fit model {model.name!r}; nothing was "
            f"loaded:\n  {listing}"
        )
    for variable in model.weights:
        if variable.path in values:
            source, groups = values[variable.path]
            value = np.asarray(source(arrays, groups))
            if variable.path == "position_embedding/embedding":
                value, _ = _resample(model, value, method, antialias, source.resolve(groups)[0], stated_grid)
            variable.assign(_as_tensor(value, variable.dtype))
            del value
    unused = sorted(set(arrays) - used)
    report = LoadReport(container, layout.name, sorted(values), fresh, resampled, unused, **grid_info)
    if warn:
        _warn(model, report, layout, path)
    return report


def trained_numerics(path, hybrid=False):
    """The ``create_model`` options of the numerics a checkpoint file (a path, or its
    ``Checkpoint``) was trained with.

    They are its layout's record (``layouts.LAYOUTS``), what files beside it state (an HF
    ``config.json``), and the final norm's place in a timm file; ``hybrid`` adds the ResNet
    stem's as ``resnet_<field>``. keras-vit's own files hold their spec: nothing to add.

    >>> import numpy as np, os, tempfile
    >>> path = os.path.join(tempfile.mkdtemp(), "timm.npz")
    >>> np.savez(path, **{"patch_embed.proj.weight": np.zeros((8, 3, 16, 16), "float32")})
    >>> trained_numerics(path)
    {'gelu_approximate': False, 'layer_norm_epsilon': 1e-06, 'norm_after_pool': False}
    """
    if isinstance(path, Checkpoint):
        checkpoint = path
    elif readers.sniff_container(os.fspath(path)) in ("keras", "keras_weights"):
        return {}
    else:
        checkpoint = read_checkpoint(path)
    if checkpoint.container == "keras":
        return {}  # keras-vit's own files hold their spec
    layout = checkpoint.layout
    options = {**layout.numerics, **layout.file_numerics(checkpoint.path)}
    if layout.name == "timm":
        options["norm_after_pool"] = "fc_norm.weight" in checkpoint.arrays
    if hybrid:
        options.update({f"resnet_{k}": v for k, v in layout.resnet_numerics.items()})
    return options


def _check_architecture(model, layout, arrays):
    """Structural differences that would load without error yet compute differently."""
    spec = getattr(model, "spec", None)
    arrays = layout.prepare(spec, arrays)
    has_token = layout.class_token_key in arrays
    # Said only of an otherwise complete file: an incomplete one gets its missing keys listed.
    if spec is not None and has_token != spec.has_class_token and not _missing_keys(model, layout, arrays):
        raise ValueError(
            f"The checkpoint {'has' if has_token else 'has no'} class token but the model was "
            f"built with class_token={spec.has_class_token}: build it with class_token={has_token} "
            f"(pooling={'token' if has_token else 'gap'!r} or 'gap')."
        )
    depth = _file_depth(model, layout, arrays)
    if spec is not None and depth > spec.depth:
        raise ValueError(
            f"The checkpoint holds {depth} encoder blocks, the model {spec.depth}: loading would drop "
            f"the last {depth - spec.depth}. Build the model with depth={depth}."
        )
    return arrays


def _file_depth(model, layout, arrays):
    """How many encoder blocks the file holds, counted as far as the model's block_0 maps."""
    first = [v.path for v in model.weights if v.path.startswith("block_0/")]
    if not first:
        return 0
    depth = 0
    while True:
        source, groups = layout.find_source(first[0].replace("block_0/", f"block_{depth}/", 1))
        if source is None or any(k not in arrays for k in source.resolve(groups)):
            return depth
        depth += 1


def _as_tensor(value, dtype):
    """The value to assign. A transposed matrix (a torch Linear weight as a Keras kernel) is
    transposed by the backend rather than by a strided NumPy copy."""
    if value.ndim == 2 and value.flags.f_contiguous and not value.flags.c_contiguous:
        return keras.ops.transpose(keras.ops.convert_to_tensor(value.T, dtype))
    return value.astype(dtype, copy=False)


def _content_problem(keys, stored, variable):
    """What makes the file's arrays for one weight unusable (read one at a time), or None."""
    for key, array in zip(keys, stored):
        if array.dtype.kind in "iu" and "float" in variable.dtype:
            # A quantized model's integer kernel: read as floats it would load without error.
            return f"key {key!r} holds {array.dtype} (a quantized model's file?)"
        if array.dtype.kind not in "fiu":
            return f"key {key!r} holds {array.dtype}, expected floating-point numbers"
        if array.dtype.kind == "f":
            finite = np.isfinite(np.asarray(array))
            if not finite.all():
                nan = int(np.isnan(np.asarray(array)).sum())
                return (
                    f"key {key!r} holds {nan} NaN and {int((~finite).sum()) - nan} infinite values of "
                    f"{finite.size}: a diverged run's file?"
                )
    return None


def _stand_in(array):
    """A zero-strided array of ``array``'s shape and dtype: transforms give their shape, for free."""
    return np.broadcast_to(np.zeros((), array.dtype), array.shape)


def _missing_keys(model, layout, arrays):
    """The file's keys that the model's weights (but the class token) map to and it lacks."""
    missing = []
    for variable in model.weights:
        source, groups = layout.find_source(variable.path)
        if source is not None and not variable.path.startswith(TASK_LAYERS):
            missing += [k for k in source.resolve(groups) if k not in arrays and k != layout.class_token_key]
    return missing


def _resample(model, posemb, method, antialias, key, source_grid):
    """The position embedding on the model's grid, and what is known of the file's grid."""
    num_prefix, grid = model.spec.position_prefix_rows, model.spec.grid_size
    if posemb.ndim == 2:  # some files drop the leading batch axis
        posemb = posemb[None]
    assumed = source_grid is None
    if assumed:  # the model's own grid when the counts agree, else a square one
        tokens = posemb.shape[1] - num_prefix
        side = math.isqrt(max(tokens, 0))
        source_grid = grid if tokens == grid[0] * grid[1] else (side, side)
        if source_grid[0] * source_grid[1] != tokens:
            raise ValueError(
                f"{key!r} of shape {posemb.shape} holds {tokens} grid tokens, neither the model's {grid} nor a "
                "square grid, and the file states no grid: pass load_weights(..., source_grid=(h, w))."
            )
    try:
        value = resample_position_embedding(
            posemb, grid, source_grid, num_prefix_tokens=num_prefix, method=method, antialias=antialias
        )
    except ValueError as error:
        raise ValueError(f"Cannot resample {key!r} of shape {posemb.shape} to grid {grid}: {error}") from None
    return value, {"source_grid": tuple(source_grid), "grid_assumed": assumed}


def _warn(model, report, layout, path):
    for key_path, why in report.fresh.items():
        if why == "excluded by the caller":
            continue
        warnings.warn(f"{key_path} keeps its fresh initial value: {why}.", stacklevel=3)
    unused = [k for k in report.unused if not k.startswith(layout.ignorable)]
    if unused:
        more = f" (+{len(unused) - 8} more)" if len(unused) > 8 else ""
        warnings.warn(f"Checkpoint keys not used by the model: {', '.join(unused[:8])}{more}.", stacklevel=3)
    spec = getattr(model, "spec", None)
    if spec is None:
        return
    if report.grid_assumed and spec.grid_size[0] != spec.grid_size[1]:
        warnings.warn(
            f"The {report.layout} file states no patch grid: its position embeddings were taken as a "
            f"{report.source_grid} grid for the model's {spec.grid_size}. If the file was trained on another "
            "grid (e.g. the transposed one), pass load_weights(..., source_grid=(h, w)).",
            stacklevel=3,
        )
    expected = {**layout.numerics, **layout.file_numerics(path)}
    differ = {k: v for k, v in expected.items() if spec.option(k) != v}
    if spec.resnet is not None:
        differ.update({f"resnet_{k}": v for k, v in layout.resnet_numerics.items() if getattr(spec.resnet, k) != v})
    if differ:
        options = ", ".join(f"{k}={v!r}" for k, v in differ.items())
        warnings.warn(
            f"This {report.layout} checkpoint was trained with {options}; the model differs, so "
            f"its outputs will differ slightly. Build it with create_model(..., {options}).",
            stacklevel=3,
        )
