"""From a converter's error message to the model's layers it concerns.

Converters report TensorFlow op paths such as ``vit_1/block_0_1/mlp_1/Gelu/Erfc``: the
name scopes are the Keras layer names, with a ``_<n>`` suffix TensorFlow adds to keep
scopes unique. Mapping them back lets an error say which layer to change.
"""

import re

# TFLite:  fused["Erfinv:", "functional_1/weird_1/erfinv/Erfinv@__inference_..."]
_TFLITE_LOCATION = re.compile(r'fused\["(\w+):", "([^"@]+)@')
# tf2onnx: Tensorflow op [a/b/Erfinv: Erfinv] is not supported
_TF2ONNX_OP = re.compile(r"op \[([^:\]]+): (\w+)\] is not supported")
_KERAS_CALL = re.compile(r"Exception encountered when calling (\w+)\.call\(\)")
_CUSTOM_OPS = re.compile(r"(?:Custom|Flex) ops: ([\w, ]+)")


def _layer_names(model):
    names = {}
    for layer in model._flatten_layers(include_self=False, recursive=True):
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
