"""keras_vit.export: SavedModel, LiteRT, ONNX and torch.export files agree with the Keras model.

Runs once per backend (KERAS_BACKEND=tensorflow|jax|torch). A tiny ViT (exact GELU, the
case tf2onnx cannot convert unaided; on TensorFlow and PyTorch) and a tiny hybrid
ResNet+ViT (on JAX) are trained on the current backend on the embedded digits (16x16 RGB)
to >90% test accuracy, saved as ``.keras`` and exported (the ViT from that file, the
hybrid from memory); every export is reloaded in its own runtime and compared with the
Keras model on the same raw uint8 images. The hybrid carries its own pre-processing
(ImageNet mean and std, a resize and a center crop), which every export must run inside,
also after the reload that conversion on JAX and PyTorch goes through; the ViT has none
(its exports scale as ``normalization`` says) but has class names, which must come from
its file into ``labels.txt``. The ``.pt2`` file (``torch_export``, written on the torch
backend, in a child process from the others) must run in a process that never imports
Keras.
"""

import csv
import functools
import os
import re
import subprocess
import sys

import keras
import numpy as np
import pytest
from export_models import (
    DIGIT_NAMES,
    IMAGE_SIZE,
    OWN_PREPROCESSING,
    TINY_HYBRID,
    TINY_VIT,
    one_torch_thread,
    preprocess,
    trained_path,
)
from helpers import TINY_ENCODER, assert_close_to_scale, log_softmax, not_on, once_on, randomize_keras, to_numpy

import keras_vit
from keras_vit.export import (
    FORMATS,
    InvalidModelFileError,
    UnconvertibleModelError,
    VerificationError,
    digits_images,
    export_model,
)
from keras_vit.export.serving import serving_preprocessing
from keras_vit.layers import ImagePreprocessing

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BACKEND = keras.backend.backend()
FLOAT_TOLERANCE = 1e-4  # export_model's own check, on probabilities
# The exports are compared with the Keras model on log-probabilities, relative to their
# largest size (helpers.assert_close_to_scale): the probabilities of these trained models
# are near 1 for the top class and 1e-5 to 1e-11 for the others, and a bound of 1e-4 on them
# sees the top class only (probabilities floored at 5e-5 in the serving graph passed it,
# and export_model's own check). float32 exports: measured 1.6e-7 to 1.4e-6 of the largest
# |log p| (4 to 12) over the three backends and both models; 1e-5 is 7x the worst.
LOG_TOLERANCE = 1e-5
# float16 LiteRT stores weights in half precision (relative rounding error <= 2**-11, about
# 4.9e-4) and computes in float32: measured 0.72e-3 to 2.35e-3 of the largest |log p| over
# the three backends and both models; 1e-2 is 4x the worst, and still fails for real defects
# (the floor above moves them by 1e-1, a missing softmax or wrong pre-processing by more).
FLOAT16_TOLERANCE = 1e-2
# Top-1 agreement with the float model on the test split. Dynamic-range int8 quantises the
# weights only: measured 0.983-1.000. Full-integer int8 quantises every activation too
# (LayerNorm, softmax and GELU among them), and how far that moves a model depends on the
# model trained: 0.986-1.000 on an AMD EPYC, and on an Intel Xeon with AMX, whose oneDNN
# kernels train slightly other weights, 0.969 (tensorflow's tiny ViT), 0.986 and 0.994.
# A real defect (wrong pre-processing, a lost scale) falls far below either bound, and
# an image the float model is sure of (top-1 probability >= 0.9) must keep its class in
# both (the disagreements measured had 0.45-0.72).
MIN_INT8_TOP1_AGREEMENT = {"tflite_dynamic_int8": 0.98, "tflite_int8": 0.95}
CONFIDENT = 0.9
MIN_TEST_ACCURACY = 0.9
# LiteRT files that differ from tflite_float32 in how the weights are stored only: the ViT
# covers them; the hybrid (its convolutions, its own pre-processing) is exported in the
# formats whose graphs its layers change.
WEIGHT_ONLY_VARIANTS = ("tflite_float16", "tflite_dynamic_int8")
# Every backend's LiteRT files are converted by TensorFlow from the model's .keras file (in
# this process on TensorFlow, in a TensorFlow child process from JAX and PyTorch): the
# quantised variants of one graph are the converter's, the same from any backend, so the ViT
# has them in the tensorflow run (and the hybrid its full-integer one in the jax run).
QUANTISED_VARIANTS = (*WEIGHT_ONLY_VARIANTS, "tflite_int8")


def _formats(name):
    """The formats the fixture exports ``name`` in, on this backend."""
    if name != TINY_VIT["name"]:
        return [f for f in FORMATS if f not in WEIGHT_ONLY_VARIANTS]
    return [f for f in FORMATS if BACKEND == "tensorflow" or f not in QUANTISED_VARIANTS]


MODELS = [
    pytest.param(
        TINY_VIT,
        id="vit",
        # From JAX every format goes where PyTorch's go (a TensorFlow child process converts
        # the .keras file, .pt2 aside), and the hybrid takes that path on JAX in every format.
        marks=not_on("jax", "the hybrid takes the paths the ViT would there"),
    ),
    pytest.param(
        TINY_HYBRID,
        id="hybrid",
        marks=[
            # The ViT takes each backend's own paths; the hybrid adds its layers and its own
            # pre-processing, exported from JAX through the .keras reload that JAX and
            # PyTorch share (and to .pt2 in a PyTorch process).
            once_on(
                "jax", "the hybrid's layers and pre-processing in every format; each backend's paths are the ViT's"
            ),
        ],
    ),
]


def _build(config):
    config = dict(config)
    return keras_vit.create_model(config.pop("name"), **config)


def _keras_log_probabilities(model, images):
    # predict_on_batch: the compiled inference path (one jitted call on JAX, where eager
    # calls compile op by op for every new batch shape).
    return log_softmax(to_numpy(model.predict_on_batch(preprocess(model, images))))


def assert_log_probabilities_close(probabilities, expected_log, rtol=LOG_TOLERANCE, err_msg=""):
    """Compares an export's probabilities with the Keras model's as log-probabilities: every
    class's score, where the trained models' probabilities (logits up to +-15) are 1 for
    the top class and ~1e-10 for the rest, and a tolerance on them sees the top class only."""
    return assert_close_to_scale(np.log(probabilities), expected_log, rtol, err_msg)


@pytest.fixture(scope="module")
def digits():
    train = digits_images(IMAGE_SIZE, "train")
    test = digits_images(IMAGE_SIZE, "test")
    return {"train": train, "test": test}


# The tests that take this fixture are slow (tests/tiers.py): it exports a model in every format.
@pytest.fixture(scope="module", params=MODELS)
def exported(request, digits, tmp_path_factory):
    """A trained model, loaded on this backend from its committed file, saved here as
    .keras and exported in all formats."""
    name = request.param["name"]
    path = trained_path(name)
    assert os.path.exists(path), f"{path} is missing: KERAS_BACKEND=tensorflow python tests/write_export_models.py"
    model = keras_vit.load_model(path)
    (x_test, y_test) = digits["test"]
    with one_torch_thread():
        log_reference = _keras_log_probabilities(model, x_test)  # once; tests compare with slices
    reference = np.exp(log_reference)
    accuracy = float((reference.argmax(-1) == y_test).mean())
    folder = tmp_path_factory.mktemp(f"export_{request.param['name']}")
    model_file = str(folder / "model.keras")
    model.save(model_file)
    output = str(folder / "export")
    formats = _formats(name)
    # The ViT is exported from its file, the hybrid from the model in memory: both entry points.
    source = model_file if name == TINY_VIT["name"] else model
    # The ViT calibrates on a folder of the training digits as PNG files, in subfolders (a
    # user's own images); named so that the seeded draw picks the images "digits" would.
    representative = "digits" if name != TINY_VIT["name"] else _png_folder(digits["train"][0], folder / "train")
    result = export_model(source, output, formats=formats, representative_data=representative)
    files = dict(model_file=model_file, output=output, result=result, formats=formats)
    return dict(model=model, name=name, accuracy=accuracy, x_test=x_test, y_test=y_test, reference=reference,
                log_reference=log_reference, **files)  # fmt: skip


def _png_folder(images, folder):
    from PIL import Image

    for index, image in enumerate(images):
        part = folder / f"part{index // 500}"
        part.mkdir(parents=True, exist_ok=True)
        Image.fromarray(image).save(part / f"{index:05d}.png")
    return str(folder)


# ---------------------------------------------------------------- the exported files


@pytest.mark.slow
def test_model_trained_and_every_format_written(exported):
    assert exported["accuracy"] >= MIN_TEST_ACCURACY, exported["accuracy"]
    paths = exported["result"].paths
    assert set(paths) == set(exported["formats"])
    for name, path in paths.items():
        assert os.path.exists(path), name
        assert os.path.dirname(path) == exported["output"]
    # No temporary or scratch files are left beside the exports.
    assert not [n for n in os.listdir(exported["output"]) if n.startswith(".")]


@pytest.mark.slow
def test_class_names_written_beside_the_exports(exported):
    labels = exported["result"].labels
    if exported["name"] != TINY_VIT["name"]:
        assert labels is None and "labels.txt" not in os.listdir(exported["output"])
        return
    assert labels == os.path.join(exported["output"], "labels.txt")
    with open(labels, encoding="utf-8") as f:
        assert f.read().splitlines() == DIGIT_NAMES  # line i names probabilities[:, i]


@pytest.mark.slow
def test_savedmodel_serving_signatures_match_keras(exported):
    import tensorflow as tf

    loaded = tf.saved_model.load(exported["result"].paths["savedmodel"])
    assert set(loaded.signatures) == {"serving_default", "serving_preprocessed", "serving_bytes"}
    serving = loaded.signatures["serving_default"]
    spec = serving.structured_input_signature[1]["images"]
    assert spec.dtype == tf.uint8 and spec.shape.as_list() == [None, IMAGE_SIZE, IMAGE_SIZE, 3]
    for batch in (1, 5):
        images = exported["x_test"][:batch]
        expected = exported["log_reference"][:batch]
        outputs = {k: v.numpy() for k, v in serving(images=tf.constant(images)).items()}
        assert set(outputs) == {"probabilities", "top_k_indices", "top_k_scores"}
        assert_log_probabilities_close(outputs["probabilities"], expected)
        assert outputs["top_k_indices"].shape == (batch, 5)
        np.testing.assert_array_equal(outputs["top_k_indices"], np.argsort(-expected, -1)[:, :5])
        assert_log_probabilities_close(outputs["top_k_scores"], np.sort(expected, -1)[:, ::-1][:, :5])
        pre = loaded.signatures["serving_preprocessed"](images=tf.constant(preprocess(exported["model"], images)))
        assert_log_probabilities_close(pre["probabilities"].numpy(), expected)


def _encoded(image, size, file_format):
    """``image`` resized to ``size`` (width, height) and encoded, and the pixels PIL decodes from it."""
    import io

    from PIL import Image

    buffer = io.BytesIO()
    Image.fromarray(np.asarray(image, np.uint8)).resize(size, Image.BICUBIC).save(buffer, file_format, quality=95)
    data = buffer.getvalue()
    return data, np.asarray(Image.open(io.BytesIO(data)).convert("RGB"))


def _classify(model, images):
    """``model.classify`` on raw images of any size; a model without pre-processing of its
    own is served with ``normalization="vit"``'s, as the exports (and so is classified here)."""
    if model.preprocessing is not None:
        return model.classify(images)
    layer = serving_preprocessing(model, "vit")
    batch = np.stack([to_numpy(layer(image[None]))[0] for image in images])
    return np.exp(log_softmax(to_numpy(model.predict_on_batch(batch))))


@pytest.mark.slow
def test_savedmodel_bytes_signature_equals_classify_on_jpeg_and_png_of_three_sizes(exported):
    import tensorflow as tf

    model = exported["model"]
    serve = tf.saved_model.load(exported["result"].paths["savedmodel"]).signatures["serving_bytes"]
    spec = serve.structured_input_signature[1]["image_bytes"]
    assert spec.dtype == tf.string and spec.shape.as_list() == [None]
    # Test digits the model is sure of, enlarged to three sizes (one square, two of other
    # aspect ratios) and encoded both ways: six files of four sizes in one request.
    sure = np.flatnonzero(exported["reference"].max(-1) >= CONFIDENT)[:3]
    files, decoded = [], []
    for index, size in zip(sure, [(16, 16), (24, 40), (97, 61)]):
        for file_format in ("JPEG", "PNG"):
            data, pixels = _encoded(exported["x_test"][index], size, file_format)
            files.append(data)
            decoded.append(pixels)
    outputs = {k: v.numpy() for k, v in serve(image_bytes=tf.constant(files)).items()}
    expected = _classify(model, decoded)
    assert set(outputs) == {"probabilities", "top_k_indices", "top_k_scores", "top_k_names"}
    assert outputs["probabilities"].shape == expected.shape == (len(files), 10)
    np.testing.assert_array_equal(outputs["top_k_indices"][:, 0], expected.argmax(-1))
    names = model.class_names or [str(i) for i in range(10)]
    assert [n.decode() for n in outputs["top_k_names"][:, 0]] == [names[i] for i in expected.argmax(-1)]
    # PNG is lossless: the same pixels as PIL's, so the same probabilities. (JPEG decoders
    # may round a pixel otherwise: its rows are held to the top-1 above.)
    png = slice(1, None, 2)
    assert_log_probabilities_close(outputs["probabilities"][png], np.log(expected[png]))


def _exported_path(exported, name):
    if name not in exported["formats"]:
        pytest.skip(f"{name}: tflite_float32's graph stored or quantised otherwise; the tensorflow run's ViT has it")
    return exported["result"].paths[name]


def _litert_probabilities(path, images):
    from ai_edge_litert.interpreter import Interpreter

    interpreter = Interpreter(model_path=path, num_threads=2)
    runner = interpreter.get_signature_runner("serving_default")
    return runner(images=np.asarray(images, np.uint8))["probabilities"]


@pytest.mark.slow
def test_tflite_float32_matches_keras_on_raw_images(exported):
    path = exported["result"].paths["tflite_float32"]
    for batch in (1, 3):
        images = exported["x_test"][:batch]
        assert_log_probabilities_close(_litert_probabilities(path, images), exported["log_reference"][:batch])


@pytest.mark.slow
def test_tflite_float16_within_bound(exported):
    images = exported["x_test"][:64]
    got = _litert_probabilities(_exported_path(exported, "tflite_float16"), images)
    relative = assert_log_probabilities_close(got, exported["log_reference"][:64], FLOAT16_TOLERANCE)
    print(f"{BACKEND} {exported['name']} tflite_float16: max |log p16 - log p_keras| / max |log p_keras| "
          f"{relative:.2e} on 64 test images")  # fmt: skip
    assert os.path.getsize(exported["result"].paths["tflite_float16"]) < os.path.getsize(
        exported["result"].paths["tflite_float32"]
    )


@pytest.mark.parametrize("name", ["tflite_dynamic_int8", "tflite_int8"])
@pytest.mark.slow
def test_int8_keeps_float_top1_on_test_split(exported, name):
    path = _exported_path(exported, name)
    images = exported["x_test"]
    expected = exported["reference"].argmax(-1)
    got = _litert_probabilities(path, images).argmax(-1)
    agreement = float((got == expected).mean())
    print(
        f"{BACKEND} {exported['name']} {name}: top-1 agreement with float {agreement:.4f} on {len(images)} test images"
    )
    assert agreement >= MIN_INT8_TOP1_AGREEMENT[name], agreement
    confident = exported["reference"].max(-1) >= CONFIDENT
    # (48 to 317 of the 359 test images, measured: the check has cases to fail on)
    assert confident.sum() >= 20 and (got[confident] == expected[confident]).all()


@pytest.mark.slow
def test_onnx_matches_keras_at_two_batch_sizes(exported):
    import onnxruntime

    session = onnxruntime.InferenceSession(exported["result"].paths["onnx"], providers=["CPUExecutionProvider"])
    (inp,) = session.get_inputs()
    assert inp.name == "images" and inp.shape[0] == "batch"
    for batch in (1, 3):  # the same file, the same session
        images = exported["x_test"][:batch]
        (got,) = session.run(["probabilities"], {"images": images})
        assert_log_probabilities_close(got, exported["log_reference"][:batch])


# ---------------------------------------------------------------- fed what a client may send


def _runtimes(paths):
    """``{name: (run(images) -> probabilities, refusal)}`` through each runtime's own API, as a
    client calls it (nothing of keras-vit's in between); ``refusal`` is the error type the
    runtime refuses an input of another shape with, and a pattern of what it says."""
    import onnxruntime
    import tensorflow as tf
    import torch
    from ai_edge_litert.interpreter import Interpreter
    from onnxruntime.capi.onnxruntime_pybind11_state import InvalidArgument

    savedmodel = tf.saved_model.load(paths["savedmodel"]).signatures["serving_default"]
    session = onnxruntime.InferenceSession(paths["onnx"], providers=["CPUExecutionProvider"])
    program = torch.export.load(paths["torch_export"]).module()

    def litert_interpreter(path):
        # The Interpreter's own calls: the input tensor stays the shape it was converted with.
        def run(images):
            interpreter = Interpreter(model_path=path, num_threads=2)
            interpreter.allocate_tensors()
            (source,) = interpreter.get_input_details()
            interpreter.set_tensor(source["index"], images)
            interpreter.invoke()
            output = next(o for o in interpreter.get_output_details() if o["shape"][-1] == 10)
            return interpreter.get_tensor(output["index"])

        return run

    def pt2(images):
        with torch.no_grad():
            return program(torch.from_numpy(images))["probabilities"].numpy()

    runs = {
        "savedmodel": (
            lambda images: savedmodel(images=tf.constant(images))["probabilities"].numpy(),
            (tf.errors.InvalidArgumentError, r"Shape of tensor images \S+ is not compatible with expected shape"),
        ),
        "onnx": (
            lambda images: session.run(["probabilities"], {"images": images})[0],
            (InvalidArgument, r"INVALID_ARGUMENT : Got invalid dimensions for input: images"),
        ),
        "torch_export": (pt2, (AssertionError, r"Guard failed: images\.size\(\)\[\d\] == \d+")),
    }
    for name in [n for n in paths if n.startswith("tflite")]:
        # The signature runner resizes its input tensor to the images it is given, and its
        # kernels refuse a shape they cannot reshape; the Interpreter's tensor keeps its shape.
        runs[f"{name} (signature runner)"] = (
            functools.partial(_litert_probabilities, paths[name]),
            (RuntimeError, r"(RESHAPE\) failed to (invoke|prepare)|XNNPack delegate failed to reshape)"),
        )
        runs[f"{name} (Interpreter)"] = (
            litert_interpreter(paths[name]),
            (ValueError, r"Cannot set tensor: Dimension mismatch"),
        )
    return runs


@pytest.mark.slow
def test_every_runtime_answers_a_batch_a_wrong_size_and_a_grey_image_rightly_or_refuses(exported):
    # Each export, fed through its runtime's own API what a client may send: two images, an
    # image of twice the size, a one-channel grey image. Each answer is either right (one row
    # per image, equal to the model on the image pre-processed as the exports do: resized to
    # the model's size, grey as RGB) or an error; never rows that are not the images given.
    model, two = exported["model"], exported["x_test"][:2]
    preprocessing = serving_preprocessing(model, "vit")  # the exports' own: resizes any size

    def expected(images):
        rgb = np.repeat(images, 3, axis=-1) if images.shape[-1] == 1 else images
        return log_softmax(to_numpy(model.predict_on_batch(to_numpy(preprocessing(rgb)))))

    cases = {
        "two images": two,
        "twice the size": np.repeat(np.repeat(two[:1], 2, axis=1), 2, axis=2),
        "grey": two[:1, ..., :1].copy(),
    }
    outcomes = {}
    for runtime, (run, (refusal, says)) in _runtimes(exported["result"].paths).items():
        for case, images in cases.items():
            try:
                got = np.asarray(run(images))
            except refusal as error:  # the runtime's own refusal; any other error fails here
                said = " ".join(str(error).split())
                assert re.search(says, said), (runtime, case, said[:600])
                outcomes[runtime, case] = f"refused: {said[:600]}"
                continue
            assert got.shape == (len(images), 10), f"{runtime} answered {case} with {got.shape[0]} rows"
            if "int8" not in runtime and "float16" not in runtime:
                assert_log_probabilities_close(got, expected(images), err_msg=f"{runtime}, {case}")
            outcomes[runtime, case] = "answered"
    print(f"\n{BACKEND} {exported['name']}:", *(f"{k}: {v}" for k, v in outcomes.items()), sep="\n  ")
    # Two images of the model's size are what every export serves.
    assert all(outcomes[runtime, "two images"] == "answered" for runtime, _ in outcomes if "Interpreter" not in runtime)
    # The runtimes that check the shape name it: the model's image size in the refusal.
    for runtime in ("savedmodel", "onnx", "torch_export", "tflite_float32 (Interpreter)"):
        for case, expected_size in (("twice the size", IMAGE_SIZE), ("grey", 3)):
            said = outcomes[runtime, case]
            assert said.startswith("refused") and str(expected_size) in said, (runtime, case, said)


# What a deployment runs: torch and numpy, no Keras (asserted after loading and running).
_RUN_PT2 = """
import sys
import numpy as np
import torch

module = torch.export.load(sys.argv[1]).module()
images = torch.from_numpy(np.load(sys.argv[2]))
with torch.no_grad():
    outputs = {f"{k}_{n}": v.numpy() for n in (1, len(images)) for k, v in module(images[:n]).items()}
assert "keras" not in sys.modules and "keras_vit" not in sys.modules, "the .pt2 needed Keras"
np.savez(sys.argv[3], **outputs)
"""


@pytest.mark.slow
def test_torch_export_runs_without_keras_at_two_batch_sizes(exported, tmp_path):
    images = exported["x_test"][:3]
    np.save(tmp_path / "images.npy", images)
    env = {k: v for k, v in os.environ.items() if k not in ("KERAS_BACKEND", "PYTHONPATH")}
    run = subprocess.run(
        [sys.executable, "-c", _RUN_PT2, exported["result"].paths["torch_export"], "images.npy", "outputs.npz"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    outputs = np.load(tmp_path / "outputs.npz")
    for batch in (1, 3):  # the same program: its batch is symbolic
        expected = exported["log_reference"][:batch]
        assert outputs[f"top_k_indices_{batch}"].dtype == np.int32
        np.testing.assert_array_equal(outputs[f"top_k_indices_{batch}"][:, 0], expected.argmax(-1))
        assert_log_probabilities_close(outputs[f"probabilities_{batch}"], expected)
    assert exported["result"].checks["torch_export"]["max_abs_diff"] <= 1e-5


@pytest.mark.slow
@once_on("tensorflow", "the commands are one code for every backend; each backend's save_preset is test_presets'")
def test_a_saved_preset_classifies_then_exports_to_litert_with_no_extra_arguments(tmp_path, capsys):
    import skimage.data
    from PIL import Image

    from keras_vit.commands import command

    names = ["cat", "dog", "fox"]
    model = keras_vit.create_model("vit_ti16", image_size=16, num_classes=3, depth=1, class_names=names, **TINY_ENCODER)
    folder = keras_vit.save_preset(randomize_keras(model), tmp_path / "preset")  # no pre-processing given
    photo = np.asarray(Image.fromarray(skimage.data.chelsea()).resize((16, 16)))
    Image.fromarray(photo).save(tmp_path / "cat.png")
    expected = keras_vit.create_model(folder).classify(photo)[0]
    assert command("classify").main([folder, str(tmp_path / "cat.png"), "--top", "1"]) == 0
    assert f"{names[int(expected.argmax())]} ({int(expected.argmax())})" in capsys.readouterr().out
    output = tmp_path / "export"
    assert command("export").main([folder, "--output", str(output), "--formats", "tflite_float32"]) == 0
    assert (output / "labels.txt").read_text().split() == names
    litert = _litert_probabilities(str(output / "model_float32.tflite"), photo[None])
    assert_log_probabilities_close(litert, np.log(expected)[None])


def _recipe():
    from keras_vit.commands import export

    return export


@pytest.mark.slow
def test_recipe_exports_from_this_backend(exported, tmp_path, capsys):
    # In this process, so on this test run's backend: the recipe must work on any. Once a
    # backend: on the model it exports in every format (the ViT; on JAX the hybrid).
    if exported["name"] != TINY_VIT["name"] and BACKEND != "jax":
        pytest.skip("the recipe is the same call for every model; once is enough")
    output = tmp_path / "recipe_export"
    status = _recipe().main([exported["model_file"], "--formats", "tflite_float32,onnx", "--output", str(output)])
    assert status == 0
    assert "tflite_float32" in capsys.readouterr().out
    labels = ["labels.txt"] if exported["model"].class_names else []
    assert sorted(os.listdir(output)) == sorted([*labels, "model.onnx", "model_float32.tflite"])
    images = exported["x_test"][:4]
    assert_log_probabilities_close(
        _litert_probabilities(str(output / "model_float32.tflite"), images), exported["log_reference"][:4]
    )


@pytest.mark.slow
@once_on("tensorflow", "the benchmark times the LiteRT files, converted by TensorFlow from any backend")
def test_benchmark_quick_mode(exported, tmp_path, capsys):
    if exported["name"] != TINY_VIT["name"]:
        pytest.skip("the benchmark is the same code for every model; once is enough")
    sys.path.insert(0, os.path.join(REPO, "benchmarks"))
    try:
        import export_benchmark
    finally:
        sys.path.remove(os.path.join(REPO, "benchmarks"))
    csv_path = tmp_path / "bench.csv"
    rows = export_benchmark.main(
        [exported["model_file"], "--export-dir", exported["output"], "--quick", "--csv", str(csv_path)]
    )
    printed = capsys.readouterr().out
    names = [row["variant"] for row in rows]
    assert names[0] == "keras" and {"tflite_float32", "tflite_dynamic_int8"} <= set(names)
    for row in rows:
        assert row["size_mb"] > 0 and row["latency_ms"] > 0 and 0 <= row["accuracy"] <= 1
        assert row["variant"] in printed
    with open(csv_path) as f:
        assert [r["variant"] for r in csv.DictReader(f)] == names


# ---------------------------------------------------------------- bad input, no half-written exports


@pytest.fixture(scope="module")
def tiny_model_file(tmp_path_factory):
    model = _build(dict(TINY_VIT, depth=1))
    path = str(tmp_path_factory.mktemp("tiny") / "tiny.keras")
    model.save(path)
    return path


def _listing(folder):
    return sorted(os.listdir(folder)) if os.path.isdir(folder) else None


def test_unknown_format_lists_known_ones(tiny_model_file, tmp_path):
    with pytest.raises(ValueError, match="Unknown export format 'tflite_fp8'") as error:
        export_model(tiny_model_file, tmp_path / "out", formats="savedmodel,tflite_fp8")
    for name in FORMATS:
        assert name in str(error.value)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    "arguments, message",
    [
        (["--formats", "tflite_float64"], "Known formats: savedmodel, tflite_float32"),
        (["--formats", "tflite_int8"], "needs representative data"),
        (["--model", "vit_b99"], "Unknown model name 'vit_b99'"),
    ],
)
def test_recipe_rejects_bad_input_before_work(tiny_model_file, tmp_path, capsys, arguments, message):
    with pytest.raises(SystemExit) as exit_info:
        _recipe().main([tiny_model_file, "--output", str(tmp_path / "out"), *arguments])
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("content", [b"not a model at all", b"PK\x03\x04 truncated zip", b""])
def test_not_a_model_file(tmp_path, content):
    path = tmp_path / "model.keras"
    path.write_bytes(content)
    with pytest.raises(InvalidModelFileError, match="not a model file"):
        export_model(str(path), tmp_path / "out", formats="onnx")
    assert not (tmp_path / "out").exists()


def test_missing_model_file_and_checkpoint_without_model_name(tmp_path):
    with pytest.raises(InvalidModelFileError, match="no such file or folder"):
        export_model(str(tmp_path / "missing.keras"), tmp_path / "out", formats="onnx")
    np.savez(tmp_path / "weights.npz", cls=np.zeros((1, 1, 8), np.float32))
    with pytest.raises(InvalidModelFileError, match="model_name"):
        export_model(str(tmp_path / "weights.npz"), tmp_path / "out", formats="onnx")


def test_normalization_contradicting_the_models_own_is_refused(tmp_path):
    preprocessing = ImagePreprocessing(IMAGE_SIZE, **OWN_PREPROCESSING)
    model = _build(dict(TINY_VIT, depth=1, preprocessing=preprocessing))
    with pytest.raises(ValueError, match=r"own pre-processing \(mean=\(0.485.*normalization='vit'.*contradicts it"):
        export_model(model, tmp_path / "out", formats="tflite_float32", normalization="vit")
    assert not (tmp_path / "out").exists()


def test_a_folder_without_images_is_refused_as_representative_data(tiny_model_file, tmp_path):
    (tmp_path / "photos" / "cats").mkdir(parents=True)
    (tmp_path / "photos" / "cats" / "notes.txt").write_text("not an image")
    with pytest.raises(ValueError, match=r"Expected images \(.bmp, .gif, .jpeg, .jpg, .png\) in .*photos"):
        export_model(tiny_model_file, tmp_path / "out", formats="tflite_int8", representative_data=tmp_path / "photos")
    with pytest.raises(ValueError, match="expected one of .*'digits'.*, a folder of images"):
        export_model(tiny_model_file, tmp_path / "out", formats="tflite_int8", representative_data="no/such/folder")
    assert not (tmp_path / "out").exists()


def test_int8_without_representative_data(tiny_model_file, tmp_path):
    with pytest.raises(ValueError, match="representative data"):
        export_model(tiny_model_file, tmp_path / "out", formats="tflite_int8")


@once_on("tensorflow", "the staging is the parent's, one code for every backend; each backend's path is the fixture's")
def test_existing_target_refused_then_overwritten(tiny_model_file, tmp_path):
    output = tmp_path / "out"
    output.mkdir()
    target = output / FORMATS["tflite_float32"].filename
    target.write_bytes(b"an older export")
    with pytest.raises(FileExistsError, match="overwrite"):
        export_model(tiny_model_file, output, formats="tflite_float32")
    assert target.read_bytes() == b"an older export"
    result = export_model(tiny_model_file, output, formats="tflite_float32", overwrite=True)
    assert target.read_bytes()[4:8] == b"TFL3"  # a flat buffer's file identifier
    assert _listing(output) == [target.name]
    assert result.checks["tflite_float32"]["max_abs_diff"] <= FLOAT_TOLERANCE


@once_on("tensorflow", "the staging is the parent's, one code for every backend; each backend's path is the fixture's")
def test_failed_verification_leaves_nothing_behind(tiny_model_file, tmp_path, monkeypatch):
    import keras_vit.export.api as api

    def failing_verify(name, path, *args, **kwargs):
        assert os.path.exists(path)  # the converted file was there, at its temporary path
        raise VerificationError(f"{name}: forced failure", format=name)

    monkeypatch.setattr(api, "verify_export", failing_verify)
    # An existing export, to be overwritten: kept as it was, nothing left beside it.
    output = tmp_path / "out"
    output.mkdir()
    (output / "model_float32.tflite").write_bytes(b"an older export")
    with pytest.raises(VerificationError, match="forced failure"):
        export_model(tiny_model_file, output, formats="tflite_float32", overwrite=True)
    assert _listing(output) == ["model_float32.tflite"]
    assert (output / "model_float32.tflite").read_bytes() == b"an older export"


def test_crash_during_conversion_leaves_nothing_behind(tiny_model_file, tmp_path, monkeypatch):
    import keras_vit.export.convert as convert

    def half_write_then_crash(model, paths, *args, **kwargs):
        for path in paths.values():
            with open(path, "wb") as f:
                f.write(b"half")
        raise KeyboardInterrupt  # anything, even an interrupt

    monkeypatch.setattr(convert, "convert_model", half_write_then_crash)
    monkeypatch.setattr(
        convert,
        "convert_in_process",
        lambda backend, model, path, paths, *a, **k: half_write_then_crash(model, paths),
    )
    output = tmp_path / "new" / "export"  # folders it creates are removed again
    with pytest.raises(KeyboardInterrupt):
        export_model(tiny_model_file, output, formats="tflite_float32,onnx")
    assert not (tmp_path / "new").exists()


@keras.saving.register_keras_serializable(package="keras_vit_export_test")
class ErfinvHead(keras.layers.Layer):
    """A layer whose op (Erfinv) neither LiteRT's built-ins nor tf2onnx can express."""

    def call(self, x):
        return keras.ops.erfinv(keras.ops.tanh(x) * 0.5)


@pytest.mark.parametrize("name", ["tflite_float32", "onnx"])
def test_unconvertible_layer_is_named(tmp_path, name):
    if name == "onnx" and BACKEND != "tensorflow":
        pytest.skip("the same code path as tflite_float32 here; one TensorFlow child process is enough")
    if BACKEND == "torch":
        pytest.skip("from JAX and PyTorch one TensorFlow child process converts and reports: the jax run has it")
    inputs = keras.Input((IMAGE_SIZE, IMAGE_SIZE, 3), name="images")
    features = _build(dict(TINY_VIT, depth=1))(inputs)
    model = keras.Model(inputs, ErfinvHead(name="erfinv_head")(features), name="with_custom_op")
    with pytest.raises(UnconvertibleModelError) as error:
        # `imports`: the child process that converts on JAX / PyTorch needs the class too.
        export_model(model, tmp_path / "out", formats=name, imports=["test_export"])
    assert error.value.layers == ["erfinv_head"] and "Erfinv" in error.value.ops
    assert "erfinv_head" in str(error.value)
    assert not (tmp_path / "out").exists()
