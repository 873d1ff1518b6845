"""Reduced-precision inference beside float32 on this CPU: every path timed in one process.

In each backend's process, taking turns round by round (``interleaved_timings``): Keras
float32, ``mixed_bfloat16`` and ``model.quantize("int8")``, and the LiteRT files of the
same architecture (float32, dynamic-range int8, full-integer int8, XNNPACK with
--threads threads), each on one batch. Each ratio is over the fastest float32 path of the
same process, as the median of the rounds' ratios with their min-max. Beside each path,
its top-1 agreement with float32 on the embedded digits test split, from a model trained
on them (the speed model's random weights would make agreement meaningless).

    keras-vit main                                   # writes saved_models/main-finetune/model.keras
    python benchmarks/reduced_precision.py           # ViT-B/16 at 224, batch 32, every backend
    python benchmarks/reduced_precision.py --backends torch --repeats 5
    python benchmarks/reduced_precision.py --paths float32,mixed_bfloat16,int8   # Keras' paths only
    python benchmarks/reduced_precision.py --quick   # a smoke run (the tests)

Keras' paths take pre-processed float32 images; the LiteRT files take uint8 images and
normalise inside (one multiply-add per pixel, nothing beside a batch's matmuls).
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
ROOT = os.path.dirname(HERE)
BACKENDS = ("tensorflow", "jax", "torch")
KERAS_PATHS = ("float32", "mixed_bfloat16", "int8")
LITERT_PATHS = ("tflite_float32", "tflite_dynamic_int8", "tflite_int8")
FLOAT32 = ("float32", "tflite_float32")
QUICK = dict(model="vit_ti16", image_size=32, batch=4, repeats=2, options=dict(patch_size=8, depth=1))


def _speed_model(args, dtype=None):
    import keras_vit

    options = QUICK["options"] if args.quick else {}
    return keras_vit.create_model(args.model, image_size=args.image_size, dtype=dtype, **options)


def _agreement_model(args, work):
    """The trained model agreement is measured on: the given file, or (quick) a small one."""
    if not args.quick:
        return args.agreement_model
    import keras_vit
    from keras_vit.layers import ImagePreprocessing

    path = os.path.join(work, "agreement.keras")
    model = keras_vit.VisionTransformer(image_size=16, patch_size=4, hidden_size=32, depth=1, num_heads=2,
                                        mlp_dim=64, num_classes=10, head_zero_init=False,
                                        preprocessing=ImagePreprocessing(16))  # fmt: skip
    keras_vit.save_model(model, path)
    return path


def export_stage(args, work):
    """TensorFlow child: the LiteRT files of the speed model and of the agreement model, and
    the agreement model's top-1 agreement for each on the digits test split."""
    from keras_vit.export.convert import convert_model
    from keras_vit.export.representative import digits_images, representative_images
    from keras_vit.export.runtime import load_exported
    from keras_vit.export.serving import serving_preprocessing
    from keras_vit.factory import load_model

    def litert_files(model, prefix, calibration):
        size = model.input_shape[1:]
        images = representative_images("digits", size, calibration)
        paths = {name: os.path.join(work, f"{prefix}_{name}.tflite") for name in LITERT_PATHS if name in args.paths}
        # Written as export_model writes them, unverified: this measures how far they are.
        return convert_model(model, paths, representative_images=images, normalization="vit")

    paths = litert_files(_speed_model(args), "speed", args.calibration)
    trained = load_model(args.agreement_model)
    images, _ = digits_images(trained.input_shape[1], "test")
    # The Keras model's top-1 through the pre-processing the files run (its own, else "vit").
    reference = trained.predict(serving_preprocessing(trained, "vit")(images), verbose=0).argmax(-1)
    agreement = {}
    for name, path in litert_files(trained, "agreement", 300).items():
        top1 = load_exported(path)(images)["probabilities"].argmax(-1)
        agreement[name] = float(np.mean(top1 == reference))
    return {"paths": paths, "agreement": agreement}


def time_stage(args, exported):
    """One backend's child: every path timed in turns, and Keras' paths' agreement."""
    import keras
    from precision_agreement import agreement, reduced
    from speed_benchmark import interleaved_timings

    from keras_vit.export.runtime import load_exported

    model = _speed_model(args)
    rng = np.random.default_rng(0)
    shape = (args.batch, args.image_size, args.image_size, 3)
    floats = rng.uniform(-1, 1, shape).astype("float32")
    pixels = rng.integers(0, 256, shape, dtype=np.uint8)
    keras_models = {name: model if name == "float32" else reduced(model, name) for name in KERAS_PATHS
                    if name in args.paths}  # fmt: skip

    def keras_step(m):
        return lambda: keras.ops.convert_to_numpy(m.predict_on_batch(floats))

    def litert_step(predict):
        return lambda: predict(pixels)

    steps = {name: keras_step(m) for name, m in keras_models.items()}
    steps.update({name: litert_step(load_exported(path, args.threads)) for name, path in exported["paths"].items()})
    for step in steps.values():  # compiled, planned and allocated before the rounds
        step()
        step()
    seconds, errors = interleaved_timings(steps, args.repeats, min_steps=1, min_seconds=0.0)
    rows = agreement(exported["agreement_model"], [p for p in keras_models if p != "float32"])
    keras_agreement = {precision: same for precision, same, _, _ in rows}
    return {
        "backend": keras.backend.backend(),
        "seconds": seconds,
        "errors": {name: str(error) for name, error in errors.items()},
        "agreement": {**keras_agreement, **exported["agreement"]},
    }


def table(result, batch):
    """Rows ``(path, ms per batch, images/s, speed over the fastest float32, min-max, agreement)``."""
    seconds = result["seconds"]
    fastest = min((p for p in FLOAT32 if seconds.get(p)), key=lambda p: statistics.median(seconds[p]))
    rows = []
    for path, times in seconds.items():
        if not times:
            rows.append((path, None, None, None, result["errors"].get(path, "failed"), None))
            continue
        per_round = [f / t for f, t in zip(seconds[fastest], times)]
        median = statistics.median(times)
        rows.append((path, 1e3 * median, batch / median, statistics.median(per_round),
                     f"{min(per_round):.2f}-{max(per_round):.2f}", result["agreement"].get(path, 1.0)))  # fmt: skip
    return fastest, rows


def print_table(result, batch):
    fastest, rows = table(result, batch)
    print(f"\nbackend {result['backend']}: speed over the fastest float32 path ({fastest}) of this process")
    print(f"{'path':<22}{'ms/batch':>10}{'images/s':>10}{'speed':>8}{'min-max':>12}{'top-1 agreement':>17}")
    for path, ms, per_s, speed, spread, same in rows:
        if ms is None:
            print(f"{path:<22}  failed: {spread}")
            continue
        print(f"{path:<22}{ms:>10.0f}{per_s:>10.2f}{speed:>7.2f}x{spread:>12}{same:>17.4f}")
    return rows


def _child(stage, backend, args, work, payload=None):
    payload_path, out_path = (
        os.path.join(work, f"{stage}_{backend}.in.json"),
        os.path.join(work, f"{stage}_{backend}.json"),
    )
    with open(payload_path, "w") as f:
        json.dump({"args": vars(args), "payload": payload, "work": work}, f)
    env = {**os.environ, "KERAS_BACKEND": backend, "PYTHONPATH": ROOT}
    command = [sys.executable, os.path.abspath(__file__), "--stage", stage, payload_path, out_path]
    subprocess.run(command, env=env, check=True)
    with open(out_path) as f:
        return json.load(f)


def _run_stage(stage, payload_path, out_path):
    with open(payload_path) as f:
        given = json.load(f)
    args = argparse.Namespace(**given["args"])
    if stage == "export":
        result = export_stage(args, given["work"])
    else:
        result = time_stage(args, given["payload"])
    with open(out_path, "w") as f:
        json.dump(result, f)


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="vit_b16")
    parser.add_argument("--image_size", type=int, default=224)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=3, help="rounds of turns")
    parser.add_argument("--threads", type=int, default=2, help="LiteRT's threads (this machine's cores)")
    parser.add_argument("--calibration", type=int, default=32, help="full-int8 calibration images (speed model)")
    parser.add_argument("--backends", default=",".join(BACKENDS))
    parser.add_argument("--agreement_model", default=os.path.join("saved_models", "main-finetune", "model.keras"))
    parser.add_argument("--paths", default=",".join(KERAS_PATHS + LITERT_PATHS),
                        help="the paths to time, at least one float32 one (default: all)")  # fmt: skip
    parser.add_argument("--quick", action="store_true", help="a tiny model, batch 4, 2 rounds")
    args = parser.parse_args(argv)
    if args.quick:
        args.model, args.image_size, args.batch, args.repeats = (
            QUICK[k] for k in ("model", "image_size", "batch", "repeats")
        )
        args.calibration = 8
    backends = args.backends.split(",")
    unknown = sorted(set(backends) - set(BACKENDS))
    if unknown:
        parser.error(f"unknown backends {unknown}; expected some of {', '.join(BACKENDS)}")
    args.paths = args.paths.split(",")
    unknown = [p for p in args.paths if p not in KERAS_PATHS + LITERT_PATHS]
    if unknown or not set(FLOAT32) & set(args.paths):
        parser.error(f"--paths {','.join(args.paths)}: expected some of {', '.join(KERAS_PATHS + LITERT_PATHS)}, "
                     f"one of {' or '.join(FLOAT32)} among them")  # fmt: skip
    if not args.quick and not os.path.isfile(args.agreement_model):
        parser.error(f"--agreement_model {args.agreement_model} is not a file: run `keras-vit main` first")
    return args, backends


def main(argv=None):
    args, backends = parse_args(argv)
    with tempfile.TemporaryDirectory() as work:
        args.agreement_model = _agreement_model(args, work)
        # The LiteRT files are written by a TensorFlow child, whichever backend times them.
        litert = any(p in LITERT_PATHS for p in args.paths)
        exported = _child("export", "tensorflow", args, work) if litert else {"paths": {}, "agreement": {}}
        exported["agreement_model"] = args.agreement_model
        results = [_child("time", backend, args, work, exported) for backend in backends]
    print(
        f"\n{args.model} at {args.image_size}, batch {args.batch}, {args.repeats} rounds "
        "(agreement: on the digits test split)"
    )
    return [(result["backend"], print_table(result, args.batch)) for result in results]


if __name__ == "__main__":
    if sys.argv[1:2] == ["--stage"]:
        _run_stage(*sys.argv[2:5])
    else:
        main()
