"""ONNX through tf2onnx from the exported SavedModel (TensorFlow backend only).

Why this path (each alternative was tried with Keras 3.15):

- ``model.export(format="onnx")`` on TensorFlow runs tf2onnx on the Keras function, and
  tf2onnx has no handler for ``Erfc``, which ``tf.nn.gelu(approximate=False)`` (the exact
  GELU of timm/HF-compatible models) is written with: it logs an error and writes a file
  that onnxruntime cannot load. Here a small handler writes ``erfc(x) = 1 - erf(x)``.
- On JAX it goes through jax2onnx (a large extra dependency tree: flax, orbax, ...) and
  only after the model has been called once.
- On PyTorch it traces ``torch.onnx.export``, which with a dynamic batch dimension fails
  in Keras' LayerNormalization; a static batch of 1 is not what a server wants.

Converting the SavedModel's ``serving_default`` gives one graph, raw uint8 ``images`` in,
``probabilities``, ``top_k_scores`` and ``top_k_indices`` out, with a dynamic ``batch``
dimension, whatever backend trained the model.
"""

import logging

import numpy as np

from keras_vit.dependencies import require
from keras_vit.export.errors import unconvertible

DEFAULT_OPSET = 17


def _erfc_handler(ctx, node, name, args):
    # ONNX has Erf but no Erfc. Rewrite in place: the node becomes Erf and a Sub(1, erf)
    # takes over its consumers. 1 - erf(x) loses relative precision only where erfc is
    # tiny, where GELU multiplies it by x/2 and the absolute error stays below 1e-7.
    from tf2onnx import utils

    dtype = ctx.get_dtype(node.output[0])
    node.type = "Erf"
    one = ctx.make_const(utils.make_name(f"{name}_one"), np.array(1, dtype=utils.map_onnx_to_numpy_type(dtype)))
    ctx.insert_new_node_on_output(
        "Sub", node.output[0], name=utils.make_name(f"{name}_erfc"), inputs=[one.output[0], node.output[0]]
    )


CUSTOM_HANDLERS = {"Erfc": (_erfc_handler, [])}


def convert_onnx(saved_model_dir, opset=DEFAULT_OPSET):
    """Converts a SavedModel's ``serving_default`` to an ``onnx.ModelProto``.

    Returns ``(model_proto, unsupported)``, ``unsupported`` being the ``(op path, op type)``
    pairs tf2onnx could not map (it writes them as invalid nodes instead of failing).

    Example (TensorFlow backend; exact GELU, i.e. the ``Erfc`` case):
    >>> import keras, os, tempfile, keras_vit
    >>> from keras_vit.export.serving import write_savedmodel
    >>> if keras.backend.backend() == "tensorflow":
    ...     model = keras_vit.create_model("vit_ti16", image_size=16, num_classes=3, depth=1,
    ...                                    gelu_approximate=False)
    ...     source = write_savedmodel(model, os.path.join(tempfile.mkdtemp(), "sm"))
    ...     proto, unsupported = convert_onnx(source)
    ...     assert unsupported == [] and "Erf" in {n.op_type for n in proto.graph.node}
    """
    onnx = require("onnx", "export")
    tf = require("tensorflow", "export")
    tf2onnx = require("tf2onnx", "export")

    loaded = tf.saved_model.load(saved_model_dir)
    signature = loaded.signatures["serving_default"]
    (spec,) = signature.structured_input_signature[1].values()
    function = tf.function(lambda images: signature(images=images))
    logger = logging.getLogger("tf2onnx")
    level = logger.level
    logger.setLevel(logging.CRITICAL)  # its per-op chatter; unsupported ops are checked below
    try:
        proto, _ = tf2onnx.convert.from_function(
            function,
            input_signature=[tf.TensorSpec(spec.shape, spec.dtype, name="images")],
            opset=opset,
            custom_op_handlers=CUSTOM_HANDLERS,
        )
    finally:
        logger.setLevel(level)
    unsupported = [(n.name, n.op_type) for n in proto.graph.node if not onnx.defs.has(n.op_type, n.domain)]
    # Name the dynamic dimension, so that tools show "batch" instead of "unk__123".
    for value in list(proto.graph.input) + list(proto.graph.output):
        dims = value.type.tensor_type.shape.dim
        if dims and not dims[0].HasField("dim_value"):
            dims[0].dim_param = "batch"
    return proto, unsupported


def write_onnx(model, saved_model_dir, path, opset=DEFAULT_OPSET):
    """Converts (see ``convert_onnx``), refuses unsupported ops, and writes ``path``.

    ``model`` is the Keras model the SavedModel was made from, used to name the layers in
    an ``UnconvertibleModelError``.
    """
    proto, unsupported = convert_onnx(saved_model_dir, opset)
    if unsupported:
        raise unconvertible(
            "onnx",
            model,
            lambda what, ops: f"onnx: tf2onnx cannot convert {what} (unsupported ops: {', '.join(ops)}).",
            op_paths=unsupported,
        )
    onnx = require("onnx", "export")

    onnx.save(proto, path)
    return path
