"""Running an exported file: one call for SavedModel folders, ``.tflite``, ``.onnx`` and ``.pt2`` files.

Used by the export's own verification, the tests and the benchmark; handy for a quick
check of a file before deploying it. Works on any Keras backend (none is used).

Run as a script, it is the probe verification runs ``.tflite`` and ``.pt2`` files in, each
in a separate process. LiteRT is native code, and a flat buffer it cannot handle may abort
the whole process (seen: ``free(): double free`` while allocating an int8 model) instead
of raising: the export then fails cleanly, the caller's process survives and the temporary
files are removed. A ``.pt2`` must run where Keras is not installed: the probe fails if
loading and running it imported Keras. As a file, not with ``-m``: importing the keras_vit
package would import Keras (seconds, and the very thing a ``.pt2`` must not need).

    python keras_vit/export/runtime.py model.tflite images.npy outputs.npz [threads]
    python keras_vit/export/runtime.py model.pt2 images.npy outputs.npz [threads]
"""

import os
import sys

import numpy as np


def tflite_interpreter(path, num_threads=2):
    """A LiteRT interpreter for ``path`` with the XNNPACK CPU delegate (LiteRT's default).

    >>> import numpy as np, tempfile, keras_vit
    >>> from keras_vit.export import export_model
    >>> model = keras_vit.create_model("vit_ti16", image_size=16, num_classes=3, depth=1)
    >>> path = export_model(model, tempfile.mkdtemp(), "tflite_float16").paths["tflite_float16"]
    >>> runner = tflite_interpreter(path).get_signature_runner("serving_default")
    >>> runner(images=np.zeros((4, 16, 16, 3), np.uint8))["probabilities"].shape
    (4, 3)
    """
    from ai_edge_litert.interpreter import Interpreter

    return Interpreter(model_path=os.fspath(path), num_threads=num_threads)


def load_exported(path, num_threads=2, signature="serving_default"):
    """A function ``images -> {output name: numpy array}`` for an exported file.

    Args:
        path: a SavedModel folder, a ``.tflite``, an ``.onnx`` or a ``.pt2`` file written
            by ``export_model``.
        num_threads: LiteRT / onnxruntime CPU threads (torch's are the process's own:
            ``torch.set_num_threads``).
        signature: the SavedModel signature (``"serving_default"`` takes uint8 images,
            ``"serving_preprocessed"`` float32 images already pre-processed); the other formats have
            only the uint8 one.

    Examples:
        >>> import tempfile, keras_vit
        >>> from keras_vit.export import export_model
        >>> model = keras_vit.create_model("vit_ti16", image_size=16, num_classes=3, depth=1)
        >>> path = export_model(model, tempfile.mkdtemp(), "onnx").paths["onnx"]
        >>> outputs = load_exported(path)(np.zeros((2, 16, 16, 3), np.uint8))
        >>> sorted(outputs), outputs["probabilities"].shape
        (['probabilities', 'top_k_indices', 'top_k_scores'], (2, 3))
    """
    path = os.fspath(path)
    if os.path.isdir(path):
        import tensorflow as tf

        function = tf.saved_model.load(path).signatures[signature]
        dtype = function.structured_input_signature[1]["images"].dtype.as_numpy_dtype

        def predict_savedmodel(images):
            outputs = function(images=tf.constant(np.asarray(images, dtype)))
            return {k: v.numpy() for k, v in outputs.items()}

        return predict_savedmodel
    if signature != "serving_default":
        raise ValueError(f"Only SavedModels have the {signature!r} signature; {path} has serving_default only.")
    if path.endswith(".tflite"):
        runner = tflite_interpreter(path, num_threads).get_signature_runner("serving_default")

        def predict_tflite(images):
            return runner(images=np.asarray(images, np.uint8))

        return predict_tflite
    if path.endswith(".onnx"):
        import onnxruntime

        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = num_threads
        session = onnxruntime.InferenceSession(path, options, providers=["CPUExecutionProvider"])
        names = [o.name for o in session.get_outputs()]

        def predict_onnx(images):
            return dict(zip(names, session.run(names, {"images": np.asarray(images, np.uint8)})))

        return predict_onnx
    if path.endswith(".pt2"):
        import torch

        module = torch.export.load(path).module()

        def predict_pt2(images):
            with torch.no_grad():
                outputs = module(torch.from_numpy(np.asarray(images, np.uint8)))
            return {k: v.cpu().numpy() for k, v in outputs.items()}

        return predict_pt2
    raise ValueError(f"Expected a SavedModel folder, a .tflite, an .onnx or a .pt2 file; got {path}.")


def _probe(argv):
    """The probe: saves the outputs of a batch and of its first image, in one file."""
    path, images_path, outputs_path = argv[1:4]
    num_threads = int(argv[4]) if len(argv) > 4 else 2
    if path.endswith(".pt2"):
        import torch

        torch.set_num_threads(num_threads)
    predict = load_exported(path, num_threads)
    images = np.load(images_path)
    batch = predict(images)
    single = predict(images[:1])  # the same interpreter or module: dynamic batch works
    if path.endswith(".pt2") and "keras" in sys.modules:
        print(f"Running {path} imported Keras; a .pt2 must run without it.", file=sys.stderr)
        return 3
    np.savez(outputs_path, **batch, **{f"single_{k}": v for k, v in single.items()})
    return 0


if __name__ == "__main__":
    sys.exit(_probe(sys.argv))
