"""Writing every requested format from one Keras model, each on the backend that writes it.

The SavedModel / LiteRT / ONNX converters need TensorFlow graphs, the ``torch_export``
format a PyTorch one (``ExportFormat.backend``), and Keras picks its backend once per
process. ``convert_model`` writes the formats of the caller's backend in its process; for
the others, ``convert_in_process`` passes a ``.keras`` file and a JSON job to a child
process with that ``KERAS_BACKEND`` (this module's ``main``), which answers in JSON: an
error keeps its type and the layers it names, so the parent re-raises it.

    KERAS_BACKEND=tensorflow python -m keras_vit.export.convert job.json

(Nothing in the package imports this module at import time, so that ``-m`` runs it once.)
"""

import importlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import traceback

from keras_vit import atomic
from keras_vit.export.errors import ExportError, InvalidModelFileError, UnconvertibleModelError, VerificationError
from keras_vit.export.formats import FORMATS
from keras_vit.held_signals import held_signals

_SCRATCH = "export_scratch"


def scratch_path(folder):
    """The target whose staged paths (``atomic.temp_path_beside``) are the scratch folders
    ``convert_model`` makes in ``folder``: what ``atomic.remove_leftovers`` looks for."""
    return os.path.join(folder, _SCRATCH)


def convert_model(
    model,
    paths,
    *,
    representative_images=None,
    top_k=5,
    normalization="vit",
    outputs_probabilities=False,
    opset=None,
    scratch_dir=None,
):
    """Writes ``model`` in each format of ``paths`` (``{format name: path}``).

    The paths are written as given, without verification or renaming: ``export_model`` is
    the safe entry point and calls this with temporary paths. Every format must be one the
    current backend writes (``ExportFormat.backend``): ``torch_export`` on PyTorch
    (``torch_program.write_pt2``), the others on TensorFlow.

    LiteRT and ONNX are converted from the SavedModel's ``serving_default`` (uint8 images
    -> probabilities and top-k): the exported one if ``"savedmodel"`` is asked for, else one
    written in a hidden scratch folder beside the first path and always removed
    (``scratch_dir``: where to make it instead).

    Example (TensorFlow backend):
    >>> import keras, os, tempfile, keras_vit
    >>> if keras.backend.backend() == "tensorflow":
    ...     model = keras_vit.create_model("vit_ti16", image_size=16, num_classes=3, depth=1)
    ...     out = tempfile.mkdtemp()
    ...     _ = convert_model(model, {"tflite_float32": os.path.join(out, "m.tflite")})
    """
    import keras

    for name in paths:
        if name not in FORMATS:
            raise ValueError(f"Unknown export format {name!r}; known: {', '.join(FORMATS)}.")
        if FORMATS[name].backend != keras.backend.backend():
            raise RuntimeError(
                f"The {name} format is written on the {FORMATS[name].backend} backend (KERAS_BACKEND="
                f"{FORMATS[name].backend}); got {keras.backend.backend()!r}. Use keras_vit.export.export_model, "
                "which converts in a child process with that backend."
            )
    options = dict(top_k=top_k, normalization=normalization, outputs_probabilities=outputs_probabilities)
    if keras.backend.backend() == "torch":
        from keras_vit.export.torch_program import write_pt2

        for name in paths:
            write_pt2(model, paths[name], **options)
        return dict(paths)

    from keras_vit.export import litert
    from keras_vit.export import onnx as onnx_export
    from keras_vit.export.serving import write_savedmodel

    others = [name for name in paths if name != "savedmodel"]
    scratch = None
    try:
        if "savedmodel" in paths:
            source = write_savedmodel(model, paths["savedmodel"], **options)
        else:
            parent = scratch_dir or os.path.dirname(os.path.abspath(paths[others[0]]))
            scratch = atomic.scratch_folder(parent, _SCRATCH)  # named as staged files are
            source = write_savedmodel(model, os.path.join(scratch, "source"), **options)
        # LiteRT and ONNX are converted from the SavedModel's serving_default, so every
        # format has the same inputs, outputs and pre-processing.
        for name in others:
            spec = FORMATS[name]
            if spec.kind == "tflite":
                litert.write_tflite(model, source, paths[name], spec.quantization, representative_images)
            else:
                onnx_export.write_onnx(model, source, paths[name], opset or onnx_export.DEFAULT_OPSET)
    finally:
        if scratch:
            shutil.rmtree(scratch, ignore_errors=True)
    return dict(paths)


# The errors the child process reports by name and the parent raises again as such.
_ERRORS = {
    cls.__name__: cls
    for cls in (
        ExportError,
        UnconvertibleModelError,
        VerificationError,
        InvalidModelFileError,
        ValueError,
        FileExistsError,
        FileNotFoundError,
        TypeError,
        RuntimeError,
    )
}


def convert_in_process(
    backend, model, model_path, paths, imports=(), verbose=False, *, representative_images=None, **options
):
    """``convert_model`` in a child process with ``KERAS_BACKEND=backend``.

    Args:
        backend: the Keras backend that writes the formats of ``paths``.
        model: the Keras model, saved to a temporary ``.keras`` file for the child unless
            ``model_path`` (a ``.keras`` file of exactly this model) is given.
        paths: ``{format name: path}`` to write.
        imports: modules defining custom layers, imported by the child before loading.
        verbose: show the child's output (else kept, and quoted should it die).
        representative_images, **options: as for ``convert_model``.
    """
    import numpy as np

    with tempfile.TemporaryDirectory(prefix="keras_vit_export_job-") as job_dir:
        if model_path is None:
            model_path = os.path.join(job_dir, "model.keras")
            model.save(model_path)
        job = {
            "backend": backend,
            "model_path": os.path.abspath(model_path),
            "paths": paths,
            "representative_path": None,
            "options": dict(options, scratch_dir=job_dir),
            "imports": list(imports),
            "answer_path": os.path.join(job_dir, "answer.json"),
        }
        if representative_images is not None:
            job["representative_path"] = os.path.join(job_dir, "representative.npy")
            np.save(job["representative_path"], representative_images)
        job_path = os.path.join(job_dir, "job.json")
        with open(job_path, "w") as f:
            json.dump(job, f)
        env = dict(os.environ, KERAS_BACKEND=backend)
        env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
        # The child imports what this process can (keras_vit from a checkout, the modules
        # named in `imports`), whether or not they are installed.
        env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
        # Its temporary files (TensorFlow's traced functions among them) in the job's folder:
        # a child killed on a stop leaves none behind.
        env["TMPDIR"] = os.path.join(job_dir, "tmp")
        os.mkdir(env["TMPDIR"])
        log_path = os.path.join(job_dir, "worker.log")
        with open(log_path, "w") as log:
            child = None
            try:
                with held_signals():  # a stop inside Popen would lose the child's handle
                    child = subprocess.Popen(
                        [sys.executable, "-m", "keras_vit.export.convert", job_path],
                        env=env,
                        stdout=None if verbose else log,
                        stderr=None if verbose else subprocess.STDOUT,
                    )
                child.wait()
            except BaseException:  # Ctrl-C, SIGTERM (keras_vit.commands.interrupts): the child goes first,
                if child is not None:  # so that it writes nothing after the staged files are removed
                    child.kill()
                    child.wait()
                raise
        answer = None
        if os.path.exists(job["answer_path"]):
            with open(job["answer_path"]) as f:
                answer = json.load(f)
        if answer and answer["ok"]:
            return
        with open(log_path) as f:
            log_tail = f.read()[-3000:]
    if answer is None:
        raise ExportError(f"The {backend} export process died without an answer. Its output:\n{log_tail}")
    cls = _ERRORS.get(answer["type"], ExportError)
    message = answer["message"] if cls is not ExportError else f"{answer['type']}: {answer['message']}"
    if issubclass(cls, UnconvertibleModelError):
        raise cls(message, format=answer["format"], layers=answer["layers"], ops=answer["ops"])
    if cls is ExportError:
        message += f"\n(in the {backend} export process)\n{answer['traceback'][-2000:]}"
    raise cls(message)


def _run_job(job):
    import keras
    import numpy as np

    from keras_vit.factory import load_model

    if keras.backend.backend() != job["backend"]:
        raise RuntimeError(f"The export process needs KERAS_BACKEND={job['backend']}; got {keras.backend.backend()!r}.")
    for module in job["imports"]:
        importlib.import_module(module)  # the caller's custom layers register on import
    model = load_model(job["model_path"])
    representative = None if job["representative_path"] is None else np.load(job["representative_path"])
    convert_model(model, job["paths"], representative_images=representative, **job["options"])


def main(argv):
    """The child process: runs the job in ``argv[1]`` and writes its answer."""
    with open(argv[1]) as f:
        job = json.load(f)
    try:
        _run_job(job)
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
    sys.exit(main(sys.argv))
