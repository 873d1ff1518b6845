"""``export_model``: a Keras model (or model file) in, verified deployable files out."""

import dataclasses
import importlib
import os

import numpy as np

from keras_vit import atomic, dependencies, factory
from keras_vit.export import representative as rep
from keras_vit.export.errors import InvalidModelFileError
from keras_vit.export.formats import FORMATS, parse_formats
from keras_vit.export.verify import TOLERANCES, softmax, verify_export

# Beside the exports when the model has class names: one per line, in the order of the
# probabilities, so that a client maps top_k_indices back to names.
LABELS_FILENAME = "labels.txt"
# export_model's normalization default: the model's own pre-processing, else "vit".
AUTO = "auto"


@dataclasses.dataclass
class ExportResult:
    """What ``export_model`` wrote.

    Attributes:
        paths: ``{format name: path}`` of every file or folder written.
        checks: ``{format name: measured numbers}`` from the verification against the
            Keras model (``max_abs_diff``, ``top1_agreement``, ...).
        outputs_probabilities: whether the model itself ends in a softmax.
        labels: the path of ``labels.txt`` (the model's class names, one a line, in the
            order of the probabilities), or None for a model without class names.
    """

    paths: dict
    checks: dict
    outputs_probabilities: bool = False
    labels: str | None = None

    def summary(self):
        """One line per format: name, size, and the verification numbers."""
        lines = []
        for name, path in self.paths.items():
            check = self.checks.get(name, {})
            numbers = ", ".join(
                f"{k}={check[k]:.2g}" for k in ("max_abs_diff", "mean_abs_diff", "top1_agreement") if k in check
            )
            lines.append(f"{name:<20} {_size(path) / 1e6:8.2f} MB  {path}  ({numbers})")
        if self.labels:
            lines.append(f"{'labels':<20} {_size(self.labels) / 1e6:8.2f} MB  {self.labels}")
        return "\n".join(lines)


def export_model(
    model,
    output,
    formats=None,
    *,
    overwrite=False,
    representative_data=None,
    num_representative=rep.DEFAULT_NUM_REPRESENTATIVE,
    verification_images=None,
    top_k=5,
    normalization=AUTO,
    model_name=None,
    image_size=None,
    num_classes=None,
    model_kwargs=None,
    imports=(),
    tolerances=None,
    opset=None,
    verbose=False,
):
    """Exports a classifier as SavedModel, LiteRT, ONNX and/or ``torch.export`` files, each verified.

    Every export takes raw ``uint8`` images ``(batch, H, W, C)`` (any batch size, the
    model's image size) and does the model's pre-processing inside: its own
    ``model.preprocessing`` (resize, crop, normalise) when it has one, else
    ``normalization``. It returns ``probabilities`` (the model's own where it outputs them,
    a softmax or a sigmoid per class; else a softmax of its logits), and the SavedModel also
    ``top_k_scores`` / ``top_k_indices``, a ``serving_bytes`` signature for encoded
    images of any size (``top_k_names`` too) and a ``serving_preprocessed`` one for
    float32 images already in the model's range. A model with ``class_names`` gets them
    written beside the exports as ``labels.txt``, one a line in index order.

    Each file is written at a hidden temporary path beside its target, reloaded and
    compared with the Keras model on a few images, and moved into place only if every
    requested format passed; on any failure (Ctrl-C included) nothing is left behind, and
    what an export killed outright left in ``output`` (hidden ``.tmp-`` files) is removed
    by the next.

    Works on every backend: the SavedModel, LiteRT and ONNX converters need TensorFlow
    graphs and ``torch_export`` a PyTorch one, so a format the current backend cannot write
    is converted by a child process with ``KERAS_BACKEND=tensorflow`` (or ``torch``), from
    the model saved to a temporary ``.keras`` file; verification still runs here, against
    the caller's own model. The ``.pt2`` file is verified in a process that never imports
    Keras, as a deployment runs it: ``torch.export.load(path).module()(images)``.

    Args:
        model: a Keras model (a classifier with one image input), or what
            ``keras_vit.load_model`` loads: the path of a ``.keras`` file or of a checkpoint
            ``keras_vit.load_weights`` reads (then give ``model_name``), a preset's name, a
            local preset folder (``keras_vit.save_preset``), a timm model by hub name or folder.
        output: the folder to write into; created if missing. Files inside are named after
            the formats (``savedmodel/``, ``model_float32.tflite``, ``model.onnx``, ...).
        formats: names (list, or a comma-separated string; ``"all"``), see ``FORMATS``;
            default all but ``tflite_int8`` unless ``representative_data`` is given.
        overwrite: replace existing exports (never done otherwise).
        representative_data: ``"digits"`` (the embedded training split), a folder of
            images (its subfolders too; resized to the model's size) or uint8 images;
            calibrates ``tflite_int8`` and supplies the verification images.
        num_representative: how many images calibrate ``tflite_int8``.
        verification_images: uint8 images to verify on (default: from
            ``representative_data``'s source, else seeded noise).
        top_k: length of the SavedModel's top-k outputs.
        normalization: ``"auto"``: the model's own ``model.preprocessing``, else ``"vit"``
            (``x / 127.5 - 1``). A name of ``keras_vit.data.NORMALIZATIONS`` (``"vit"``,
            ``"imagenet"``, None for raw 0..255) is the pre-processing of a model without its
            own; for a model with its own it must agree with that layer's mean and std
            (a ValueError otherwise: the model's own is what it was evaluated with).
        model_name, image_size, num_classes, model_kwargs: how to build the model from a
            file (see ``keras_vit.load_model``).
        imports: modules defining custom layers, imported before loading (also in the
            TensorFlow child process).
        tolerances: ``{format: {...}}`` overriding ``verify.TOLERANCES``.
        opset: ONNX opset (default 17).
        verbose: show the converters' output.

    Returns:
        An ``ExportResult``.

    Raises (before any work where possible):
        ValueError: unknown format (the message lists the known ones), missing
            representative data for ``tflite_int8``, a model that is not an image classifier,
            a ``normalization`` that contradicts the model's own pre-processing.
        FileExistsError: a target (``labels.txt`` included) exists and ``overwrite`` is False.
        keras_vit.atomic.UnwritableOutputError: ``output`` is not a folder this process can
            write in or create (a ``ValueError``).
        InvalidModelFileError: ``model`` is a path to something that is not a model file.
        UnconvertibleModelError: a format cannot express some layers (``.layers`` names them).
        VerificationError: an export does not reproduce the model.

    Examples:
        >>> import tempfile, keras_vit
        >>> from keras_vit.export import export_model
        >>> model = keras_vit.create_model("vit_ti16", image_size=16, num_classes=3, depth=1)
        >>> result = export_model(model, tempfile.mkdtemp(), formats="tflite_float32")
        >>> sorted(result.paths)
        ['tflite_float32']
    """
    import keras

    # 1. Everything that can be checked without the model.
    for module in imports:
        importlib.import_module(module)
    if formats is None:
        formats = [f for f in FORMATS if representative_data is not None or not FORMATS[f].needs_representative_data]
    names = parse_formats(formats)
    for name in names:  # before any work: a child process would fail later, less clearly
        extra, modules = FORMATS[name].needs
        dependencies.check_installed(modules, extra)
    output = os.path.abspath(os.fspath(output))
    atomic.check_writable(output, "output")  # a folder that cannot be made, a file in the way
    targets = {name: os.path.join(output, FORMATS[name].filename) for name in names}
    from keras_vit.export import convert  # not at import time: see its docstring

    # What a killed export left in this folder: its staged files, labels and scratch folder.
    atomic.remove_leftovers([*targets.values(), os.path.join(output, LABELS_FILENAME), convert.scratch_path(output)])
    atomic.check_targets(targets.values(), overwrite)
    representative_data = rep.check_source(representative_data)
    needs_data = [n for n in names if FORMATS[n].needs_representative_data]
    if needs_data and representative_data is None:
        raise ValueError(
            f"{', '.join(needs_data)} needs representative data to calibrate on: "
            f"representative_data='digits' (--representative-data digits), a folder of a few hundred "
            "training images (--representative-data photos/) or a uint8 array of them; got none."
        )
    from keras_vit.data.preprocessing import check_normalization

    if normalization != AUTO:
        check_normalization(normalization)
    if int(top_k) < 0:
        raise ValueError(f"Expected top_k >= 0; got {top_k}.")
    unknown = set(tolerances or {}) - set(FORMATS)
    if unknown:
        raise ValueError(f"tolerances has unknown formats {sorted(unknown)}; known: {', '.join(FORMATS)}.")
    model_path = None
    if isinstance(model, (str, os.PathLike)):
        source = factory.resolve(model, model_name=model_name, loading=True)
        model = factory.build(source, image_size, num_classes, strict=True, **(model_kwargs or {}))
        if source.kind == factory.KERAS_FILE and image_size is None:
            model_path = source.weights.path  # the child converts from the file itself
    elif not isinstance(model, keras.Model):
        raise InvalidModelFileError(f"Expected a keras.Model or a model file path; got {type(model).__name__}.")

    # 2. The model: an image classifier; its reference outputs on the verification images,
    # pre-processed here by the layer the exports will run.
    from keras_vit.export.serving import image_spec, serving_preprocessing

    image_shape = image_spec(model)
    normalization = _resolve_normalization(model, normalization)
    labels, labels_path = _labels(model), os.path.join(output, LABELS_FILENAME)
    if labels is not None and not _holds(labels_path, labels):
        # Written with the exports (refused if another one is there, unless overwrite); the
        # same file already there stays, so formats can be added to a folder one by one.
        targets["labels"] = labels_path
    calibration = rep.representative_images(representative_data, image_shape, num_representative)
    check_images = rep.verification_images(
        verification_images if verification_images is not None else representative_data, image_shape
    )
    preprocessed = keras.ops.convert_to_numpy(serving_preprocessing(model, normalization)(check_images))
    if keras.backend.backend() == "tensorflow":
        # Eager TF is fast for one batch, and tracing a predict function per exported
        # model would only add time (and retracing warnings in loops over models).
        scores = model(preprocessed, training=False)
    else:
        # The compiled inference path: on JAX one jitted call instead of op-by-op dispatch
        # that compiles every op for a new batch shape; on PyTorch, without autograd.
        scores = model.predict_on_batch(preprocessed)
    scores = keras.ops.convert_to_numpy(scores).astype(np.float32)
    outputs_probabilities = _outputs_probabilities(model, scores)
    reference = scores if outputs_probabilities else softmax(scores)

    # 3. Convert into temporary paths, verify every file, then move them all into place.
    options = dict(
        representative_images=calibration,
        top_k=int(top_k),
        normalization=normalization,
        outputs_probabilities=outputs_probabilities,
        opset=opset,
    )
    checks = {}
    with atomic.StagedWrites(targets, overwrite) as staging:
        by_backend = {}  # each format is written on its own backend: here, or in a child process
        for name in names:
            by_backend.setdefault(FORMATS[name].backend, {})[name] = staging.paths[name]
        for backend, exports in by_backend.items():
            if keras.backend.backend() == backend:
                convert.convert_model(model, exports, **options)
            else:
                convert.convert_in_process(backend, model, model_path, exports, imports, verbose, **options)
        if "labels" in targets:
            with open(staging.paths["labels"], "w", encoding="utf-8") as f:
                f.write(labels)
        for name in names:
            tolerance = (tolerances or {}).get(name, TOLERANCES[name])
            checks[name] = verify_export(
                name, staging.paths[name], check_images, reference, tolerance, preprocessed_images=preprocessed
            )
        staging.commit()
    paths = {name: targets[name] for name in names}
    return ExportResult(paths, checks, outputs_probabilities, labels=labels_path if labels is not None else None)


def _resolve_normalization(model, normalization):
    """``normalization`` for ``serving_preprocessing``: ``"auto"`` resolved, a contradiction refused."""
    own = getattr(model, "preprocessing", None)
    if normalization == AUTO:
        return "vit"  # used only when the model has no pre-processing of its own
    if own is not None:
        from keras_vit.layers.preprocessing import ImagePreprocessing

        named = ImagePreprocessing.from_normalization(normalization, own.image_size)
        if not (np.allclose(own.mean, named.mean) and np.allclose(own.std, named.std)):
            raise ValueError(
                f"The model has its own pre-processing (mean={own.mean}, std={own.std}), which the exports "
                f"apply; normalization={normalization!r} (mean={named.mean}, std={named.std}) contradicts it. "
                f"Leave normalization out (normalization='auto') to export the model as it was evaluated."
            )
    return normalization


def _labels(model):
    """The text of ``labels.txt`` for the model's class names (one a line), or None."""
    names = getattr(model, "class_names", None)
    if names is None:
        return None
    names = [str(name) for name in names]
    bad = [name for name in names if "\n" in name or "\r" in name]
    if bad:
        raise ValueError(f"Expected class names without line breaks (one a line in {LABELS_FILENAME}); got {bad[:3]}.")
    return "".join(f"{name}\n" for name in names)


def _holds(path, text):
    try:
        with open(path, encoding="utf-8", newline="") as f:
            return f.read() == text
    except (OSError, UnicodeDecodeError):
        return False


def _outputs_probabilities(model, scores):
    """Whether the model outputs probabilities (serve them as they are) or logits (add a softmax)."""
    from keras_vit.models.vit import VisionTransformer

    if isinstance(model, VisionTransformer):
        return model.spec.outputs_probabilities
    # Any other model: judged by its outputs.
    return bool(np.all(scores >= 0) and np.allclose(scores.sum(-1), 1.0, atol=1e-4))


def _size(path):
    if os.path.isdir(path):
        return sum(os.path.getsize(os.path.join(d, f)) for d, _, files in os.walk(path) for f in files)
    return os.path.getsize(path)
