"""Inference and training speed of keras-vit beside its peers, measured in one run.

Rows: ViT-Ti/16, S/16 and B/16 at 224 and B/16 at 384; inference at batch 1 and 32
(the compiled ``predict_on_batch``), training at batch 32 (``train_on_batch``: forward,
backward, AdamW); float32 and ``mixed_bfloat16``. Engines:

    keras-vit:<backend>       this package on tensorflow, jax or torch
    keras-vit:torch-compiled  this package on torch through keras_vit.compile_for_inference;
                              training: export_program(training=True) under torch.compile,
                              with torch's AdamW (as the timm rows)
    keras-hub:<backend>       keras-hub's ViTImageClassifier on the same backend
    timm, timm-compile        timm's VisionTransformer in PyTorch, eager and torch.compile
    hf                        transformers' ViTForImageClassification (SDPA attention)

keras-vit is built with its own defaults, the original JAX code's tanh GELU; every peer
computes the exact (erf) GELU. ``--numerics timm`` builds keras-vit with the GELU form
and LayerNorm epsilon of the timm checkpoints (as loading them does), the peers' own
computation: on PyTorch, whose CPU tanh-GELU kernel is 3-6x slower than its erf one,
that decides some rows.

The engines of one framework run in one process: keras-vit and keras-hub on tensorflow in
one, on jax in another, and every PyTorch engine (the torch backend's Keras ones, timm, hf)
in a third. The matmul peak varies from process to process here (torch: 110-185 GFLOP/s),
so only rows measured in the same process compare. Within a process
the engines are timed in --repeats rounds, taking turns step by step (the order rotating
from round to round), so that a change in the machine's speed falls on all of them alike;
a row's time is the median over rounds of each round's median step, and each ratio comes
with its spread (min-max) over the rounds.

Each process first measures its framework's matmul peak (2048x2048, float32 and
bfloat16), so every row shows its achieved GFLOP/s as a fraction of the peak measured in the
same run. FLOPs are keras_vit.inspect.count_flops (matrix products, a multiply-add = 2;
training = 3x forward). Peak memory is the peak resident set (Linux VmHWM) while the
engine's model is built and warmed up, weights included; in the shared process, as if it
ran alone: its rise over the resident set before it was built, plus the process's resident
set before the row's first model.

    python benchmarks/speed_benchmark.py                      # everything (hours here)
    python benchmarks/speed_benchmark.py --models vit_b16@224 --modes infer_b32,train_b32
    python benchmarks/speed_benchmark.py --engines keras-vit:jax,timm --precisions float32
    python benchmarks/speed_benchmark.py --quick              # tiny model, a few steps (tests)
    # keras-vit beside keras-hub computing the same GELU (see above):
    python benchmarks/speed_benchmark.py --engines keras-vit:torch,keras-hub:torch --numerics timm
    # the compiled torch path beside timm, in one process:
    python benchmarks/speed_benchmark.py --engines keras-vit:torch-compiled,keras-vit:torch,timm,timm-compile \
        --models vit_ti16@224,vit_b16@224 --modes infer_b1,infer_b32 --precisions float32

On a GPU (a CUDA build of PyTorch, JAX with CUDA), every engine runs there by itself:
Keras places its models on the accelerator, the benchmark puts the PyTorch peers and every
engine's inputs there (no host copy is timed), times steps to their end (CUDA
synchronised), measures the peak with an 8192x8192 product and the device memory PyTorch
allocated. The ``attention`` column says which attention kernel each row ran (PyTorch's
fused flash or memory-efficient kernel, cuDNN's fused attention under JAX, or written out):

    python benchmarks/speed_benchmark.py \
        --engines keras-vit:jax,keras-vit:torch,keras-vit:torch-compiled,timm,timm-compile \
        --models vit_b16@224 --modes infer_b256,train_b256 --precisions mixed_bfloat16,float32

The table goes to stdout, the rows to --csv (default saved_models/benchmarks/speed.csv), each
row as soon as it is measured.
"""

import argparse
import csv
import dataclasses
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BACKENDS = ("tensorflow", "jax", "torch")
COMPILED = "keras-vit:torch-compiled"
ENGINES = (
    tuple(f"keras-vit:{b}" for b in BACKENDS)
    + (COMPILED,)
    + tuple(f"keras-hub:{b}" for b in BACKENDS)
    + ("timm", "timm-compile", "hf")
)
PRECISIONS = ("float32", "mixed_bfloat16")
# --numerics: keras-vit's own defaults, or the numerics of a checkpoint layout
# (keras_vit.checkpoints.layouts; named here so the parent checks it without Keras).
NUMERICS = ("default", "original", "timm", "hf")
MODES = {
    "infer_b1": ("infer", 1),
    "infer_b32": ("infer", 32),
    "train_b32": ("train", 32),
    # On a GPU batch 32 leaves ViT-B/16 a few milliseconds of work, where launch and
    # transfer overheads count: timm's benchmark uses 256.
    "infer_b256": ("infer", 256),
    "train_b256": ("train", 256),
}
DEFAULT_MODES = ("infer_b1", "infer_b32", "train_b32")
COLUMNS = (
    "engine",
    "model",
    "precision",
    "mode",
    "batch",
    "images_per_s",
    "ms_per_step",
    "ms_range",
    "gflops_per_s",
    "peak_gflops_per_s",
    "fraction_of_peak",
    "peak_rss_mb",
    "peak_device_mb",
    "attention",
    "note",
)
CSV_COLUMNS = COLUMNS + ("ms_per_repeat", "process", "numerics", "device")


@dataclasses.dataclass(frozen=True)
class Arch:
    """One benchmarked architecture: a keras-vit name and the fields every peer needs."""

    name: str
    image_size: int
    patch_size: int
    hidden_size: int
    depth: int
    num_heads: int
    mlp_dim: int
    timm_name: str


def _arch(name, timm_name, image_size, **overrides):
    import keras_vit

    spec = keras_vit.get_spec(name).replace(**overrides)
    return Arch(
        name, image_size, spec.patch_size, spec.hidden_size, spec.depth, spec.num_heads, spec.mlp_dim, timm_name
    )


# Row name -> (keras-vit name, timm name, image size, architecture overrides). Plain data,
# so that the parent process checks --models without importing Keras and a backend.
MODELS = {
    "vit_ti16@224": ("vit_ti16", "vit_tiny_patch16_224", 224, {}),
    "vit_s16@224": ("vit_s16", "vit_small_patch16_224", 224, {}),
    "vit_b16@224": ("vit_b16", "vit_base_patch16_224", 224, {}),
    "vit_b16@384": ("vit_b16", "vit_base_patch16_384", 384, {}),
    # --quick: ViT-Ti's widths, 2 blocks, 32x32 images (4 patches).
    "tiny": ("vit_ti16", "vit_tiny_patch16_224", 32, {"depth": 2}),
}


def architectures():
    """``MODELS`` resolved to ``Arch`` rows (imports keras_vit: called in engine processes)."""
    return {
        key: _arch(name, timm_name, size, **overrides) for key, (name, timm_name, size, overrides) in MODELS.items()
    }


# ---------------------------------------------------------------------------
# measuring (inside an engine's process)
# ---------------------------------------------------------------------------


def _reset_peak_rss():
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # resets VmHWM (Linux >= 4.0)
    except OSError:
        pass


def _status_mb(field):
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(f"{field}:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return float("nan")


def _peak_rss_mb():
    return _status_mb("VmHWM")


def _rss_mb():
    return _status_mb("VmRSS")


def _timings(step, warmup, min_steps, min_seconds):
    """Wall times of ``step()`` (which must block until its result exists), after warm-up."""
    for _ in range(warmup):
        step()
    times, start = [], time.perf_counter()
    while len(times) < min_steps or time.perf_counter() - start < min_seconds:
        begin = time.perf_counter()
        step()
        times.append(time.perf_counter() - begin)
    return times


def interleaved_timings(steps, repeats, min_steps, min_seconds):
    """``{name: [median seconds of each round]}`` for ``steps`` (``{name: step}``), taking turns.

    In each of ``repeats`` rounds every step runs once per turn, in an order that rotates
    from round to round, until each has run ``min_steps`` times and the round has lasted
    ``min_seconds`` per step function (split evenly over the rounds). A step that raises is
    dropped from the rounds after; its error is in ``{name: error}``, the second value.
    """
    names = list(steps)
    medians, errors = {name: [] for name in names}, {}
    for r in range(repeats):
        order = [n for n in names[r % len(names) :] + names[: r % len(names)] if n not in errors]
        times = {name: [] for name in order}
        start = time.perf_counter()
        while order and (
            min(len(times[n]) for n in order) < min_steps
            or time.perf_counter() - start < min_seconds * len(order) / repeats
        ):
            for name in list(order):
                try:
                    begin = time.perf_counter()
                    steps[name]()
                    times[name].append(time.perf_counter() - begin)
                except Exception as error:  # noqa: BLE001  (reported in the engine's row)
                    errors[name] = error
                    order.remove(name)
        for name in order:
            medians[name].append(statistics.median(times[name]))
    return medians, errors


def _best_seconds(step, warmup, min_steps, min_seconds):
    return min(_timings(step, warmup, min_steps, min_seconds))


def _matmul_peak(matmul, n, min_seconds=2.0):
    # The best of many calls, not the median: a peak is what the hardware can do, and a
    # median taken while the thread pool warms up reads low (seen here: 120 vs 160 GFLOP/s).
    return 2 * n**3 / _best_seconds(matmul, warmup=3, min_steps=1, min_seconds=min_seconds) / 1e9


def device_kind(backend):
    """Where a process's framework computes: ``"cpu"``, else its accelerator (``"cuda"``,
    ``"gpu"``, ``"tpu"``). Keras puts a model there by itself; the PyTorch peers and the
    inputs are put there by the benchmark."""
    if backend == "torch":
        import torch

        return "cuda" if torch.cuda.is_available() else "cpu"
    if backend == "jax":
        import jax

        return jax.devices()[0].platform
    import tensorflow as tf

    return "gpu" if tf.config.list_physical_devices("GPU") else "cpu"


def _peak_size(device):
    # 2048 fills a CPU's caches and cores; an accelerator needs a larger product to reach its peak.
    return 2048 if device == "cpu" else 8192


def framework_peaks(backend, device=None):
    """``{"float32": GFLOP/s, "bfloat16": GFLOP/s}``: the framework's matmul peak on ``device``
    (default: where it computes, ``device_kind``)."""
    device = device or device_kind(backend)
    if backend == "torch":
        return _torch_peaks(device)
    import numpy as np

    n = _peak_size(device)
    a = np.random.default_rng(0).normal(size=(n, n)).astype("float32")
    peaks = {}
    for dtype in ("float32", "bfloat16"):
        if backend == "tensorflow":
            import tensorflow as tf

            x = tf.cast(tf.constant(a), dtype)
            peaks[dtype] = _matmul_peak(lambda: tf.linalg.matmul(x, x).numpy(), n)
        else:
            import jax
            import jax.numpy as jnp

            x = jnp.asarray(a, dtype=dtype)
            f = jax.jit(jnp.matmul)
            peaks[dtype] = _matmul_peak(lambda: f(x, x).block_until_ready(), n)
    return peaks


def _torch_peaks(device):
    import torch

    n, peaks = _peak_size(device), {}
    for dtype in (torch.float32, torch.bfloat16):
        x = torch.randn(n, n, dtype=dtype, device=device)

        def matmul():
            torch.matmul(x, x)
            _torch_sync(device)

        with torch.no_grad():
            peaks[str(dtype).split(".")[1]] = _matmul_peak(matmul, n)
    return peaks


def _torch_sync(device):
    """Waits for the device's queued kernels: a CUDA step returns before it has run."""
    if device == "cuda":
        import torch

        torch.cuda.synchronize()


def _keras_vit_numerics(numerics):
    """keras-vit's GELU form and LayerNorm epsilon for ``--numerics``: ``{}`` for its own
    defaults (the original JAX code's tanh GELU), else a checkpoint layout's (``timm``: the
    exact GELU and 1e-6 that timm, HF here and keras-hub compute)."""
    from keras_vit.checkpoints.layouts import LAYOUTS

    return {} if numerics == "default" else dict(LAYOUTS[numerics].numerics)


def _keras_model(engine, arch, numerics):
    import keras

    if engine.startswith("keras-vit"):
        import keras_vit

        options = _keras_vit_numerics(numerics)
        return keras_vit.create_model(arch.name, image_size=arch.image_size, depth=arch.depth, **options)
    import keras_hub

    backbone = keras_hub.models.ViTBackbone(
        image_shape=(arch.image_size, arch.image_size, 3),
        patch_size=arch.patch_size,
        num_layers=arch.depth,
        num_heads=arch.num_heads,
        hidden_dim=arch.hidden_size,
        mlp_dim=arch.mlp_dim,
    )
    model = keras_hub.models.ViTImageClassifier(backbone=backbone, num_classes=1000)
    assert isinstance(model, keras.Model)
    return model


def _keras_steps(engine, arch, precision, batch, numerics, device):
    import keras
    import numpy as np

    keras.config.set_dtype_policy(precision)
    model = _keras_model(engine, arch, numerics)
    model.compile(
        optimizer=keras.optimizers.AdamW(1e-4), loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    )
    rng = np.random.default_rng(0)
    x = rng.uniform(-1, 1, size=(batch, arch.image_size, arch.image_size, 3)).astype("float32")
    y = rng.integers(0, 1000, size=(batch,))
    if engine == COMPILED:
        return (*_compiled_steps(model, x, y, device), model)
    if device != "cpu":
        # On an accelerator the inputs wait there, as the PyTorch peers' do: a copy from the
        # host at every step would be timed too (ViT-B/16's batch of 256 is 154 MB).
        x, y = keras.ops.convert_to_tensor(x), keras.ops.convert_to_tensor(y)
    return (lambda: model.predict_on_batch(x)), (lambda: model.train_on_batch(x, y)), model


def _compiled_steps(model, x, y, device):
    """keras-vit's compiled torch path: ``compile_for_inference``, and a train step compiled
    from ``export_program(training=True)`` with torch's AdamW, as the timm rows train."""
    import torch

    import keras_vit
    from keras_vit.export.torch_program import export_program

    predict = keras_vit.compile_for_inference(model)
    x, y = torch.from_numpy(x).to(device), torch.from_numpy(y).to(device)
    graph = export_program(model, training=True).module()
    forward = torch.compile(graph)
    optimizer = torch.optim.AdamW([p for p in graph.parameters() if p.requires_grad], lr=1e-4)

    def infer():
        out = predict(x)
        _torch_sync(device)
        return out

    def train():
        # The model ends in float32 under mixed_bfloat16 too (its head's policy).
        loss = torch.nn.functional.cross_entropy(forward(x), y)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return loss.item()

    return infer, train


def _torch_model(engine, arch):
    if engine == "hf":
        import transformers

        from keras_vit.checkpoints.layouts import HF_CONFIG_NAMES

        fields = dict(dataclasses.asdict(arch), layer_norm_epsilon=1e-6)
        names = {name: fields[field] for field, name in HF_CONFIG_NAMES.items() if field in fields}
        config = transformers.ViTConfig(**names, num_labels=1000, attn_implementation="sdpa")
        return transformers.ViTForImageClassification(config)
    sys.path.insert(0, os.path.join(ROOT, "tests"))
    import torchvision_stub  # timm imports torchvision names its ViT does not use; see that file

    torchvision_stub.install()
    import timm

    return timm.create_model(
        arch.timm_name, pretrained=False, img_size=arch.image_size, depth=arch.depth, num_classes=1000
    )


def _torch_steps(engine, arch, precision, batch, numerics, device):
    del numerics  # keras-vit's alone
    import torch

    model = _torch_model(engine, arch).to(device)
    forward = torch.compile(model) if engine == "timm-compile" else model
    autocast = torch.autocast(device, dtype=torch.bfloat16, enabled=precision == "mixed_bfloat16")
    x = (torch.rand(batch, 3, arch.image_size, arch.image_size) * 2 - 1).to(device)
    y = torch.randint(0, 1000, (batch,)).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)

    def logits(out):
        return out.logits if hasattr(out, "logits") else out

    def infer():
        model.eval()
        with torch.inference_mode(), autocast:
            out = logits(forward(x))
        _torch_sync(device)
        return out

    def train():
        model.train()
        with autocast:
            loss = torch.nn.functional.cross_entropy(logits(forward(x)).float(), y)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return loss.item()

    return infer, train, model


# The attention kernels a step ran, by the name of the op (PyTorch) or custom call (JAX).
_TORCH_ATTENTION = {
    "aten::_scaled_dot_product_flash_attention": "flash",
    "aten::_scaled_dot_product_flash_attention_for_cpu": "flash (cpu)",
    "aten::_scaled_dot_product_efficient_attention": "memory-efficient",
    "aten::_scaled_dot_product_cudnn_attention": "cudnn",
    "aten::_scaled_dot_product_attention_math": "math",
}


def attention_kernels(backend, engine, step, model, kind, input_shape):
    """Which attention a row's step runs: a fused kernel's name, or ``"written-out"`` (a
    softmax between two matmuls); ``"-"`` where it is not read (TensorFlow).

    PyTorch: the ops one more ``step()`` dispatches, from the profiler (compiled graphs
    too: Inductor calls the fused attention as an ATen op). JAX: the custom calls of the
    model's lowered forward pass (inference) or its gradient (training), where
    ``keras.ops.dot_product_attention`` becomes cuDNN's fused attention on a GPU (a
    ``__cudnn$fmha`` call) and a Pallas kernel on a TPU.
    """
    if backend == "torch":
        import torch

        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as profile:
            step()
        names = {event.name for event in profile.events()}
        found = sorted({label for op, label in _TORCH_ATTENTION.items() if op in names})
        return "+".join(found) or ("written-out" if names & {"aten::softmax", "aten::_softmax"} else "?")
    if backend != "jax" or not engine.startswith("keras"):
        return "-"
    import jax

    trainable = [v.value for v in model.trainable_variables]
    others = [v.value for v in model.non_trainable_variables]
    x = jax.ShapeDtypeStruct(input_shape, "float32")

    def forward(trainable, x):
        return model.stateless_call(trainable, others, x, training=kind == "train")[0]

    if kind == "train":
        text = jax.jit(jax.grad(lambda t, x: forward(t, x).astype("float32").sum())).lower(trainable, x).as_text()
    else:
        text = jax.jit(forward).lower(trainable, x).as_text()
    if "__cudnn$fmha" in text:
        return "cudnn flash" + (" (+backward)" if "Backward" in text else "")
    return "pallas (tpu)" if "tpu_custom_call" in text else "written-out"  # TPU: Keras' splash attention


def _backend(engine):
    """The Keras backend of an engine's process: its own for Keras engines, else torch."""
    return engine.split(":")[1].split("-")[0] if engine.startswith("keras") else "torch"


def run_engines(engines, models, precisions, modes, quick, min_seconds=2.0, repeats=5, numerics="default"):
    """Yields one dict per row and engine; runs in the engines' own (shared) process."""
    import keras_vit.inspect

    backend = _backend(engines[0])
    device = device_kind(backend)
    peaks = framework_peaks(backend, device)
    if any(not e.startswith("keras") for e in engines):
        import torch

        torch.manual_seed(0)
    arches = architectures()
    timing = (
        dict(warmup=1, min_steps=2, min_seconds=0.0) if quick else dict(warmup=2, min_steps=3, min_seconds=min_seconds)
    )
    for precision in precisions:
        peak = peaks["float32" if precision == "float32" else "bfloat16"]
        for key in models:
            arch = arches[key]
            flops = keras_vit.inspect.count_flops(arch.name, image_size=arch.image_size, depth=arch.depth)
            for mode in modes:
                kind, batch = MODES[mode]
                rows, steps, held = {}, {}, []
                base_rss = _rss_mb()
                for engine in engines:
                    rows[engine] = row = dict(
                        engine=engine,
                        model=key,
                        precision=precision,
                        mode=mode,
                        batch=batch,
                        peak_gflops_per_s=_significant(peak),
                        note="",
                        process=os.getpid(),
                        device=device,
                        # keras-vit's --numerics; a peer computes its own
                        numerics=numerics if engine.startswith("keras-vit") else "",
                    )
                    try:
                        before, before_device = _rss_mb(), _reset_device_peak(backend, device)
                        _reset_peak_rss()
                        make = _keras_steps if engine.startswith("keras") else _torch_steps
                        infer, train, model = make(engine, arch, precision, batch, numerics, device)
                        held.append(model)
                        step = infer if kind == "infer" else train
                        for _ in range(timing["warmup"] + (2 if batch == 1 and not quick else 0)):
                            step()
                        row["peak_rss_mb"] = round(_peak_rss_mb() - before + base_rss)
                        row["peak_device_mb"] = _device_peak_mb(backend, device, before_device)
                        steps[engine] = step
                    except Exception as error:  # noqa: BLE001  (a peer that fails here is a row, not a crash)
                        row["note"] = _note(error)
                        continue
                    try:
                        shape = (batch, arch.image_size, arch.image_size, 3)
                        row["attention"] = attention_kernels(backend, engine, step, model, kind, shape)
                    except Exception as error:  # noqa: BLE001  (the probe is a column; the row stands)
                        row["attention"] = f"unread ({type(error).__name__})"
                per_repeat, errors = interleaved_timings(
                    steps, 2 if quick else repeats, timing["min_steps"], timing["min_seconds"]
                )
                for engine, error in errors.items():
                    rows[engine]["note"] = _note(error)
                for engine, seconds_per_repeat in per_repeat.items():
                    if engine in errors or not seconds_per_repeat:
                        continue
                    seconds = statistics.median(seconds_per_repeat)
                    work = flops * batch * (3 if kind == "train" else 1)
                    rows[engine].update(
                        images_per_s=_significant(batch / seconds),
                        ms_per_step=_significant(seconds * 1e3),
                        ms_range=f"{min(seconds_per_repeat) * 1e3:.4g}-{max(seconds_per_repeat) * 1e3:.4g}",
                        ms_per_repeat=";".join(f"{t * 1e3:.4g}" for t in seconds_per_repeat),
                        gflops_per_s=_significant(work / seconds / 1e9),
                        fraction_of_peak=_significant(work / seconds / 1e9 / peak),
                    )
                yield from rows.values()
                del held, steps
                _release(any(e.startswith("keras") for e in engines))


def _reset_device_peak(backend, device):
    """The device memory allocated now, the peak counter reset (PyTorch on CUDA; else None)."""
    if backend != "torch" or device != "cuda":
        return None
    import torch

    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    return torch.cuda.memory_allocated()


def _device_peak_mb(backend, device, before):
    """The rise of the device's peak allocation over ``before``, in MB (PyTorch on CUDA: the
    other engines' models stay allocated in the shared process, so only the rise is the row's)."""
    if before is None:
        return None
    import torch

    return round((torch.cuda.max_memory_allocated() - before) / 2**20)


def _note(error):
    return f"{type(error).__name__}: {str(error).splitlines()[0][:120] if str(error) else ''}"


def _significant(value, digits=4):
    return float(f"{value:.{digits}g}")


def _release(keras_engine):
    import gc

    if keras_engine:
        import keras

        keras.backend.clear_session()
    if "torch" in sys.modules:
        import torch

        torch._dynamo.reset()  # the compiled graphs hold the row's models (their weights)
    gc.collect()


# ---------------------------------------------------------------------------
# orchestrating (the parent process)
# ---------------------------------------------------------------------------


def print_row(row):
    """A worker's way of handing one row to its parent process (see ``worker_rows``)."""
    print("ROW " + json.dumps(row), flush=True)


def worker_rows(stdout):
    """The rows in a worker's whole output (see ``print_row``)."""
    return [json.loads(line[4:]) for line in stdout.splitlines() if line.startswith("ROW ")]


def process_groups(engines):
    """The engines measured together, one list per process: those of one framework (see
    ``_backend``), in the order of their first engine."""
    groups = {}
    for engine in engines:
        groups.setdefault(_backend(engine), []).append(engine)
    return list(groups.values())


def _worker_command(engines, args):
    return [
        sys.executable,
        os.path.abspath(__file__),
        "--worker",
        ",".join(engines),
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
        "--numerics",
        args.numerics,
    ] + (["--quick"] if args.quick else [])


def _worker_env(engines):
    env = dict(os.environ)
    # transformers/timm import keras only through peers; torch is their Keras backend
    env["KERAS_BACKEND"] = _backend(engines[0])
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [ROOT, env.get("PYTHONPATH")]))
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    return env


def run_all(args):
    """Runs each process group's worker; every row is written to ``--csv`` as it arrives, so
    a run stopped part-way (a time limit, a crash) keeps the rows measured before."""
    rows = []
    for engines in process_groups(args.engines):
        print(f"# {', '.join(engines)} ...", file=sys.stderr, flush=True)
        returncode, tail = _run_worker(engines, args, lambda row: (rows.append(row), write_csv(rows, args.csv)))
        if returncode != 0:
            note = f"engine process failed (exit {returncode}): {tail[:160]}"
            rows.extend(dict(engine=engine, model="*", precision="*", mode="*", note=note) for engine in engines)
    return rows


def _run_worker(engines, args, on_row):
    """Streams a worker's rows to ``on_row``; returns its exit status and last line of output."""
    with tempfile.TemporaryFile("w+") as errors:
        process = subprocess.Popen(
            _worker_command(engines, args), env=_worker_env(engines), stdout=subprocess.PIPE, stderr=errors, text=True
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


def _cell(value):
    if value is None or value == "":
        return "-"
    if isinstance(value, float):
        return f"{value:.0f}" if abs(value) >= 1000 else f"{value:.3g}"
    return str(value)


def format_table(rows, columns=COLUMNS):
    cells = [[_cell(r.get(c)) for c in columns] for r in rows]
    widths = [max(len(c), *(len(row[i]) for row in cells)) if cells else len(c) for i, c in enumerate(columns)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(columns, widths))]
    lines += ["  ".join(v.ljust(w) for v, w in zip(row, widths)) for row in cells]
    return "\n".join(lines)


def ratios(rows):
    """keras-vit's speed over each peer's, per row measured for both (same model/precision/mode).

    ``speedup`` is keras-vit's images/s over the peer's (above 1: keras-vit is faster; its
    inverse is the latency ratio). For rows timed in the same process it is the median of
    the rounds' ratios, with their ``spread`` (min-max); rows from different processes
    compare only their medians.
    """
    index = {(r["engine"], r["model"], r["precision"], r["mode"]): r for r in rows if r.get("images_per_s")}
    out = []
    for (engine, model, precision, mode), ours in index.items():
        if not engine.startswith("keras-vit:"):
            continue
        backend = _backend(engine)
        peers = [f"keras-hub:{backend}"] + (["keras-vit:torch"] if engine == COMPILED else [])
        for peer in peers + ["timm", "timm-compile", "hf"]:
            theirs = index.get((peer, model, precision, mode))
            if not theirs:
                continue
            speedup, spread = ours["images_per_s"] / theirs["images_per_s"], "-"
            ours_ms, theirs_ms = _per_repeat(ours), _per_repeat(theirs)
            if ours.get("process") == theirs.get("process") and ours_ms and len(ours_ms) == len(theirs_ms):
                per_round = [t / o for o, t in zip(ours_ms, theirs_ms)]
                speedup, spread = statistics.median(per_round), f"{min(per_round):.3f}-{max(per_round):.3f}"
            out.append(
                dict(
                    engine=engine,
                    peer=peer,
                    model=model,
                    precision=precision,
                    mode=mode,
                    speedup=round(speedup, 3),
                    spread=spread,
                )
            )
    return out


def _per_repeat(row):
    text = row.get("ms_per_repeat") or ""
    return [float(t) for t in text.split(";") if t]


def write_csv(rows, path):
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    tmp = f"{path}.tmp"
    with open(tmp, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=CSV_COLUMNS, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)
    os.replace(tmp, path)


def _choices(text, allowed, what):
    values = [v for v in text.split(",") if v]
    unknown = [v for v in values if v not in allowed]
    if unknown or not values:
        raise SystemExit(
            f"speed_benchmark: unknown {what} {unknown or text!r}; expected a comma-separated "
            f"list of {', '.join(allowed)}."
        )
    return values


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--engines", default=",".join(ENGINES))
    parser.add_argument("--models", default="vit_ti16@224,vit_s16@224,vit_b16@224,vit_b16@384")
    parser.add_argument("--precisions", default=",".join(PRECISIONS))
    parser.add_argument(
        "--modes", default=",".join(DEFAULT_MODES), help=f"of {', '.join(MODES)} (the last two: for a GPU)"
    )
    parser.add_argument("--quick", action="store_true", help="the tiny model and a few steps (a smoke run)")
    parser.add_argument("--csv", default=os.path.join(ROOT, "saved_models", "benchmarks", "speed.csv"))
    parser.add_argument("--min-seconds", type=float, default=2.0, help="time each row for at least this long")
    parser.add_argument("--repeats", type=int, default=5, help="rounds the engines of a process take turns in")
    parser.add_argument(
        "--numerics",
        default="default",
        choices=NUMERICS,
        help="keras-vit's GELU form and LayerNorm epsilon: its defaults, or a checkpoint layout's "
        "(timm: what every peer here computes)",
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
    return args


def main(argv=None):
    """Runs the benchmark and returns its rows (a worker prints them for its parent)."""
    args = parse_args(argv)
    if args.worker:
        engines = _choices(args.worker, ENGINES, "engine")
        options = dict(min_seconds=args.min_seconds, repeats=args.repeats, numerics=args.numerics)
        for row in run_engines(engines, args.models, args.precisions, args.modes, args.quick, **options):
            print_row(row)
        return []
    rows = run_all(args)
    print(format_table(rows))
    speedups = ratios(rows)
    if speedups:
        print(
            f"\nkeras-vit images/s over the peer's, same row (keras-vit's numerics: {args.numerics}; "
            "spread: min-max over the rounds of one process):"
        )
        print(format_table(speedups, ("engine", "peer", "model", "precision", "mode", "speedup", "spread")))
    write_csv(rows, args.csv)
    print(f"\nwrote {args.csv}")
    return rows


if __name__ == "__main__":
    sys.exit(1 if any(row.get("note") for row in main()) else 0)
