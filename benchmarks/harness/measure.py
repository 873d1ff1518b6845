"""One process's rows: its engines built, warmed up and timed taking turns, row by row.

Runs inside an engine process (the engines of one Keras backend share it; see
``engines.backend``). Each row's engines are built one after another, each warmed up with
its peak memory read, then timed in rounds taking turns (``timing.interleaved_timings``),
so that rows measured here compare round by round.
"""

import itertools
import os
import statistics
import sys

import engines as registry

from harness.attention import attention_kernels
from harness.device import device_kind, framework_peaks
from harness.memory import device_peak_mb, peak_rss_mb, reset_device_peak, reset_peak_rss, rss_mb
from harness.models import architectures, spec
from harness.timing import interleaved_timings

# The benchmark's modes: (what a step does, the batch size).
MODES = {
    "infer_b1": ("infer", 1),
    "infer_b8": ("infer", 8),
    "infer_b32": ("infer", 32),
    "train_b32": ("train", 32),
    # On a GPU batch 32 leaves ViT-B/16 a few milliseconds of work, where launch and
    # transfer overheads count: timm's benchmark uses 256.
    "infer_b256": ("infer", 256),
    "train_b256": ("train", 256),
}


def timed_entries(engines, settings):
    """``[(engine, its settings)]``: an engine's settings are those of ``settings`` its
    adapter honours, and a setting given as a tuple of values gives one entry per value
    (``--fused-attention 0,1``: the same engine twice, taking turns)."""
    entries = []
    for engine in engines:
        own = {k: v for k, v in settings.items() if k in registry.adapter(engine).SETTINGS}
        choices = [[(k, v) for v in (v if isinstance(v, tuple) else (v,))] for k, v in own.items()]
        entries.extend((engine, dict(combination)) for combination in itertools.product(*choices))
    return entries


def run_engines(engines, models, precisions, modes, quick, min_seconds=2.0, repeats=5, **settings):
    """Yields one dict per row and engine entry (``timed_entries``); runs in the engines'
    own (shared) process. ``settings``: the command line's engine settings (``numerics``,
    ``fused_attention``)."""
    import keras_vit.inspect

    backend = registry.backend(engines[0])
    device = device_kind(backend)
    peak_dtype = {p: "float32" if p == "float32" else "bfloat16" for p in precisions}
    peaks = framework_peaks(backend, device, tuple(dict.fromkeys(peak_dtype.values())), quick=quick)
    frameworks = {registry.adapter(e).FRAMEWORK for e in engines}
    if "torch" in frameworks:
        import torch

        torch.manual_seed(0)
    arches = architectures()
    timing = (
        dict(warmup=1, min_steps=2, min_seconds=0.0) if quick else dict(warmup=2, min_steps=3, min_seconds=min_seconds)
    )
    entries = timed_entries(engines, settings)
    for precision in precisions:
        peak = peaks[peak_dtype[precision]]
        for key in models:
            arch = arches[key]
            flops = keras_vit.inspect.count_flops(spec(arch.name, arch.image_size, depth=arch.depth))
            for mode in modes:
                kind, batch = MODES[mode]
                rows, steps, held = {}, {}, []
                base_rss = rss_mb()
                for number, (engine, own) in enumerate(entries):
                    rows[number] = row = dict(
                        engine=engine,
                        model=key,
                        precision=precision,
                        mode=mode,
                        batch=batch,
                        peak_gflops_per_s=_significant(peak),
                        note="",
                        process=os.getpid(),
                        device=device,
                        # the settings this engine honours; a peer computes its own
                        numerics=own.get("numerics", ""),
                        fused_attention=own.get("fused_attention", ""),
                    )
                    try:
                        before, before_device = rss_mb(), reset_device_peak(backend, device)
                        reset_peak_rss()
                        infer, train, model = registry.adapter(engine).steps(
                            engine, arch, precision, batch, device, **own
                        )
                        held.append(model)
                        step = infer if kind == "infer" else train
                        for _ in range(timing["warmup"] + (2 if batch == 1 and not quick else 0)):
                            step()
                        row["peak_rss_mb"] = round(peak_rss_mb() - before + base_rss)
                        row["peak_device_mb"] = device_peak_mb(before_device)
                        steps[number] = step
                    except Exception as error:  # noqa: BLE001  (a peer that fails here is a row, not a crash)
                        row["note"] = _note(error)
                        continue
                    try:
                        shape = (batch, arch.image_size, arch.image_size, 3)
                        row["attention"] = attention_kernels(backend, step, model, kind, shape)
                    except Exception as error:  # noqa: BLE001  (the probe is a column; the row stands)
                        row["attention"] = f"unread ({type(error).__name__})"
                per_repeat, errors = interleaved_timings(
                    steps, 2 if quick else repeats, timing["min_steps"], timing["min_seconds"]
                )
                for number, error in errors.items():
                    rows[number]["note"] = _note(error)
                for number, seconds_per_repeat in per_repeat.items():
                    if number in errors or not seconds_per_repeat:
                        continue
                    seconds = statistics.median(seconds_per_repeat)
                    work = flops * batch * (3 if kind == "train" else 1)
                    rows[number].update(
                        images_per_s=_significant(batch / seconds),
                        ms_per_step=_significant(seconds * 1e3),
                        ms_range=f"{min(seconds_per_repeat) * 1e3:.4g}-{max(seconds_per_repeat) * 1e3:.4g}",
                        ms_per_repeat=";".join(f"{t * 1e3:.4g}" for t in seconds_per_repeat),
                        gflops_per_s=_significant(work / seconds / 1e9),
                        fraction_of_peak=_significant(work / seconds / 1e9 / peak),
                    )
                yield from rows.values()
                del held, steps
                _release(frameworks)


def _note(error):
    return f"{type(error).__name__}: {str(error).splitlines()[0][:120] if str(error) else ''}"


def _significant(value, digits=4):
    return float(f"{value:.{digits}g}")


def _release(frameworks):
    import gc

    if "keras" in frameworks:
        import keras

        keras.backend.clear_session()
    if "torch" in sys.modules:
        import torch

        torch._dynamo.reset()  # the compiled graphs hold the row's models (their weights)
    gc.collect()
