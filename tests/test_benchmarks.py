"""The speed benchmark's quick mode runs end to end, so that it cannot rot."""

import csv
import importlib
import itertools
import json
import os
import statistics
import subprocess
import sys

import keras
import numpy as np
import pytest
from helpers import once_on, randomize_keras, to_numpy

import keras_vit
from keras_vit.inspect import count_flops

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BACKEND = keras.backend.backend()


def _import_benchmark(name):
    sys.path.insert(0, os.path.join(REPO, "benchmarks"))
    try:
        return importlib.import_module(name)
    finally:
        sys.path.remove(os.path.join(REPO, "benchmarks"))


def _assert_paired_by_round(speedups):
    """Each ratio is the median of the rounds' ratios, so it lies within their range."""
    for ratio in speedups:
        low, high = (float(v) for v in ratio["spread"].split("-"))
        assert 0 < low <= ratio["speedup"] <= high


@pytest.fixture(scope="module")
def speed_benchmark():
    return _import_benchmark("speed_benchmark")


@once_on("torch", "the harness (workers, rounds, CSV, ratios) is one; the PyTorch peers run there too")
def test_quick_mode_measures_every_row_beside_the_peers(speed_benchmark, tmp_path, capsys):
    engines = [f"keras-vit:{BACKEND}", f"keras-hub:{BACKEND}"]
    if BACKEND == "torch":  # the PyTorch peers, once
        engines += ["timm", "hf"]
    csv_path = tmp_path / "speed.csv"
    # One inference and the training mode: every path a row takes (another batch size is
    # the same path, compiled again).
    modes = ("infer_b1", "train_b32")
    argv = ["--quick", "--engines", ",".join(engines), "--modes", ",".join(modes), "--csv", str(csv_path)]
    rows = speed_benchmark.main(argv)
    printed = capsys.readouterr().out

    expected = set(itertools.product(engines, speed_benchmark.PRECISIONS, modes))
    assert {(r["engine"], r["precision"], r["mode"]) for r in rows} == expected
    flops = count_flops("vit_ti16", image_size=32, depth=2)
    for row in rows:
        assert row["note"] == "", row
        batch = speed_benchmark.MODES[row["mode"]][1]
        assert row["batch"] == batch and row["images_per_s"] > 0 and row["peak_rss_mb"] > 0
        work = flops * batch * (3 if row["mode"].startswith("train") else 1)
        assert row["gflops_per_s"] == pytest.approx(work / row["ms_per_step"] / 1e6, rel=0.02)
        assert row["fraction_of_peak"] == pytest.approx(row["gflops_per_s"] / row["peak_gflops_per_s"], rel=0.02)
        # Measured, and no upper bound: the matmul peak and the step are timed at other moments,
        # and on a machine shared with other test processes the peak can be read low (2.7 seen).
        assert row["fraction_of_peak"] > 0
        assert row["peak_gflops_per_s"] > 0
    # Which attention each row ran: keras-vit's as the layer chooses on this CPU (PyTorch's
    # fused kernel, else written out), a peer's as it ran; TensorFlow's graphs are not read.
    own = {"torch": "flash (cpu)", "jax": "written-out", "tensorflow": "-"}[BACKEND]
    assert {r["attention"] for r in rows if r["engine"] == f"keras-vit:{BACKEND}"} == {own}
    assert all(r["attention"] in {"-", "written-out", "flash (cpu)", "memory-efficient", "math"} for r in rows), rows
    assert f"keras-hub:{BACKEND}" in printed and "speedup" in printed and "numerics: default" in printed
    with open(csv_path) as f:
        written = list(csv.DictReader(f))
    assert [(r["engine"], r["precision"], r["mode"]) for r in written] == [
        (r["engine"], r["precision"], r["mode"]) for r in rows
    ]
    # What keras-vit computed is in its rows (the default numerics here); a peer's is its own.
    numerics = {r["engine"]: r["numerics"] for r in written}
    assert numerics[f"keras-vit:{BACKEND}"] == "default" and numerics[f"keras-hub:{BACKEND}"] == ""
    # One framework's engines share a process, so that their rows compare round by round.
    assert len({row["process"] for row in rows}) == 1
    _assert_paired_by_round(speed_benchmark.ratios(rows))


@pytest.mark.skipif(BACKEND != "torch", reason=f"the compiled engine is the torch backend's own; this is {BACKEND}")
def test_quick_mode_compiled_torch_rows_interleaved_with_timm(speed_benchmark, tmp_path, capsys):
    engines = [speed_benchmark.COMPILED, speed_benchmark.COMPILED_TANH, "keras-vit:torch", "timm"]
    argv = ["--quick", "--engines", ",".join(engines), "--precisions", "float32", "--modes", "infer_b1,train_b32"]
    rows = speed_benchmark.main(argv + ["--csv", str(tmp_path / "speed.csv")])
    printed = capsys.readouterr().out

    assert [(r["engine"], r["mode"]) for r in rows] == [(e, m) for m in ("infer_b1", "train_b32") for e in engines]
    for row in rows:
        assert row["note"] == "", row
        per_repeat = [float(t) for t in row["ms_per_repeat"].split(";")]
        assert len(per_repeat) == 2 and min(per_repeat) <= row["ms_per_step"] <= max(per_repeat)
    speedups = speed_benchmark.ratios(rows)
    assert {(r["engine"], r["peer"]) for r in speedups} >= {
        (speed_benchmark.COMPILED, "keras-vit:torch"),
        (speed_benchmark.COMPILED, "timm"),
        (speed_benchmark.COMPILED, speed_benchmark.COMPILED_TANH),  # the GELU rewrite on over off
    }
    _assert_paired_by_round(speedups)
    assert "spread" in printed and speed_benchmark.COMPILED in printed


def test_rows_reach_the_csv_as_they_arrive_and_a_stopped_worker_is_a_note(speed_benchmark, tmp_path, monkeypatch):
    # A worker that hands over one row, complains, then hangs past --engine-timeout: its row is
    # in the CSV already, the worker is killed, and the run says so in a row of its own.
    csv_path = tmp_path / "speed.csv"
    row = dict(engine="timm", model="tiny", precision="float32", mode="infer_b1", images_per_s=1.0, note="")
    script = f"import sys, time; print('ROW ' + {json.dumps(json.dumps(row))}, flush=True); "
    script += "print('out of memory', file=sys.stderr, flush=True); time.sleep(60)"
    monkeypatch.setattr(speed_benchmark, "_worker_command", lambda engines, args: [sys.executable, "-c", script])
    args = speed_benchmark.parse_args(["--engines", "timm", "--csv", str(csv_path), "--engine-timeout", "3"])
    rows = speed_benchmark.run_all(args)
    with open(csv_path) as f:
        written = list(csv.DictReader(f))
    assert [(r["engine"], r["mode"], r["images_per_s"]) for r in written] == [("timm", "infer_b1", "1.0")]
    assert rows[0] == row and len(rows) == 2
    assert rows[1]["engine"] == "timm" and "exit -9" in rows[1]["note"] and "out of memory" in rows[1]["note"]


def test_numerics_build_keras_vit_with_a_checkpoint_layouts_gelu_and_epsilon(speed_benchmark):
    from keras_vit.checkpoints.layouts import LAYOUTS

    # The parent process checks --numerics without Keras: its names are the layouts'.
    assert set(speed_benchmark.NUMERICS) == {"default"} | {n for n, layout in LAYOUTS.items() if layout.numerics}
    arch = speed_benchmark.architectures()["tiny"]
    model_name, _, image_size, overrides = speed_benchmark.MODELS["tiny"]
    own = speed_benchmark._keras_model(f"keras-vit:{BACKEND}", arch, "default").spec
    assert own == keras_vit.get_spec(model_name).replace(image_size=image_size, **overrides)
    for name in ("timm", "hf"):
        spec = speed_benchmark._keras_model(f"keras-vit:{BACKEND}", arch, name).spec
        assert spec == own.replace(**LAYOUTS[name].numerics) and not spec.gelu_approximate
    argv = ["--numerics", "timm", "--quick"]
    assert speed_benchmark._worker_command(["x"], speed_benchmark.parse_args(argv))[-3:-1] == ["--numerics", "timm"]


def test_unknown_numerics_name_the_choices(speed_benchmark, capsys):
    with pytest.raises(SystemExit):
        speed_benchmark.parse_args(["--numerics", "flax"])
    error = capsys.readouterr().err
    assert "--numerics" in error and "'flax'" in error and "'timm'" in error


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--engines", "keras-vit:numpy"], "unknown engine ['keras-vit:numpy']"),
        (["--models", "vit_b16@512"], "unknown model ['vit_b16@512']"),
        (["--precisions", "float16"], "unknown precision ['float16']"),
    ],
)
def test_bad_arguments_say_what_is_expected(speed_benchmark, argv, message):
    with pytest.raises(SystemExit, match=message.replace("[", r"\[").replace("]", r"\]")):
        speed_benchmark.parse_args(argv)


@once_on("tensorflow", "the worker and the matmul chain are one code for every backend")
def test_matmul_ceiling_compares_the_model_with_its_own_matmuls():
    matmul_ceiling = _import_benchmark("matmul_ceiling")

    # Through main: the row comes from a worker process, as in a real run.
    argv = ["--model", "vit_ti16", "--image-size", "32", "--batch", "2", "--backends", BACKEND, "--min-seconds", "0",
            "--rounds", "2"]  # fmt: skip
    (row,) = matmul_ceiling.main(argv)
    assert row["backend"] == BACKEND and row["model"] == "vit_ti16@32"
    assert row["peak"] > 1 and row["matmuls"] > 0 and row["model_gflops"] > 0
    # The chain holds every matrix product of the model but the patch embedding and head.
    chain_flops = count_flops("vit_ti16", image_size=32) * 2 - 2 * 2 * (4 * 16 * 16 * 3 * 192 + 192 * 1000)
    _, _, counted = matmul_ceiling._matmul_chain(keras_vit.get_spec("vit_ti16"), batch=2, tokens=5)
    assert counted == chain_flops
    # The ratio is the median of the rounds' own ratios, each from one turn of the two.
    assert len(row["rounds"]) == 2 and all(r > 0 for r in row["rounds"])
    assert row["model_over_matmuls_time"] == pytest.approx(statistics.median(row["rounds"]), rel=1e-9)
    assert min(row["rounds"]) <= row["model_over_matmuls_time"] <= max(row["rounds"])


# A worker's peak memory is its ru_maxrss above its value after the imports; but a child's
# ru_maxrss starts at its parent's high-water mark (Linux keeps it across fork and exec), so
# a worker spawned by this process (gigabytes, every framework imported) reads a peak of 0
# for a small model. Each benchmark run and worker here has a small parent of its own.
_MAIN = """
import json, sys
sys.path.insert(0, sys.argv[1])
import checkpoint_loading
print("ROWS " + json.dumps(checkpoint_loading.main(sys.argv[2:])))
"""
_RELAY = "import subprocess, sys; sys.exit(subprocess.run(sys.argv[1:]).returncode)"


def _small_parent(*command):
    """Runs ``command`` (Python code, then its arguments) as the child of a small Python
    process; returns its stdout."""
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}
    out = subprocess.run([sys.executable, "-c", _RELAY, sys.executable, "-c", *map(str, command)], env=env,
                         capture_output=True, text=True, timeout=300)  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout


# checkpoint_loading's worker (or its checkpoint writer) for its quick model with ``depth``
# blocks: argv = benchmarks folder, "run" or "write", engine, file, depth.
_SIZED_CHECKPOINT = """
import sys
sys.path.insert(0, sys.argv[1])
import checkpoint_loading
mode, engine, path, depth = sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5])
checkpoint_loading.ARCHS["tiny"] = ("vit_tiny_patch16_224", {"depth": depth, "img_size": 32})

def keras_model(arch):
    import keras_vit

    return keras_vit.create_model("vit_ti16", image_size=32, depth=depth, num_classes=1000)

checkpoint_loading._keras_vit_model = keras_model
if mode == "write":
    import safetensors.torch

    state = {k: v.contiguous() for k, v in checkpoint_loading._timm_model("tiny").state_dict().items()}
    safetensors.torch.save_file(state, path)
else:
    checkpoint_loading.main(["--worker", engine, "--arch", "tiny", "--path", path])
"""
# Peak memory added per MB of float32 weights, between the quick model (2 blocks) and the
# same with 12 (+16.97 MB). Measured on the Intel Xeon: timm 1.01, keras-vit torch 1.15,
# tensorflow 1.90, jax 2.11 (deferred initialisation's zeros, then the loaded arrays). Below
# 0.9 the peak misses the weights (the measurement is broken); above 2.5 the loader holds
# more than a copy beside the weights (all arrays at once before deferred init: 3.3-3.5x).
PEAK_PER_MODEL_MB = (0.9, 2.5)


@once_on("torch", "the harness is one; its PyTorch peer (timm) runs there; loading is tested on every backend")
def test_checkpoint_loading_quick_mode_measures_build_load_and_a_peak_that_grows_with_the_model(tmp_path):
    benchmarks = os.path.join(REPO, "benchmarks")
    engines = [f"keras-vit:{BACKEND}"] + (["timm"] if BACKEND == "torch" else [])  # the PyTorch peer, once
    printed = _small_parent(_MAIN, benchmarks, "--quick", "--formats", "safetensors", "--engines", ",".join(engines),
                            "--folder", tmp_path)  # fmt: skip
    rows = json.loads(printed.split("ROWS ", 1)[1])
    assert [(r["engine"], r["format"]) for r in rows] == [(e, "safetensors") for e in engines]
    sizes = [keras_vit.create_model("vit_ti16", image_size=32, depth=d).count_params() * 4 / 2**20 for d in (2, 12)]
    for row in rows:
        assert row["build_s"] > 0 and row["load_s"] > 0 and row["model_mb"] == pytest.approx(sizes[0], rel=1e-3)
        # Above the imports' peak the process holds at least the weights it loaded (measured
        # 1.25x the model for timm, 3.2x to 19x for keras-vit, where a fixed cost dominates:
        # how the peak grows with the model is checked next).
        assert row["peak_mb"] >= row["model_mb"], row
    if BACKEND == "torch":
        assert rows[1]["ratio"] == 1.0 and rows[0]["ratio"] > 0
    assert "vs timm" in printed

    # The quick model (2 blocks) against the same with 12, each worker with a small parent.
    path = tmp_path / "depth12.safetensors"
    _small_parent(_SIZED_CHECKPOINT, benchmarks, "write", "-", path, 12)
    for small in rows:
        printed = _small_parent(_SIZED_CHECKPOINT, benchmarks, "run", small["engine"], path, 12)
        big = json.loads(printed.strip().splitlines()[-1])
        assert big["model_mb"] == pytest.approx(sizes[1])
        per_mb = (big["peak_mb"] - small["peak_mb"]) / (sizes[1] - sizes[0])
        low, high = PEAK_PER_MODEL_MB
        assert low <= per_mb <= high, f"{small['engine']}: {per_mb:.2f} MB of peak per MB of weights; {small}, {big}"


def _spread_head(model, images):
    """Standardises each class's logit over ``images`` (the head's columns and bias), so
    that the top-1 of a random model spreads over the classes: uniform on the digits rather
    than one class for all, where any computation would agree with float32."""
    logits = to_numpy(model.predict(images, verbose=0)).astype("float64")
    mean, std = logits.mean(0), logits.std(0)
    head = model.get_layer("head")
    head.kernel.assign(to_numpy(head.kernel) / std)
    head.bias.assign((to_numpy(head.bias) - mean) / std)


# Top-1 agreement with Keras float32 on the digits test split (359 images) of the quick
# agreement model, random and spread (below). LiteRT float32 computes the same function in
# another runtime: measured 1.0. The reduced precisions, measured on jax, tensorflow and
# torch: mixed_bfloat16 0.96-0.97, int8 0.94, dynamic-range int8 0.96, full-integer int8
# 0.85. Images transposed on the way to LiteRT give 0.21, a head's columns swapped 0.09.
MIN_AGREEMENT = {"tflite_float32": 0.99, "mixed_bfloat16": 0.85, "int8": 0.85, "tflite_dynamic_int8": 0.85,
                 "tflite_int8": 0.7}  # fmt: skip


@once_on(
    "tensorflow",
    "the LiteRT paths are there; each backend's mixed precision and int8 are tested in "
    "test_quantization and test_numerics",
)
def test_reduced_precision_quick_mode_times_every_path_in_one_process(capsys, monkeypatch):
    from keras_vit.data import load_dataset, preprocess_split

    reduced_precision = _import_benchmark("reduced_precision")
    agreement_model = reduced_precision._agreement_model
    predicted = []

    def informative_agreement_model(args, work):
        # The benchmark's quick model had one top-1 class for every test image (its body at
        # Keras' initial weights): every path agreed with float32, right or wrong.
        path = agreement_model(args, work)
        model = randomize_keras(keras_vit.load_model(path))
        size = model.input_shape[1]
        _spread_head(model, preprocess_split(load_dataset("digits").train, size)[0])
        keras_vit.save_model(model, path)
        predicted.append(to_numpy(model.predict(preprocess_split(load_dataset("digits").test, size)[0], verbose=0)))
        return path

    monkeypatch.setattr(reduced_precision, "_agreement_model", informative_agreement_model)
    # The LiteRT files come from the same TensorFlow child whichever backend times them: their
    # paths run in the tensorflow process, Keras' own paths in each backend's.
    paths = [*reduced_precision.KERAS_PATHS, *(reduced_precision.LITERT_PATHS if BACKEND == "tensorflow" else ())]
    ((backend, rows),) = reduced_precision.main(["--quick", "--backends", BACKEND, "--paths", ",".join(paths)])
    # The float32 top-1 the paths are compared with takes every class: agreement can fail.
    (logits,) = predicted
    assert (np.bincount(logits.argmax(-1), minlength=10) > 0).all(), np.bincount(logits.argmax(-1))
    assert backend == BACKEND
    assert [row[0] for row in rows] == paths
    by_path = {row[0]: row for row in rows}
    for path, ms, per_s, speed, spread, same in rows:
        assert ms is not None, f"{path} failed: {spread}"
        assert ms > 0 and per_s == pytest.approx(4 / (ms / 1e3)) and speed > 0 and 0 <= same <= 1
    fastest = max((p for p in reduced_precision.FLOAT32 if p in by_path), key=lambda p: by_path[p][2])
    assert by_path[fastest][3] == 1.0
    agreement = {path: by_path[path][5] for path in MIN_AGREEMENT if path in paths}
    with capsys.disabled():
        print(f"\n{BACKEND}: top-1 agreement with float32 {agreement}")
    assert all(agreement[path] >= MIN_AGREEMENT[path] for path in agreement), agreement
    assert f"backend {BACKEND}: speed over the fastest float32 path ({fastest})" in capsys.readouterr().out


@pytest.mark.parametrize("paths", ["tflite_int8", "float32,float64"])
def test_reduced_precision_paths_name_the_choices(paths, capsys):
    reduced_precision = _import_benchmark("reduced_precision")
    with pytest.raises(SystemExit):
        reduced_precision.parse_args(["--quick", "--paths", paths])
    error = capsys.readouterr().err
    assert f"--paths {paths}" in error and "mixed_bfloat16, int8, tflite_float32" in error, error


@once_on(
    "jax",
    "the harness is one, XLA's plan of temporaries is JAX's; remat's equality and recomputation are "
    "tested on every backend (test_remat)",
)
def test_remat_quick_mode_measures_a_step_with_and_without(tmp_path, capsys):
    remat_memory = _import_benchmark("remat_memory")
    csv_path = tmp_path / "remat.csv"
    rows, results = remat_memory.main(["--quick", "--backends", BACKEND, "--csv", str(csv_path)])
    assert [(r["backend"], r["remat"]) for r in rows] == [(BACKEND, False), (BACKEND, True)]
    for row in rows:
        # (A tiny model's activations are smaller than the allocator's steps: the memory the
        # option saves is the full benchmark's to show, at ViT-B/16's size.)
        assert row["step_ms"] > 0 and row["step_peak_mb"] >= 0 and row["model"] == "vit_ti16"
        # JAX's own plan of the step's temporary buffers, where the resident peak cannot see them.
        assert (row["xla_temp_mb"] is not None) == (BACKEND == "jax") and (row["xla_temp_mb"] or 1) > 0
    off, on, ratio, low, high = results[BACKEND]
    assert ratio == pytest.approx(rows[1]["step_ms"] / rows[0]["step_ms"]) and low == high == ratio
    with open(csv_path) as f:
        written = list(csv.DictReader(f))
    assert [(r["backend"], r["remat"]) for r in written] == [(BACKEND, "False"), (BACKEND, "True")]
    assert "time on/off" in capsys.readouterr().out


@pytest.fixture
def image_text_speed():
    return _import_benchmark("image_text_speed")


@once_on("torch", "the benchmark runs a process per framework; the PyTorch peers are in torch's")
def test_image_text_quick_mode_measures_keras_vit_beside_open_clip_and_transformers(image_text_speed, tmp_path):
    engines = ["keras-vit:torch", "keras-vit:torch-compiled", "open_clip", "transformers"]
    # One pair and task: the others are built and timed by the same code (their sizes: below).
    argv = ["--quick", "--pairs", "clip_b16", "--tasks", "texts_b32", "--engines", ",".join(engines)]
    rows = image_text_speed.main([*argv, "--csv", str(tmp_path / "it.csv")])
    expected = itertools.product(["clip_b16"], ["texts_b32"], engines)
    assert sorted((r["pair"], r["task"], r["engine"]) for r in rows) == sorted(expected)
    for row in rows:
        assert "error" not in row and row["items_per_s"] > 0, row
        batch = image_text_speed.TASKS[row["task"]][1]
        assert row["items_per_s"] == pytest.approx(batch / row["seconds"])
        if row["engine"].startswith("keras-vit:"):  # the median of the rounds' ratios to each peer
            for peer in image_text_speed.PEERS:
                theirs = next(
                    r for r in rows if (r["pair"], r["task"], r["engine"]) == (row["pair"], row["task"], peer)
                )
                per_round = [t / m for m, t in zip(row["rounds"], theirs["rounds"])]
                assert min(per_round) <= row[f"vs_{peer}"] <= max(per_round)
    with open(tmp_path / "it.csv") as f:
        assert len(list(csv.DictReader(f))) == len(rows)


@once_on("torch", "which sizes the towers have is the readers' arithmetic, on any backend")
def test_image_text_benchmark_towers_have_the_peers_sizes(image_text_speed):
    import transformers

    for pair in image_text_speed.PAIRS:
        config = image_text_speed._config(pair, quick=True)
        image, text = image_text_speed.keras_towers(config)
        model_class = transformers.CLIPModel if pair.startswith("clip") else transformers.SiglipModel
        theirs = model_class(config)
        vision = sum(p.numel() for n, p in theirs.named_parameters() if n.startswith(("vision_model.", "visual_")))
        if pair.startswith("clip"):  # keras-vit's head keeps a bias, zeros where CLIP's projection has none
            vision += config.projection_dim
        words = sum(p.numel() for n, p in theirs.named_parameters() if n.startswith(("text_model.", "text_projection")))
        assert (image.count_params(), text.count_params()) == (vision, words), pair
