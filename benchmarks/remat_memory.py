"""A training step with the encoder blocks rematerialised (``remat=True``) beside one without.

Each measurement is a child process of its own (a process's peak memory only grows): it
builds the model, takes one training step (compiling it and creating the optimizer's
slots), then times ``--steps`` more, with the peak resident memory reset before them. What
a step holds above what the process held before it (activations kept for the backward
pass, gradients, the step's temporaries) is its ``step_peak_mb``; the weights and the
optimizer's slots are the same in both settings and held before. The resident peak sees
what the allocator returns between steps: PyTorch's; on CPU, TensorFlow's and JAX's
runtimes keep their buffers from step to step, so for JAX, XLA's own plan of the forward
and backward pass's temporary buffers is ``xla_temp_mb`` too. Off and on take turns
for ``--repeats`` rounds on each backend; the summary gives, per backend, the median peak
of each and the step time of on over off (the median of the rounds' ratios, with their
min-max).

    python benchmarks/remat_memory.py                                  # ViT-B/16 at 224, batch 8, every backend
    python benchmarks/remat_memory.py --backends jax --batch 16 --repeats 3
    python benchmarks/remat_memory.py --quick                          # a tiny model (the tests)

One CSV row per measurement goes to --csv (default
saved_models/benchmarks/remat_memory.csv), appended as soon as it is measured.
"""

import argparse
import csv
import json
import os
import platform
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
BACKENDS = ("tensorflow", "jax", "torch")
FIELDS = (
    "backend",
    "model",
    "image_size",
    "batch",
    "remat",
    "round",
    "step_ms",
    "step_peak_mb",
    "xla_temp_mb",
    "machine",
)
QUICK = dict(model="vit_ti16", image_size=32, batch=4, steps=2, repeats=1, options=dict(depth=2))


def measure(args, remat):
    """In a child: one step to compile, then ``args.steps`` timed with the peak reset."""
    import time

    import keras
    import numpy as np
    from harness.memory import peak_rss_mb, reset_peak_rss, rss_mb

    import keras_vit

    keras.utils.set_random_seed(0)
    options = QUICK["options"] if args.quick else {}
    model = keras_vit.create_model(args.model, image_size=args.image_size, num_classes=1000, remat=remat, **options)
    # Plain SGD: no slots and no weight-sized temporaries in its update, so that the step's
    # peak is the forward and backward pass (what rematerialisation changes); AdamW's update
    # set torch's peak, with or without it.
    model.compile(keras.optimizers.SGD(1e-4), keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    rng = np.random.default_rng(0)
    images = rng.uniform(-1, 1, (args.batch, args.image_size, args.image_size, 3)).astype("float32")
    labels = rng.integers(0, 1000, args.batch)
    model.train_on_batch(images, labels)  # compiled, slots created
    before = rss_mb()
    reset_peak_rss()
    seconds = []
    for _ in range(args.steps):
        start = time.perf_counter()
        keras.ops.convert_to_numpy(model.train_on_batch(images, labels, return_dict=True)["loss"])
        seconds.append(time.perf_counter() - start)
    peak = peak_rss_mb() - before
    return {
        "step_ms": 1e3 * statistics.median(seconds),
        "step_peak_mb": peak,
        "xla_temp_mb": _xla_temp_mb(model, images, labels),
    }


def _xla_temp_mb(model, images, labels):
    """JAX: the compiled forward and backward pass's temporary buffers (the activations kept
    for the backward pass among them), as XLA plans them; None on the other backends.
    (XLA's CPU runtime keeps its buffers between steps, so the resident peak does not see them.)"""
    import keras

    if keras.backend.backend() != "jax":
        return None
    import jax

    def loss(trainable, non_trainable, x, y):
        logits, _ = model.stateless_call(trainable, non_trainable, x, training=True)
        return model.loss(y, logits)

    weights = ([v.value for v in model.trainable_variables], [v.value for v in model.non_trainable_variables])
    compiled = jax.jit(jax.value_and_grad(loss)).lower(*weights, images, labels).compile()
    return compiled.memory_analysis().temp_size_in_bytes / 2**20


def _child(backend, args, remat):
    # Allocations of 128 KiB and more always mapped on their own (glibc's threshold fixed, not
    # raised as large blocks are freed): what a step frees goes back to the system, so the
    # next step's peak is its own, not the first step's high-water mark kept in the heap.
    env = {**os.environ, "KERAS_BACKEND": backend, "PYTHONPATH": ROOT, "TF_CPP_MIN_LOG_LEVEL": "3",
           "MALLOC_MMAP_THRESHOLD_": "131072"}  # fmt: skip
    command = [sys.executable, os.path.abspath(__file__), "--child", json.dumps(vars(args)), str(remat)]
    out = subprocess.run(command, env=env, capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(f"{backend} remat={remat} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def summary(rows):
    """Per backend: ``(median peak off, median peak on, time on/off median, min, max)``."""
    result = {}
    for backend in dict.fromkeys(r["backend"] for r in rows):
        mine = [r for r in rows if r["backend"] == backend]
        by = {(r["round"], r["remat"]): r for r in mine}
        rounds = sorted({r["round"] for r in mine})
        ratios = [by[n, True]["step_ms"] / by[n, False]["step_ms"] for n in rounds]
        memory = "xla_temp_mb" if mine[0]["xla_temp_mb"] is not None else "step_peak_mb"
        peaks = [statistics.median(r[memory] for r in mine if r["remat"] is on) for on in (False, True)]
        result[backend] = (*peaks, statistics.median(ratios), min(ratios), max(ratios))
    return result


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="vit_b16")
    parser.add_argument("--image_size", type=int, default=224)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--steps", type=int, default=3, help="timed steps after the first")
    parser.add_argument("--repeats", type=int, default=2, help="rounds of off and on")
    parser.add_argument("--backends", default=",".join(BACKENDS))
    parser.add_argument("--csv", default=os.path.join("saved_models", "benchmarks", "remat_memory.csv"))
    parser.add_argument("--quick", action="store_true", help="a tiny model, batch 4, 2 steps, 1 round")
    args = parser.parse_args(argv)
    if args.quick:
        args.model, args.image_size, args.batch, args.steps, args.repeats = (
            QUICK[k] for k in ("model", "image_size", "batch", "steps", "repeats")
        )
    backends = args.backends.split(",")
    unknown = sorted(set(backends) - set(BACKENDS))
    if unknown:
        parser.error(f"unknown backends {unknown}; expected some of {', '.join(BACKENDS)}")
    return args, backends


def main(argv=None):
    args, backends = parse_args(argv)
    os.makedirs(os.path.dirname(os.path.abspath(args.csv)), exist_ok=True)
    new_file = not os.path.exists(args.csv)
    rows = []
    with open(args.csv, "a", newline="") as f:
        writer = csv.DictWriter(f, FIELDS)
        if new_file:
            writer.writeheader()
        for round_ in range(args.repeats):
            order = (False, True) if round_ % 2 == 0 else (True, False)  # neither always first
            for backend in backends:
                for remat in order:
                    measured = _child(backend, args, remat)
                    row = dict(backend=backend, model=args.model, image_size=args.image_size, batch=args.batch,
                               remat=remat, round=round_, machine=platform.processor() or platform.machine(),
                               **measured)  # fmt: skip
                    writer.writerow(row)
                    f.flush()
                    rows.append(row)
    print(f"\n{args.model} at {args.image_size}, batch {args.batch}: a training step, rematerialised or not")
    print("(memory: the step's peak resident MB; on JAX, XLA's temporary buffers)")
    print(f"{'backend':<12}{'MB off':>10}{'MB on':>10}{'time on/off':>13}{'min-max':>12}")
    results = summary(rows)
    for backend, (off, on, ratio, low, high) in results.items():
        print(f"{backend:<12}{off:>10.0f}{on:>10.0f}{ratio:>12.2f}x{f'{low:.2f}-{high:.2f}':>12}")
    return rows, results


if __name__ == "__main__":
    if sys.argv[1:2] == ["--child"]:
        sys.path.insert(0, HERE)
        print(json.dumps(measure(argparse.Namespace(**json.loads(sys.argv[2])), sys.argv[3] == "True")))
    else:
        main()
