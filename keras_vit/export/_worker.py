"""Runs ``convert_model`` in a child process whose Keras backend is TensorFlow.

``export_model`` starts it when the caller's backend is JAX or PyTorch: Keras picks its
backend once per process, and the SavedModel / LiteRT / ONNX converters need TensorFlow
graphs. The parent passes a ``.keras`` file and a JSON job; the child answers in JSON
(an error keeps its type and the layers it names, so the parent can re-raise it).

    KERAS_BACKEND=tensorflow python -m keras_vit.export._worker job.json
"""

import importlib
import json
import os
import sys
import traceback


def run(job):
    import keras
    import numpy as np

    import keras_vit  # noqa: F401  (registers the custom layers)
    from keras_vit.export.convert import convert_model

    if keras.backend.backend() != "tensorflow":
        raise RuntimeError(f"The export worker needs KERAS_BACKEND=tensorflow; got {keras.backend.backend()!r}.")
    for module in job.get("imports", ()):
        importlib.import_module(module)  # the caller's custom layers register on import
    model = keras.saving.load_model(job["model_path"], compile=False)
    representative = None
    if job.get("representative_path"):
        representative = np.load(job["representative_path"])
    convert_model(
        model,
        job["paths"],
        representative_images=representative,
        top_k=job["top_k"],
        normalization=job["normalization"],
        outputs_probabilities=job["outputs_probabilities"],
        opset=job.get("opset"),
        scratch_dir=job.get("scratch_dir"),
    )


def main(argv):
    job_path = argv[1]
    with open(job_path) as f:
        job = json.load(f)
    try:
        run(job)
        answer = {"ok": True}
    except BaseException as error:  # reported to the parent, which re-raises it
        answer = {
            "ok": False,
            "type": type(error).__name__,
            "message": str(error),
            "format": getattr(error, "format", None),
            "layers": list(getattr(error, "layers", []) or []),
            "ops": list(getattr(error, "ops", []) or []),
            "traceback": traceback.format_exc(),
        }
    with open(job["answer_path"], "w") as f:
        json.dump(answer, f)
    return 0 if answer["ok"] else 1


if __name__ == "__main__":
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    sys.exit(main(sys.argv))
