"""How fast image-text towers encode: images and texts per second, keras-vit beside
open_clip and transformers, at ViT-B/16 CLIP and SigLIP sizes, random weights.

Rows: each pair (``clip_b16``: OpenAI CLIP ViT-B/16's towers; ``siglip_b16``: SigLIP
B/16 at 224) and task (``images_b8``: the image tower on 8 pre-processed images;
``texts_b32``: the text tower on 32 texts' ids, the context's length) and engine:

    keras-vit:<backend>   the pair's towers on tensorflow, jax or torch, each through
                          ``predict_on_batch`` (XLA on JAX and TensorFlow, eager without
                          autograd on PyTorch)
    keras-vit:torch-compiled   the towers on torch through ``keras_vit.compile_for_inference``
                          (one exported graph each, compiled by Inductor)
    open_clip             open_clip's ``encode_image`` / ``encode_text`` (PyTorch, eager)
    transformers          ``CLIPModel`` / ``SiglipModel``'s ``get_image_features`` /
                          ``get_text_features`` (PyTorch, eager, SDPA attention)

The towers' sizes are the upstreams' (transformers' configs translated by keras-vit's own
readers, as loading a checkpoint does). The engines of one framework run in one process
(PyTorch's three together), timed in ``--repeats`` rounds, taking turns
(``harness.timing.interleaved_timings``): the ratios compare engines of one process. Each
process also measures its framework's float32 matmul peak, so rows of different processes
compare by their fraction of it.

    python benchmarks/image_text_speed.py                      # everything (minutes on a CPU)
    python benchmarks/image_text_speed.py --pairs clip_b16 --engines keras-vit:torch,open_clip,transformers
    python benchmarks/image_text_speed.py --quick               # tiny towers, a few steps (tests)

The table goes to stdout, the rows to ``--csv`` (default
saved_models/benchmarks/image_text_speed.csv); ``--out-dir`` records them as the speed
benchmark does (``<out-dir>/<device>-<YYYY-MM-DD>/image_text_speed.csv``).
"""

import argparse
import csv
import json
import os
import subprocess
import sys

from harness.record import recorded_path
from harness.table import format_table
from harness.timing import interleaved_timings

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_CSV = os.path.join(ROOT, "saved_models", "benchmarks", "image_text_speed.csv")
RECORDS = os.path.join(ROOT, "docs", "benchmarks")
KERAS_ENGINES = {f"keras-vit:{backend}": backend for backend in ("tensorflow", "jax", "torch")}
KERAS_ENGINES["keras-vit:torch-compiled"] = "torch"  # compile_for_inference: torch.export, then Inductor
PEERS = ("open_clip", "transformers")  # PyTorch's, in the torch process
ENGINES = (*KERAS_ENGINES, *PEERS)
TASKS = {"images_b8": ("images", 8), "texts_b32": ("texts", 32)}
# transformers' configs of each pair (its other sizes transformers' defaults: SigLIP's are
# B/16 at 224) and open_clip's name of the same towers.
PAIRS = {
    "clip_b16": (
        "clip",
        dict(vision_config=dict(hidden_size=768, intermediate_size=3072, num_hidden_layers=12, num_attention_heads=12,
                                patch_size=16, image_size=224), projection_dim=512),
        "ViT-B-16",
    ),
    "siglip_b16": ("siglip", {}, "ViT-B-16-SigLIP"),
}  # fmt: skip
QUICK = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2)
COLUMNS = ("pair", "task", "engine", "items_per_s", "vs_open_clip", "vs_transformers", "spread", "peak_fraction")
CSV_COLUMNS = (*COLUMNS, "seconds", "s_per_round", "error")


def _config(pair, quick):
    """transformers' config of ``pair`` (tiny towers with ``quick``)."""
    import transformers

    model_type, options, _ = PAIRS[pair]
    if quick:
        options = dict(vision_config=dict(QUICK, patch_size=16, image_size=32), text_config=dict(QUICK))
    cls = transformers.CLIPConfig if model_type == "clip" else transformers.SiglipConfig
    return cls(**options)


def keras_towers(config):
    """keras-vit's image and text towers of a transformers config (random weights), read as
    loading its checkpoint reads them."""
    from keras_vit.checkpoints import transformers_config, transformers_text
    from keras_vit.models import VisionTransformer, ViTSpec
    from keras_vit.models.text_tower import text_encoder

    settings = config.to_dict()
    image = VisionTransformer(ViTSpec.from_config(transformers_config.spec_options(settings)))
    return image, text_encoder(transformers_text.text_spec(settings))


def _inputs(config, task, batch):
    import numpy as np

    rng = np.random.default_rng(0)
    if task == "images":
        size = config.vision_config.image_size
        return rng.uniform(-1, 1, (batch, size, size, 3)).astype("float32")
    text = config.text_config
    return rng.integers(0, text.vocab_size, (batch, text.max_position_embeddings)).astype("int32")


def _keras_steps(config, tasks, compiled=False):
    """``{task: step}`` of keras-vit's towers on this process's backend (``compiled``: through
    ``compile_for_inference``, on torch)."""
    towers = dict(zip(("images", "texts"), keras_towers(config)))
    steps = {}
    for name, (task, batch) in tasks.items():
        x, tower = _inputs(config, task, batch), towers[task]
        if compiled:
            from keras_vit import compile_for_inference

            run = compile_for_inference(tower)
            steps[name] = lambda run=run, x=x: run(x)
        else:
            steps[name] = lambda tower=tower, x=x: _blocked(tower.predict_on_batch(x))
    return steps


def _blocked(value):
    import keras

    return keras.ops.convert_to_numpy(value)  # the step ends when its result exists


def _torch_steps(engine, pair, config, tasks):
    """``{task: step}`` of a PyTorch peer."""
    import torch

    if engine == "open_clip":
        model = _open_clip_model(pair, config)
        encode = dict(images=model.encode_image, texts=model.encode_text)
    else:
        import transformers

        cls = transformers.CLIPModel if PAIRS[pair][0] == "clip" else transformers.SiglipModel
        model = cls._from_config(config, attn_implementation="sdpa").eval()
        encode = dict(
            images=lambda x: model.get_image_features(pixel_values=x),
            texts=lambda x: model.get_text_features(input_ids=x),
        )
    steps = {}
    for name, (task, batch) in tasks.items():
        x = _inputs(config, task, batch)
        x = torch.from_numpy(x.transpose(0, 3, 1, 2).copy() if task == "images" else x.astype("int64"))

        def step(fn=encode[task], x=x):
            with torch.inference_mode():
                return fn(x)

        steps[name] = step
    return steps


def _open_clip_model(pair, config):
    """open_clip's model of ``pair`` (its named config, or tiny towers of ``config``'s sizes)."""
    sys.path.insert(0, os.path.join(ROOT, "tests"))
    import torchvision_stub

    torchvision_stub.install()  # open_clip imports torchvision; PyPI's breaks beside the CPU torch
    import open_clip

    if config.vision_config.num_hidden_layers > 1:
        return open_clip.create_model(PAIRS[pair][2]).eval()
    vision, text = config.vision_config, config.text_config
    tiny_text = dict(context_length=text.max_position_embeddings, vocab_size=text.vocab_size, width=32, heads=2)
    tiny = dict(
        embed_dim=32,
        vision_cfg=dict(image_size=vision.image_size, layers=1, width=32, head_width=16, patch_size=16),
        text_cfg=dict(tiny_text, layers=1),
    )
    return open_clip.model.CLIP(**tiny).eval()


def _peak():
    """This process's float32 matmul peak, GFLOP/s (a 1024-sized product)."""
    import keras
    from harness.device import framework_peaks

    return framework_peaks(keras.backend.backend(), dtypes=("float32",), quick=False)["float32"]


def _flops(config, task, batch):
    """The task's forward FLOPs (matrix products, a multiply-add = 2): the tower's weights'
    products over its tokens, and attention's two products."""
    tower = config.vision_config if task == "images" else config.text_config
    tokens = (tower.image_size // tower.patch_size) ** 2 + 1 if task == "images" else tower.max_position_embeddings
    width, layers = tower.hidden_size, tower.num_hidden_layers
    per_token = layers * 2 * (4 * width * width + 2 * width * tower.intermediate_size)
    return batch * (tokens * per_token + layers * 4 * tokens * tokens * width)


def child(engines, pairs, tasks, repeats, min_seconds, quick):
    """Measures ``engines`` (one framework's) in this process; prints a ``ROW`` per row."""
    peak = 0.0 if quick else _peak()
    chosen = {name: TASKS[name] for name in tasks}
    for pair in pairs:
        config = _config(pair, quick)
        steps = {}
        for engine in engines:
            if engine in KERAS_ENGINES:
                made = _keras_steps(config, chosen, compiled=engine.endswith("compiled"))
            else:
                made = _torch_steps(engine, pair, config, chosen)
            for task, step in made.items():
                step()  # warm-up: tracing, compiling
                steps[(engine, task)] = step
        for task, (kind, batch) in chosen.items():
            mine = {engine: steps[(engine, task)] for engine in engines}
            medians, errors = interleaved_timings(mine, repeats, min_steps=1 if quick else 3, min_seconds=min_seconds)
            for engine in engines:
                if engine in errors:
                    print("ROW " + json.dumps(dict(pair=pair, task=task, engine=engine, error=str(errors[engine]))))
                    continue
                seconds = sorted(medians[engine])[len(medians[engine]) // 2]
                fraction = _flops(config, kind, batch) / seconds / 1e9 / peak if peak else None
                row = dict(pair=pair, task=task, engine=engine, seconds=seconds, items_per_s=batch / seconds,
                           rounds=medians[engine], peak_fraction=fraction)  # fmt: skip
                print("ROW " + json.dumps(row), flush=True)


def _ratios(rows):
    """keras-vit's PyTorch rows' speed over each peer's (the median of the rounds' ratios, and
    their spread)."""
    by = {(r["pair"], r["task"], r["engine"]): r for r in rows if "error" not in r}
    for row in rows:
        if "error" in row or KERAS_ENGINES.get(row["engine"]) != "torch":
            continue  # only engines of one process compare: the peers are PyTorch's
        spreads = []
        for peer in PEERS:
            theirs = by.get((row["pair"], row["task"], peer))
            if theirs is None:
                continue
            per_round = sorted(t / m for m, t in zip(row["rounds"], theirs["rounds"]))
            row[f"vs_{peer}"] = per_round[len(per_round) // 2]
            spreads.append(f"{per_round[0]:.2f}-{per_round[-1]:.2f}")
        row["spread"] = ", ".join(spreads) or None
    return rows


def write_csv(rows, path):
    """The rows to ``path``, replacing it whole (a reader never sees half a file)."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(f"{path}.tmp", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=CSV_COLUMNS, extrasaction="ignore")
        writer.writeheader()
        writer.writerows({**r, "s_per_round": ";".join(f"{t:.6g}" for t in r.get("rounds", []))} for r in rows)
    os.replace(f"{path}.tmp", path)


def _groups(engines):
    groups = {}
    for engine in engines:
        groups.setdefault(KERAS_ENGINES.get(engine, "torch"), []).append(engine)
    return groups


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pairs", default=",".join(PAIRS), help=f"of {', '.join(PAIRS)}")
    parser.add_argument("--tasks", default=",".join(TASKS), help=f"of {', '.join(TASKS)}")
    parser.add_argument("--engines", default=",".join(ENGINES), help=f"of {', '.join(ENGINES)}")
    parser.add_argument("--repeats", type=int, default=5, help="rounds of turns")
    parser.add_argument("--min-seconds", type=float, default=3.0, help="time per engine and task, over the rounds")
    parser.add_argument("--quick", action="store_true", help="tiny towers, a few steps (a smoke run)")
    parser.add_argument("--csv", default=DEFAULT_CSV, help="where the rows go")
    parser.add_argument("--out-dir", nargs="?", const=RECORDS, help="also record the run under this folder")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    for name, known in (("pairs", PAIRS), ("tasks", TASKS), ("engines", ENGINES)):
        values = [v for v in getattr(args, name).split(",") if v]
        unknown = [v for v in values if v not in known]
        if unknown or not values:
            parser.error(f"--{name}: expected some of {', '.join(known)}; got {getattr(args, name)!r}")
        setattr(args, name, values)
    if args.quick:
        args.repeats, args.min_seconds = min(args.repeats, 2), 0.0
    return args


def main(argv=None):
    args = parse_args(argv)
    if args.child:
        child(args.engines, args.pairs, args.tasks, args.repeats, args.min_seconds, args.quick)
        return []
    rows = []
    for backend, engines in _groups(args.engines).items():
        command = [sys.executable, os.path.abspath(__file__), "--child", backend, "--engines", ",".join(engines),
                   "--pairs", ",".join(args.pairs), "--tasks", ",".join(args.tasks), "--repeats", str(args.repeats),
                   "--min-seconds", str(args.min_seconds), *(["--quick"] if args.quick else [])]  # fmt: skip
        env = dict(os.environ, KERAS_BACKEND=backend, TF_CPP_MIN_LOG_LEVEL="3")
        done = subprocess.run(command, env=env, capture_output=True, text=True, cwd=ROOT)
        found = [json.loads(line[4:]) for line in done.stdout.splitlines() if line.startswith("ROW ")]
        if done.returncode != 0 and not found:
            raise SystemExit(f"the {backend} process failed:\n{done.stderr[-3000:]}")
        rows += found
    rows = _ratios(rows)
    print(format_table(rows, COLUMNS))
    paths = [args.csv] + ([recorded_path(args.out_dir, "image_text_speed")] if args.out_dir else [])
    for path in paths:
        write_csv(rows, path)
    return rows


if __name__ == "__main__":
    main()
