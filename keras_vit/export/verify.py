"""Reload an exported file and compare it with the Keras model it came from.

An export is moved into place only if this passes. Float formats must reproduce the
model's probabilities; quantised ones must stay close on average and keep its decisions.
"""

import os

import numpy as np

from keras_vit.export.errors import VerificationError

# On probabilities (softmax outputs, in [0, 1]).
# - float32 graphs differ from Keras only by kernel order of summation: ~1e-7 measured.
# - float16 stores weights with an 11-bit significand (relative error <= 2**-11 ~ 4.9e-4)
#   and computes in float32 on CPU: logits of +-15 move by up to ~1e-2, probabilities by
#   up to ~p(1-p) times twice that; measured at most 4.7e-3 on the test models, so 2e-2.
# - int8 variants change individual probabilities by a few percent; what must hold is
#   that they agree on average and keep the model's clear decisions.
# - torch_export runs the ATen ops the torch backend runs eagerly: equal on torch, ~1e-7
#   from another backend's Keras model; its bound is the 1e-5.
TOLERANCES = {
    "savedmodel": {"max_abs_diff": 1e-4},
    "tflite_float32": {"max_abs_diff": 1e-4},
    "tflite_float16": {"max_abs_diff": 2e-2},
    "tflite_dynamic_int8": {"mean_abs_diff": 0.08, "min_top1_agreement": 0.9},
    "tflite_int8": {"mean_abs_diff": 0.08, "min_top1_agreement": 0.9},
    "onnx": {"max_abs_diff": 1e-4},
    "torch_export": {"max_abs_diff": 1e-5},
}
# Top-1 agreement is only asked of images the model itself decides clearly (top
# probability ahead of the second by this much); on near-ties, and on untrained models
# whose outputs are near uniform, quantisation may flip the order without being wrong.
DECISIVE_MARGIN = 0.2


def softmax(scores):
    """Row-wise softmax in float64, returned as float32 (a reference, not a kernel)."""
    scores = np.asarray(scores, np.float64)
    e = np.exp(scores - scores.max(axis=-1, keepdims=True))
    return (e / e.sum(axis=-1, keepdims=True)).astype(np.float32)


def compare_probabilities(probabilities, reference, tolerance):
    """The numbers ``tolerance`` bounds, and whether they pass: ``(details, ok)``.

    >>> ref = np.array([[0.9, 0.1], [0.2, 0.8]], np.float32)
    >>> details, ok = compare_probabilities(ref + 1e-6, ref, {"max_abs_diff": 1e-4})
    >>> ok, details["top1_agreement"]
    (True, 1.0)
    """
    probabilities = np.asarray(probabilities, np.float32)
    reference = np.asarray(reference, np.float32)
    if probabilities.shape != reference.shape:
        return {"shape": probabilities.shape, "expected_shape": reference.shape}, False
    diff = np.abs(probabilities - reference)
    top2 = np.sort(reference, axis=-1)[:, -2:] if reference.shape[-1] > 1 else np.zeros((len(reference), 2))
    decisive = (top2[:, 1] - top2[:, 0]) >= DECISIVE_MARGIN
    agree = probabilities.argmax(-1) == reference.argmax(-1)
    details = {
        "max_abs_diff": float(diff.max()) if np.isfinite(diff).all() else float("inf"),
        "mean_abs_diff": float(diff.mean()) if np.isfinite(diff).all() else float("inf"),
        "top1_agreement": float(agree.mean()),
        "decisive_images": int(decisive.sum()),
        "decisive_top1_agreement": float(agree[decisive].mean()) if decisive.any() else None,
    }
    ok = True
    for key in ("max_abs_diff", "mean_abs_diff"):
        if key in tolerance:
            ok &= details[key] <= tolerance[key]
    if "min_top1_agreement" in tolerance and decisive.any():
        ok &= details["decisive_top1_agreement"] >= tolerance["min_top1_agreement"]
    return details, bool(ok)


def verify_export(format, path, images, reference, tolerance=None, preprocessed_images=None, num_threads=2):
    """Reloads ``path`` and checks it against ``reference`` probabilities of ``images``.

    Checks a single image and the whole batch on the same file (the batch is dynamic),
    that ``top_k_*`` are the largest probabilities, and for a SavedModel also the
    ``serving_preprocessed`` signature (given ``preprocessed_images``). LiteRT and ``.pt2``
    files run in a child process (see ``runtime``): a runtime abort fails the check, not
    the caller, and a ``.pt2`` is shown to run where Keras was never imported.

    Returns the measured numbers; raises ``VerificationError`` if they are out of bounds.
    """
    from keras_vit.export.runtime import load_exported

    tolerance = dict(TOLERANCES[format] if tolerance is None else tolerance)
    images = np.asarray(images)
    reference = np.asarray(reference, np.float32)
    try:
        if str(path).endswith((".tflite", ".pt2")):
            outputs, single = _run_isolated(format, path, images, num_threads)
        else:
            predict = load_exported(path, num_threads=num_threads)
            outputs = predict(images)
            single = predict(images[:1])["probabilities"]
    except VerificationError:
        raise
    except Exception as error:
        raise VerificationError(f"{format}: {path} could not be reloaded and run: {error}", format=format) from error
    details, ok = compare_probabilities(outputs["probabilities"], reference, tolerance)
    single_details, single_ok = compare_probabilities(single, reference[:1], tolerance)
    details["batch_1_max_abs_diff"] = single_details.get("max_abs_diff")
    ok &= single_ok
    ok &= _check_top_k(outputs, details)
    if format == "savedmodel" and preprocessed_images is not None:
        pre = load_exported(path, signature="serving_preprocessed")(preprocessed_images)
        pre_details, pre_ok = compare_probabilities(pre["probabilities"], reference, tolerance)
        details["preprocessed_max_abs_diff"] = pre_details.get("max_abs_diff")
        ok &= pre_ok
    if not ok:
        raise VerificationError(
            f"{format}: {path} does not reproduce the Keras model on {len(images)} images: "
            f"measured {_short(details)}; expected within {tolerance}.",
            format=format,
            details=details,
        )
    details["tolerance"] = tolerance
    return details


def _run_isolated(format, path, images, num_threads):
    """Outputs for ``images`` and for ``images[:1]`` of a ``.tflite`` or ``.pt2`` file,
    computed in a child process that imports neither keras_vit nor Keras."""
    import signal
    import subprocess
    import sys
    import tempfile

    with tempfile.TemporaryDirectory(prefix="keras_vit_runtime_probe-") as folder:
        images_path, outputs_path = os.path.join(folder, "images.npy"), os.path.join(folder, "outputs.npz")
        np.save(images_path, images)
        probe = os.path.join(os.path.dirname(os.path.abspath(__file__)), "runtime.py")  # as a file
        run = subprocess.run(
            [sys.executable, probe, path, images_path, outputs_path, str(num_threads)],
            capture_output=True,
            text=True,
        )
        if run.returncode != 0:
            how = f"exit status {run.returncode}"
            if run.returncode < 0:
                how = f"signal {signal.Signals(-run.returncode).name}: the runtime crashed on this file"
            runtime = "torch.export runtime" if str(path).endswith(".pt2") else "LiteRT interpreter"
            raise VerificationError(
                f"{format}: the {runtime} failed on {path} ({how}); the file is not kept. "
                f"Its output: {' '.join(run.stderr.split())[-800:]}",
                format=format,
                details={"returncode": run.returncode},
            )
        with np.load(outputs_path) as data:
            outputs = {k: data[k] for k in data.files if not k.startswith("single_")}
            single = data["single_probabilities"]
    return outputs, single


def _check_top_k(outputs, details):
    if "top_k_indices" not in outputs:
        return True
    probabilities, indices, scores = outputs["probabilities"], outputs["top_k_indices"], outputs["top_k_scores"]
    gathered = np.take_along_axis(probabilities, indices.astype(np.int64), axis=-1)
    kth_largest = np.sort(probabilities, axis=-1)[:, ::-1][:, : indices.shape[-1]]
    # Compared by value, not index: tied probabilities may come in either order.
    ok = np.allclose(gathered, scores, atol=1e-6) and np.allclose(scores, kth_largest, atol=1e-6)
    details["top_k_consistent"] = bool(ok)
    return ok


def _short(details):
    return ", ".join(
        f"{k}={v:.3g}" if isinstance(v, float) else f"{k}={v}" for k, v in details.items() if v is not None
    )
