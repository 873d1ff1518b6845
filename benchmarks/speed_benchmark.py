"""Inference and training speed of keras-vit beside its peers, measured in one run.

Rows: ViT-Ti/16, S/16 and B/16 at 224 and B/16 at 384; inference at batch 1 and 32
(the compiled ``predict_on_batch``), training at batch 32 (``train_on_batch``: forward,
backward, AdamW); float32 and ``mixed_bfloat16``. Engines (one adapter module per family
in ``benchmarks/engines``):

    keras-vit:<backend>       this package on tensorflow, jax or torch
    keras-vit:torch-compiled  this package on torch through keras_vit.compile_for_inference;
                              training: export_program(training=True) under torch.compile,
                              with torch's AdamW (as the timm rows)
    keras-vit:torch-compiled-tanh   the same with the inference graph's tanh GELU kept as
                              exported (compile_for_inference's tanh_gelu_as_sigmoid=False)
    keras-hub:<backend>       keras-hub's ViTImageClassifier on the same backend
    timm, timm-compile        timm's VisionTransformer in PyTorch, eager and torch.compile
    hf                        transformers' ViTForImageClassification (SDPA attention)

keras-vit is built with its own defaults, the original JAX code's tanh GELU; every peer
computes the exact (erf) GELU. ``--numerics timm`` builds keras-vit with the GELU form
and LayerNorm epsilon of the timm checkpoints (as loading them does), the peers' own
computation; on PyTorch's CPU kernels the GELU form alone decides some rows.
``--fused-attention`` sets keras-vit's attention switch (``auto``: the layer chooses;
``0``: written out; ``1``: ``keras.ops.dot_product_attention``); a list (``0,1``) times
each keras-vit engine once per value, taking turns in one process, and the ``fused_attention``
column says which row ran which. It defaults to ``KERAS_VIT_FUSED_ATTN`` where that is set.

The engines of one framework run in one process: keras-vit and keras-hub on tensorflow in
one, on jax in another, and every PyTorch engine (the torch backend's Keras ones, timm, hf)
in a third. The matmul peak varies from process to process, so only rows measured in the
same process compare. Within a process the engines are timed in --repeats rounds, taking
turns step by step (the order rotating from round to round), so that a change in the
machine's speed falls on all of them alike; a row's time is the median over rounds of each
round's median step, and each ratio comes with its spread (min-max) over the rounds.

Each process first measures its framework's matmul peak (2048x2048, float32 and
bfloat16), so every row shows its achieved GFLOP/s as a fraction of the peak measured in the
same run. FLOPs are keras_vit.inspect.count_flops (matrix products, a multiply-add = 2;
training = 3x forward). Peak memory is the peak resident set (Linux VmHWM) while the
engine's model is built and warmed up, weights included; in the shared process, as if it
ran alone: its rise over the resident set before it was built, plus the process's resident
set before the row's first model.

    python benchmarks/speed_benchmark.py                      # everything (hours on a CPU)
    python benchmarks/speed_benchmark.py --models vit_b16@224 --modes infer_b32,train_b32
    python benchmarks/speed_benchmark.py --engines keras-vit:jax,timm --precisions float32
    python benchmarks/speed_benchmark.py --quick              # tiny model, a few steps (tests)
    # keras-vit beside keras-hub computing the same GELU (see above):
    python benchmarks/speed_benchmark.py --engines keras-vit:torch,keras-hub:torch --numerics timm
    # the compiled torch path beside timm, in one process:
    python benchmarks/speed_benchmark.py --engines keras-vit:torch-compiled,keras-vit:torch,timm,timm-compile \
        --models vit_ti16@224,vit_b16@224 --modes infer_b1,infer_b32 --precisions float32
    # compile_for_inference's GELU rewrite on and off, beside timm:
    python benchmarks/speed_benchmark.py --engines keras-vit:torch-compiled,keras-vit:torch-compiled-tanh,timm \
        --models vit_ti16@224 --modes infer_b1,infer_b8 --precisions float32
    # keras-vit's attention fused and written out, taking turns:
    python benchmarks/speed_benchmark.py --engines keras-vit:torch,timm --fused-attention 0,1

On a GPU (a CUDA build of PyTorch, JAX with CUDA), every engine runs there by itself:
Keras places its models on the accelerator, the benchmark puts the PyTorch peers and every
engine's inputs there (no host copy is timed), times steps to their end (CUDA
synchronised), measures the peak with an 8192x8192 product and the device memory PyTorch
allocated. The ``attention`` column says which attention kernel each row ran (PyTorch's
fused flash or memory-efficient kernel, cuDNN's fused attention under JAX, or written out):

    python benchmarks/speed_benchmark.py \
        --engines keras-vit:jax,keras-vit:torch,keras-vit:torch-compiled,timm,timm-compile \
        --models vit_b16@224 --modes infer_b256,train_b256 --precisions mixed_bfloat16,float32 --out-dir

The table goes to stdout, the rows to --csv, each row as soon as it is measured. --csv
defaults to saved_models/benchmarks/speed.csv; --out-dir (docs/benchmarks when given alone)
records the run as <out-dir>/<device>-<YYYY-MM-DD>/<name>.csv, the device named after the
machine's GPU or CPU (--device-name to choose), from which benchmarks/make_tables.py writes
docs/performance.md.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading

import engines
from engines.keras_steps import BACKENDS
from engines.keras_vit_engine import COMPILED, COMPILED_TANH, FUSED_ATTENTION, NUMERICS
from harness.device import device_kind, framework_peaks
from harness.measure import MODES, run_engines
from harness.models import MODELS, Arch, architectures
from harness.record import recorded_path
from harness.table import COLUMNS, CSV_COLUMNS, RATIO_COLUMNS, format_table, label, ratios, write_csv
from harness.timing import interleaved_timings
from harness.timing import timings as _timings

# Names other benchmarks (matmul_ceiling, reduced_precision) and the tests import from here.
__all__ = [
    "Arch", "BACKENDS", "COLUMNS", "COMPILED", "COMPILED_TANH", "CSV_COLUMNS", "DEFAULT_MODES", "ENGINES",
    "MODELS", "MODES", "NUMERICS", "PRECISIONS", "architectures", "device_kind", "format_table", "framework_peaks",
    "interleaved_timings", "main", "parse_args", "print_row", "ratios", "run_all", "run_engines", "worker_rows",
    "write_csv", "_timings",
]  # fmt: skip

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ENGINES = engines.ENGINES
PRECISIONS = ("float32", "mixed_bfloat16")
DEFAULT_MODES = ("infer_b1", "infer_b32", "train_b32")
FUSED_ATTENTION_ENV = "KERAS_VIT_FUSED_ATTN"  # keras_vit.layers.attention's, read without Keras
DEFAULT_CSV = os.path.join(ROOT, "saved_models", "benchmarks", "speed.csv")
RECORDS = os.path.join(ROOT, "docs", "benchmarks")


def _keras_model(engine, arch, numerics="default"):
    """The Keras model a Keras engine times (the tests read its spec)."""
    adapter = engines.adapter(engine)
    return adapter.model(arch, **({"numerics": numerics} if "numerics" in adapter.SETTINGS else {}))


# ---------------------------------------------------------------------------
# the parent process and its workers, one per process group
# ---------------------------------------------------------------------------


def print_row(row):
    """A worker's way of handing one row to its parent process (see ``worker_rows``)."""
    print("ROW " + json.dumps(row), flush=True)


def worker_rows(stdout):
    """The rows in a worker's whole output (see ``print_row``)."""
    return [json.loads(line[4:]) for line in stdout.splitlines() if line.startswith("ROW ")]


def process_groups(names):
    """The engines measured together, one list per process: those of one framework (see
    ``engines.backend``), in the order of their first engine."""
    groups = {}
    for engine in names:
        groups.setdefault(engines.backend(engine), []).append(engine)
    return list(groups.values())


def _worker_command(names, args):
    return [
        sys.executable,
        os.path.abspath(__file__),
        "--worker",
        ",".join(names),
        "--models",
        ",".join(args.models),
        "--precisions",
        ",".join(args.precisions),
        "--modes",
        ",".join(args.modes),
        "--min-seconds",
        str(args.min_seconds),
        "--repeats",
        str(args.repeats),
        "--fused-attention",
        ",".join(args.fused_attention),
        "--numerics",
        args.numerics,
    ] + (["--quick"] if args.quick else [])


def _worker_env(names):
    env = dict(os.environ)
    # transformers/timm import keras only through peers; torch is their Keras backend
    env["KERAS_BACKEND"] = engines.backend(names[0])
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [ROOT, env.get("PYTHONPATH")]))
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    return env


def run_all(args):
    """Runs each process group's worker; every row is written to ``--csv`` as it arrives, so
    a run stopped part-way (a time limit, a crash) keeps the rows measured before."""
    rows = []
    for group in process_groups(args.engines):
        print(f"# {', '.join(group)} ...", file=sys.stderr, flush=True)
        returncode, tail = _run_worker(group, args, lambda row: (rows.append(row), write_csv(rows, args.csv)))
        if returncode != 0:
            note = f"engine process failed (exit {returncode}): {tail[:160]}"
            rows.extend(dict(engine=engine, model="*", precision="*", mode="*", note=note) for engine in group)
    return rows


def _run_worker(names, args, on_row):
    """Streams a worker's rows to ``on_row``; returns its exit status and last line of output."""
    with tempfile.TemporaryFile("w+") as errors:
        process = subprocess.Popen(
            _worker_command(names, args), env=_worker_env(names), stdout=subprocess.PIPE, stderr=errors, text=True
        )
        timer = threading.Timer(args.engine_timeout, process.kill)
        timer.start()
        try:
            for line in process.stdout:
                if line.startswith("ROW "):
                    on_row(json.loads(line[4:]))
            process.wait()
        finally:
            timer.cancel()
        errors.seek(0)
        lines = errors.read().strip().splitlines()
    return process.returncode, (lines[-1] if lines else "no output")


# ---------------------------------------------------------------------------
# the command line
# ---------------------------------------------------------------------------


def _choices(text, allowed, what):
    values = [v for v in text.split(",") if v]
    unknown = [v for v in values if v not in allowed]
    if unknown or not values:
        raise SystemExit(
            f"speed_benchmark: unknown {what} {unknown or text!r}; expected a comma-separated "
            f"list of {', '.join(allowed)}."
        )
    return values


def _default_fused_attention():
    """``KERAS_VIT_FUSED_ATTN`` in ``--fused-attention``'s words, so that the column says
    what ran where the environment chose."""
    value = os.environ.get(FUSED_ATTENTION_ENV, "").strip().lower()
    words = {"": "auto", "auto": "auto", "1": "1", "true": "1", "on": "1", "0": "0", "false": "0", "off": "0"}
    if value not in words:
        raise SystemExit(f"speed_benchmark: {FUSED_ATTENTION_ENV} must be 0, 1 or auto; got {value!r}.")
    return words[value]


def _run_name(args):
    """A recorded run's file name: its processes' backends and precisions, and the settings
    that differ from the defaults."""
    short = {"float32": "fp32", "mixed_bfloat16": "bf16"}
    parts = ["speed", "+".join(engines.backend(g[0]) for g in process_groups(args.engines))]
    parts.append("+".join(short[p] for p in args.precisions))
    if args.fused_attention != ["auto"]:
        parts.append("fused" + "+".join(args.fused_attention))
    if args.numerics != "default":
        parts.append(f"numerics-{args.numerics}")
    return "_".join(parts + (["quick"] if args.quick else []))


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--engines", default=",".join(ENGINES))
    parser.add_argument("--models", default="vit_ti16@224,vit_s16@224,vit_b16@224,vit_b16@384")
    parser.add_argument("--precisions", default=",".join(PRECISIONS))
    parser.add_argument(
        "--modes", default=",".join(DEFAULT_MODES), help=f"of {', '.join(MODES)} (the last two: for a GPU)"
    )
    smoke = "the tiny model, a few steps and the peak of a small product (a smoke run)"
    parser.add_argument("--quick", action="store_true", help=smoke)
    parser.add_argument("--csv", help=f"the rows' file (default: --out-dir's, else {DEFAULT_CSV})")
    parser.add_argument(
        "--out-dir",
        nargs="?",
        const=RECORDS,
        help="record the run in OUT_DIR/<device>-<YYYY-MM-DD>/<name>.csv (alone: docs/benchmarks)",
    )
    parser.add_argument("--device-name", help="the results folder's device (default: the GPU's or CPU's name)")
    parser.add_argument("--name", help="the recorded file's name without .csv (default: from the arguments)")
    parser.add_argument("--min-seconds", type=float, default=2.0, help="time each row for at least this long")
    parser.add_argument("--repeats", type=int, default=5, help="rounds the engines of a process take turns in")
    parser.add_argument(
        "--numerics",
        default="default",
        choices=NUMERICS,
        help="keras-vit's GELU form and LayerNorm epsilon: its defaults, or a checkpoint layout's "
        "(timm: what every peer here computes)",
    )
    parser.add_argument(
        "--fused-attention",
        default=None,
        help="keras-vit's attention: auto (the layer chooses), 0 (written out), 1 (fused), or a list "
        f"of them timed taking turns (default: {FUSED_ATTENTION_ENV}, else auto)",
    )
    parser.add_argument("--engine-timeout", type=float, default=4 * 3600, help="seconds per engine process")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    args.engines = _choices(args.engines, ENGINES, "engine")
    if args.repeats < 1:
        raise SystemExit(f"speed_benchmark: expected --repeats of at least 1; got {args.repeats}.")
    args.precisions = _choices(args.precisions, PRECISIONS, "precision")
    args.modes = _choices(args.modes, tuple(MODES), "mode")
    if args.quick and "--models" not in (argv if argv is not None else sys.argv):
        args.models = "tiny"
    args.models = _choices(args.models, tuple(MODELS), "model")
    fused = args.fused_attention or _default_fused_attention()
    args.fused_attention = list(dict.fromkeys(_choices(fused, tuple(FUSED_ATTENTION), "--fused-attention value")))
    if not args.csv:
        recorded = args.out_dir and recorded_path(args.out_dir, args.name or _run_name(args), args.device_name)
        args.csv = recorded or DEFAULT_CSV
    return args


def main(argv=None):
    """Runs the benchmark and returns its rows (a worker prints them for its parent)."""
    args = parse_args(argv)
    if args.worker:
        names = _choices(args.worker, ENGINES, "engine")
        options = dict(
            min_seconds=args.min_seconds,
            repeats=args.repeats,
            numerics=args.numerics,
            fused_attention=tuple(args.fused_attention),
        )
        for row in run_engines(names, args.models, args.precisions, args.modes, args.quick, **options):
            print_row(row)
        return []
    rows = run_all(args)
    print(format_table([dict(row, engine=label(row)) for row in rows]))  # the switch's rows apart
    speedups = ratios(rows)
    if speedups:
        print(
            f"\nkeras-vit images/s over the peer's, same row (keras-vit's numerics: {args.numerics}; "
            "spread: min-max over the rounds of one process):"
        )
        print(format_table(speedups, RATIO_COLUMNS))
    write_csv(rows, args.csv)
    print(f"\nwrote {args.csv}")
    return rows


if __name__ == "__main__":
    sys.exit(1 if any(row.get("note") for row in main()) else 0)
