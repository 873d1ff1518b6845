"""Building a big ViT and loading a checkpoint into it: time and peak memory, beside timm.

Each measurement runs in a fresh process (peak memory is a process's), engines
interleaved repeat by repeat. A row: the engine, the file format, build and load seconds
(median of the repeats, with their min-max), the ratio of build + load to timm's on the
same file in the same repeats, and the peak resident memory above the process's size
after its imports, against the model's float32 size.

    python benchmarks/checkpoint_loading.py                    # ViT-L/16, safetensors and .pth, 3 repeats
    python benchmarks/checkpoint_loading.py --arch vit_h14 --formats safetensors --repeats 2
    python benchmarks/checkpoint_loading.py --quick            # a tiny model (the tests' smoke run)

The checkpoint files (timm's layout, random weights) are written once into --folder, and
read through before each measurement, so that every engine finds it in the page cache.
"""

import argparse
import json
import math
import os
import resource
import statistics
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# keras-vit name -> (timm name, timm options): the same architecture on both sides.
ARCHS = {
    "vit_l16": ("vit_large_patch16_224", {}),
    "vit_h14": ("vit_huge_patch14_224", {}),
    "vit_b16": ("vit_base_patch16_224", {}),
    "tiny": ("vit_tiny_patch16_224", {"depth": 2, "img_size": 32}),  # --quick
}
FORMATS = {"safetensors": "model.safetensors", "pth": "pytorch_model.pth", "npz": "model.npz"}
ENGINES = ("keras-vit:jax", "keras-vit:tensorflow", "keras-vit:torch", "timm")


def _peak_mb():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # kB on Linux


def _keras_vit_model(arch):
    import keras_vit

    if arch == "tiny":
        return keras_vit.create_model("vit_ti16", image_size=32, depth=2, num_classes=1000)
    return keras_vit.create_model(arch, num_classes=1000)


def _timm_model(arch):
    sys.path.insert(0, os.path.join(REPO, "tests"))
    import torchvision_stub  # timm imports torchvision names its ViT does not use

    torchvision_stub.install()
    import timm

    name, options = ARCHS[arch]
    return timm.create_model(name, pretrained=False, **options)


def worker(engine, arch, path):
    """Imports, then measures build and load; prints one JSON line."""
    if engine.startswith("keras-vit"):
        os.environ["KERAS_BACKEND"] = engine.split(":")[1]
        import keras_vit  # noqa: F401 (the imports, before the baseline)
    else:
        import safetensors.torch  # noqa: F401
        import torch  # noqa: F401

        _timm_model("tiny")  # timm's own imports
    base = _peak_mb()
    started = time.perf_counter()
    if engine.startswith("keras-vit"):
        import keras_vit
        from keras_vit.models.deferred_init import deferred_initialization, initialize_unloaded

        # What create_model(name, weights=path) does: the weights the file replaces are not drawn.
        with deferred_initialization():
            model = _keras_vit_model(arch)
        built = time.perf_counter()
        report = keras_vit.load_weights(model, path, warn=False)
        initialize_unloaded(model, report.loaded)
        size = sum(math.prod(v.shape) * 4 for v in model.weights)
    else:
        import timm.models

        model = _timm_model(arch)
        built = time.perf_counter()
        timm.models.load_checkpoint(model, path)
        size = sum(p.numel() * 4 for p in model.state_dict().values())
    loaded = time.perf_counter()
    print(json.dumps(dict(build_s=built - started, load_s=loaded - built, peak_mb=_peak_mb() - base,
                          model_mb=size / 2**20)))  # fmt: skip


def write_checkpoints(arch, folder, formats):
    """The timm model's random weights in each format (once; kept for later runs)."""
    paths = {f: os.path.join(folder, f"{arch}.{FORMATS[f]}") for f in formats}
    missing = {f: p for f, p in paths.items() if not os.path.exists(p)}
    if missing:
        code = (
            "import sys, numpy as np, torch, safetensors.torch; sys.path.insert(0, sys.argv[1]); "
            "from checkpoint_loading import _timm_model; "
            "state = {k: v.contiguous() for k, v in _timm_model(sys.argv[2]).state_dict().items()}; "
            "import json; paths = json.loads(sys.argv[3]); "
            "'safetensors' in paths and safetensors.torch.save_file(state, paths['safetensors']); "
            "'pth' in paths and torch.save(state, paths['pth']); "
            "'npz' in paths and np.savez(paths['npz'], **{k: v.numpy() for k, v in state.items()})"
        )
        os.makedirs(folder, exist_ok=True)
        subprocess.run([sys.executable, "-c", code, os.path.dirname(__file__), arch, json.dumps(missing)], check=True)
    return paths


def _read_through(path):
    with open(path, "rb") as f:
        while f.read(1 << 24):
            pass


def run(arch, formats, engines, repeats, folder):
    paths = write_checkpoints(arch, folder, formats)
    results = {}
    for _ in range(repeats):
        for fmt, path in paths.items():
            for engine in engines:
                if engine == "timm" and fmt == "npz":
                    continue  # timm reads only the original layout from .npz
                _read_through(path)  # every engine starts with the file in the page cache
                command = [
                    sys.executable,
                    os.path.abspath(__file__),
                    "--worker",
                    engine,
                    "--arch",
                    arch,
                    "--path",
                    path,
                ]
                out = subprocess.run(
                    command, capture_output=True, text=True, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}
                )
                if out.returncode != 0:
                    raise RuntimeError(f"{engine} on {path} failed:\n{out.stderr[-3000:]}")
                results.setdefault((engine, fmt), []).append(json.loads(out.stdout.strip().splitlines()[-1]))
    rows = []
    for (engine, fmt), runs in results.items():
        peers = results.get(("timm", fmt))
        ratios = (
            [(r["build_s"] + r["load_s"]) / (p["build_s"] + p["load_s"]) for r, p in zip(runs, peers)] if peers else []
        )
        rows.append(dict(
            engine=engine, format=fmt,
            build_s=statistics.median(r["build_s"] for r in runs),
            load_s=statistics.median(r["load_s"] for r in runs),
            ratio=statistics.median(ratios) if ratios else None,
            ratio_range=(min(ratios), max(ratios)) if ratios else None,
            peak_mb=max(r["peak_mb"] for r in runs), model_mb=runs[0]["model_mb"],
        ))  # fmt: skip
    return rows


def print_table(rows, arch, repeats):
    print(f"\n{arch}: build + load of one checkpoint, {repeats} repeats (median; ratio min-max), one process each")
    print(f"{'engine':22} {'format':12} {'build s':>8} {'load s':>8} {'vs timm':>16} {'peak MB':>9} {'peak/model':>10}")
    for r in rows:
        ratio = f"{r['ratio']:.2f} ({r['ratio_range'][0]:.2f}-{r['ratio_range'][1]:.2f})" if r["ratio"] else "-"
        print(f"{r['engine']:22} {r['format']:12} {r['build_s']:8.2f} {r['load_s']:8.2f} {ratio:>16} "
              f"{r['peak_mb']:9.0f} {r['peak_mb'] / r['model_mb']:10.2f}")  # fmt: skip


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--arch", default="vit_l16", choices=sorted(ARCHS))
    parser.add_argument("--formats", default="safetensors,pth")
    parser.add_argument("--engines", default=",".join(ENGINES))
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--folder", default=os.path.join(REPO, "saved_models", "checkpoint_loading"))
    parser.add_argument("--quick", action="store_true", help="a tiny model, one repeat (a smoke run)")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--path", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        return worker(args.worker, args.arch, args.path)
    arch, repeats = ("tiny", 1) if args.quick else (args.arch, args.repeats)
    formats = [f.strip() for f in args.formats.split(",") if f.strip()]
    unknown = [f for f in formats if f not in FORMATS]
    if unknown:
        parser.error(f"unknown format(s) {unknown}; expected some of {', '.join(FORMATS)}")
    rows = run(arch, formats, [e.strip() for e in args.engines.split(",")], repeats, args.folder)
    print_table(rows, arch, repeats)
    return rows


if __name__ == "__main__":
    main()
