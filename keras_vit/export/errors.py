"""The errors an export raises, and which of the model's layers a converter error concerns.

The types let callers tell bad input (``ValueError``, ``InvalidModelFileError``,
``FileExistsError``; nothing was done) from a failed conversion (``ExportError``; nothing
was left behind). Converters report TensorFlow op paths such as
``vit_1/block_0_1/mlp_1/fc1_1/Gelu/Erfc``: the name scopes are the Keras layer names, with a
``_<n>`` suffix TensorFlow adds to keep scopes unique. Mapping them back lets an
``UnconvertibleModelError`` say which layer to change.
"""

import re

from keras_vit.internals import sublayers
from keras_vit.sources import InvalidModelFileError  # noqa: F401  (an export error too)


class ExportError(RuntimeError):
    """An export that was started could not be completed; nothing was left behind."""


class UnconvertibleModelError(ExportError):
    """A format's converter cannot express some of the model's operations.

    Attributes:
        format: the export format that failed (e.g. ``"tflite_int8"``).
        layers: names of the model's layers whose operations could not be converted
            (empty when the converter's message names none).
        ops: the unsupported operation types the converter reported.
    """

    def __init__(self, message, format=None, layers=(), ops=()):
        super().__init__(message)
        self.format = format
        self.layers = list(layers)
        self.ops = list(ops)


class VerificationError(ExportError):
    """An exported file was written but does not reproduce the Keras model's outputs.

    Attributes:
        format: the export format whose check failed.
        details: the measured numbers (e.g. ``{"max_abs_diff": 0.3, "tolerance": 1e-4}``).
    """

    def __init__(self, message, format=None, details=None):
        super().__init__(message)
        self.format = format
        self.details = dict(details or {})


def unconvertible(format, model, explain, message="", op_paths=()):
    """An ``UnconvertibleModelError`` naming the layers and ops a converter failure concerns.

    Args:
        format: the export format that failed.
        model: the Keras model that was being converted.
        explain: ``explain(what, ops) -> str`` writes the error message; ``what`` is
            ``"layers a, b"``, or ``"the model"`` when no layer could be named.
        message, op_paths: the converter's message and/or ``(op path, op type)`` pairs
            (see ``unsupported_ops``).
    """
    layers, ops = unsupported_ops(message, model, op_paths)
    what = f"layers {', '.join(layers)}" if layers else "the model"
    return UnconvertibleModelError(explain(what, ops), format=format, layers=layers, ops=ops)


# TFLite:  fused["Erfinv:", "functional_1/weird_1/erfinv/Erfinv@__inference_..."]
_TFLITE_LOCATION = re.compile(r'fused\["(\w+):", "([^"@]+)@')
# tf2onnx: Tensorflow op [a/b/Erfinv: Erfinv] is not supported
_TF2ONNX_OP = re.compile(r"op \[([^:\]]+): (\w+)\] is not supported")
_KERAS_CALL = re.compile(r"Exception encountered when calling (\w+)\.call\(\)")
_CUSTOM_OPS = re.compile(r"(?:Custom|Flex) ops: ([\w, ]+)")


def _layer_names(model):
    names = {}
    for layer in sublayers(model):
        names.setdefault(layer.name, layer)
    return names


def layers_on_path(op_path, model):
    """The model's layer names along one op path, outermost first, e.g. ``["block_0", "mlp"]``."""
    names = _layer_names(model)
    found = []
    for part in op_path.split("/"):
        for candidate in (part, re.sub(r"_\d+$", "", part)):
            if candidate in names and candidate != model.name:
                found.append(candidate)
                break
    return found


def unsupported_ops(message, model, op_paths=()):
    """``(layers, ops)`` named by a converter message and/or explicit ``(path, op)`` pairs.

    ``layers`` are ``/``-joined layer paths (``"block_0/mlp"``), ``ops`` op types; both
    sorted and unique.

    >>> import keras
    >>> inputs = keras.Input((4,))
    >>> model = keras.Model(inputs, keras.layers.Dense(2, name="head")(inputs), name="m")
    >>> unsupported_ops('fused["Erfinv:", "m_1/head_1/Erfinv@__inference_f_1"]', model)
    (['head'], ['Erfinv'])
    """
    pairs = [(path, op) for op, path in _TFLITE_LOCATION.findall(message)]
    pairs += _TF2ONNX_OP.findall(message)
    pairs += list(op_paths)
    layers, ops = set(), set()
    for path, op in pairs:
        ops.add(op)
        on_path = layers_on_path(path, model)
        if on_path:
            layers.add("/".join(on_path))
    for match in _CUSTOM_OPS.findall(message):
        ops.update(o.strip() for o in match.split(",") if o.strip())
    names = _layer_names(model)
    for class_name in _KERAS_CALL.findall(message):
        layers.update(n for n, layer in names.items() if type(layer).__name__ == class_name)
    # A layer is reported once, at its innermost path (drop prefixes of longer paths).
    layers = {p for p in layers if not any(q != p and q.startswith(p + "/") for q in layers)}
    return sorted(layers), sorted(ops)
