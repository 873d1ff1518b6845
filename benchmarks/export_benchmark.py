"""Size, single-image latency and accuracy of the Keras model and each exported variant.

Side by side on this CPU: the Keras model (current backend, compiled predict) and every
LiteRT file (interpreter with the XNNPACK delegate, --threads threads), plus ONNX
(onnxruntime) when present. Latency is the median of --runs single-image calls after
warm-up; accuracy and top-1 agreement with Keras are on the embedded digits test split.

    python benchmarks/export_benchmark.py                       # trains a tiny ViT first
    python benchmarks/export_benchmark.py --preset small        # 1.8M parameters (minutes)
    python benchmarks/export_benchmark.py saved_models/run/model.keras \\
        --export-dir saved_models/run/export --csv export_benchmark.csv
    python benchmarks/export_benchmark.py --quick               # a smoke run (tests)

Missing LiteRT files are exported first (into --export-dir, or a temporary folder).
"""

import argparse
import csv
import os
import statistics
import sys
import tempfile
import time

import numpy as np

try:
    import keras_vit  # noqa: F401
except ImportError:  # run from a checkout without installing
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

TFLITE_VARIANTS = ("tflite_float32", "tflite_float16", "tflite_dynamic_int8", "tflite_int8")
COLUMNS = ("variant", "size_mb", "latency_ms", "accuracy", "top1_agreement")


def _median_ms(fn, runs, warmup):
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def _size_mb(path):
    if os.path.isdir(path):
        return sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(path) for f in fs) / 1e6
    return os.path.getsize(path) / 1e6


# Models the benchmark can train itself on digits (current backend) when given no file.
# fmt: off
PRESETS = {
    # The test suite's tiny ViT: ~0.1 MB, latencies are mostly call overhead.
    "tiny": dict(name="vit_ti16", image_size=16, patch_size=4, depth=2, hidden_size=32, num_heads=2, mlp_dim=64,
                 num_classes=10, epochs=25),
    # ViT-Ti's width (192, 3 heads, MLP 768) in 4 blocks, 4x4 patches at 32x32: 65 tokens,
    # 1.8M parameters; a few minutes of training on 2 CPU cores.
    "small": dict(name="vit_ti16", image_size=32, patch_size=4, depth=4, num_classes=10, epochs=10),
}
# fmt: on


def train_model(path, preset="tiny", epochs=None):
    """Trains a ``PRESETS`` model on digits on the current backend and saves it to ``path``."""
    import keras

    import keras_vit
    from keras_vit.export import digits_images

    config = dict(PRESETS[preset])
    epochs = epochs or config.pop("epochs")
    config.pop("epochs", None)
    keras.utils.set_random_seed(0)
    model = keras_vit.create_model(config.pop("name"), **config)
    images, labels = digits_images(config["image_size"], "train")
    steps = epochs * -(-len(images) // 64)
    model.compile(
        keras.optimizers.Adam(keras.optimizers.schedules.CosineDecay(3e-3 if preset == "tiny" else 2e-3, steps)),
        keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    )
    model.fit(_preprocess(model, images), labels, epochs=epochs, batch_size=64, verbose=0)
    model.save(path)
    return path


def _preprocess(model, images):
    """What the exports' uint8 signature does: the model's own pre-processing, else x / 127.5 - 1."""
    import keras

    from keras_vit.export.serving import serving_preprocessing

    return keras.ops.convert_to_numpy(serving_preprocessing(model)(images))


def benchmark(model_file, export_dir, runs=50, warmup=5, threads=2):
    """Rows of ``COLUMNS`` for the Keras model and each exported file found in ``export_dir``."""
    import keras

    from keras_vit.export import FORMATS, digits_images, load_exported
    from keras_vit.factory import load_model

    model = load_model(model_file)
    images, labels = digits_images(model.input_shape[1:3], "test")
    one = images[:1]
    preprocessed = _preprocess(model, images)
    keras_top1 = np.argmax(keras.ops.convert_to_numpy(model.predict_on_batch(preprocessed)), -1)
    rows = [
        {
            "variant": "keras",
            "size_mb": _size_mb(model_file),
            "latency_ms": _median_ms(lambda: model.predict_on_batch(preprocessed[:1]), runs, warmup),
            "accuracy": float((keras_top1 == labels).mean()),
            "top1_agreement": 1.0,
        }
    ]
    for name in (*TFLITE_VARIANTS, "onnx"):
        path = os.path.join(export_dir, FORMATS[name].filename)
        if not os.path.exists(path):
            continue
        predict = load_exported(path, num_threads=threads)
        top1 = predict(images)["probabilities"].argmax(-1)
        latency = _median_ms(lambda: predict(one), runs, warmup)
        rows.append(
            {
                "variant": name,
                "size_mb": _size_mb(path),
                "latency_ms": latency,
                "accuracy": float((top1 == labels).mean()),
                "top1_agreement": float((top1 == keras_top1).mean()),
            }
        )
    return rows


def format_table(rows):
    header = f"{'variant':<20} {'size (MB)':>10} {'latency (ms)':>13} {'accuracy':>9} {'agrees w/ keras':>16}"
    lines = [header, "-" * len(header)]
    for r in rows:
        lines.append(
            f"{r['variant']:<20} {r['size_mb']:>10.3f} {r['latency_ms']:>13.3f} {r['accuracy']:>9.3f} "
            f"{r['top1_agreement']:>16.3f}"
        )
    return "\n".join(lines)


def write_csv(rows, path):
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=COLUMNS)
        writer.writeheader()
        writer.writerows(rows)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model_file", nargs="?", help=".keras model (default: train a --preset model)")
    parser.add_argument(
        "--preset",
        choices=sorted(PRESETS),
        default="tiny",
        help="model to train when no file is given (tiny: the tests' ViT; small: 4 ViT-Ti blocks)",
    )
    parser.add_argument("--export-dir", help="folder of exported files (missing LiteRT ones are exported)")
    parser.add_argument("--runs", type=int, default=200, help="timed single-image runs per variant")
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--threads", type=int, default=2, help="LiteRT / onnxruntime threads")
    parser.add_argument("--csv", default="export_benchmark.csv", help="where to write the table as CSV")
    parser.add_argument("--quick", action="store_true", help="5 runs, 1 warm-up, short training: a smoke test")
    args = parser.parse_args(argv)
    if args.quick:
        args.runs, args.warmup = 5, 1

    import keras

    from keras_vit.export import FORMATS, ExportError, export_model

    with tempfile.TemporaryDirectory(prefix="export_benchmark-") as scratch:
        model_file = args.model_file or train_model(
            os.path.join(scratch, "model.keras"), args.preset, epochs=3 if args.quick else None
        )
        export_dir = args.export_dir or os.path.join(scratch, "export")
        missing = [f for f in TFLITE_VARIANTS if not os.path.exists(os.path.join(export_dir, FORMATS[f].filename))]
        if missing:
            print(f"exporting {', '.join(missing)} into {export_dir} ...", file=sys.stderr)
            try:
                export_model(model_file, export_dir, missing, representative_data="digits")
            except ExportError:  # all or nothing: retry one by one, measure what exports
                for name in missing:
                    try:
                        export_model(model_file, export_dir, name, representative_data="digits")
                    except ExportError as error:
                        print(f"skipped {name}: {error}", file=sys.stderr)
        rows = benchmark(model_file, export_dir, args.runs, args.warmup, args.threads)
    print(
        f"backend {keras.backend.backend()}, {os.cpu_count()} CPUs, {args.threads} LiteRT threads (XNNPACK), "
        f"median of {args.runs} single-image runs; accuracy on the digits test split"
    )
    print(format_table(rows))
    write_csv(rows, args.csv)
    print(f"wrote {args.csv}")
    return rows


if __name__ == "__main__":
    main()
