"""Few labels on the embedded digits: pre-training without them, and distillation.

1. Three starting points for the digits recipe's ViT: random weights (from scratch), the
   paper's masked patch prediction and a masked autoencoder (MAE), both pre-trained on the
   training images without their labels; each then fine-tuned as the main job fine-tunes
   (24 px), on a tenth of each class's labelled images (``--train-fraction 0.1``) and on all
   of them, with the same updates (the tenth's epochs are as many steps as the whole's).
2. A small student (2 blocks, width 64) pre-trained with the digits recipe, distilled from
   the main job's model (hard distillation), beside the same student without a teacher.
3. The MAE step beside a full-sequence step: one training step of a masked autoencoder
   (the encoder on a quarter of the patches, then its decoder) and of the same ViT as a
   classifier on all of them, ViT-Ti/16 at 224 px, interleaved repeats.

Each seed has its own split of the digits. Rows go to ``<out-dir>/<device>-<day>/``:
``few_labels.csv``, ``distillation.csv``, ``mae_step.csv`` and their summaries.

    KERAS_BACKEND=tensorflow python benchmarks/few_labels.py --out-dir docs/benchmarks   # about 40 minutes
    python benchmarks/few_labels.py --seeds 0 --quick          # a smoke run (one epoch each)
"""

import argparse
import os
import platform
import statistics
import sys
import time

try:
    import keras_vit  # noqa: F401
except ImportError:  # run from a checkout without installing
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from main_job import read_rows, write_csv  # noqa: E402

FEW_LABELS = ("backend", "seed", "start", "labels", "pretrain_seconds", "pretrain_epoch_seconds",
              "finetune_test_accuracy", "finetune_seconds", "finetune_epoch_seconds", "machine")  # fmt: skip
DISTILLATION = ("backend", "seed", "student", "test_accuracy", "seconds", "epoch_seconds", "machine")
MAE_STEP = ("backend", "model", "batch", "step", "ms_median", "ms_min", "ms_max", "repeats", "machine")
STARTS = ("scratch", "masked_patch_prediction", "mae")
# A small MAE decoder for a 4-block, 128-wide encoder (MAE's is 512 wide and 8 deep, for ViT-L).
MAE_OPTIONS = dict(objective="mae", decoder_width=64, decoder_depth=2, decoder_heads=4)
STUDENT = dict(depth=2, hidden_size=64, num_heads=4, mlp_dim=128, representation_size=None)
# MixUp mixes labels: the self-supervised objectives pre-train without it.
SELF_SUPERVISED = dict(mixup_alpha=None)


def _median_epoch(result):
    return statistics.median(result.epoch_seconds) if result.epoch_seconds else float("nan")


def starting_points(seed, args):
    """``{start: (model file, pre-training result or None)}`` for one seed."""
    import keras

    from keras_vit.factory import save_model
    from keras_vit.layers import ImagePreprocessing
    from keras_vit.models.vit import VisionTransformer
    from keras_vit.training import make_config, pretrain

    common = dict(output_dir=args.output_dir, progress=0, seed=seed, **args.short)
    masked = pretrain(make_config("digits_pretrain", run_name=f"mpp-{seed}", objective="masked_patch_prediction",
                                  **SELF_SUPERVISED, **common))  # fmt: skip
    mae = pretrain(make_config("digits_pretrain", run_name=f"mae-{seed}", **MAE_OPTIONS, **SELF_SUPERVISED, **common))
    backbone = masked.model.backbone
    keras.utils.set_random_seed(seed)
    random = VisionTransformer(backbone.spec, preprocessing=ImagePreprocessing.from_config(
        backbone.preprocessing.get_config()), name=backbone.name)  # fmt: skip
    random_path = os.path.join(args.output_dir, f"scratch-{seed}", "model.keras")
    os.makedirs(os.path.dirname(random_path), exist_ok=True)
    save_model(random, random_path)
    return {
        "scratch": (random_path, None),
        "masked_patch_prediction": (os.path.join(masked.run_dir, "model.keras"), masked),
        "mae": (os.path.join(mae.run_dir, "model.keras"), mae),
    }


def few_label_rows(seed, args, machine):
    import keras

    from keras_vit.data import load_dataset
    from keras_vit.training import finetune, make_config

    # The whole training split's updates per epoch, for both shares: the same schedule.
    steps = max(1, load_dataset("digits", seed=seed).train.num_examples // 64)
    rows = []
    for start, (path, pre) in starting_points(seed, args).items():
        for fraction in (0.1, 1.0):
            tuned = finetune(make_config(
                "digits_finetune", run_name=f"finetune-{start}-{fraction}-{seed}", init_from=path, image_size=24,
                train_fraction=fraction, output_dir=args.output_dir, progress=0, seed=seed,
                **{"steps_per_epoch": steps, **args.short},
            ))  # fmt: skip
            rows.append({
                "backend": keras.backend.backend(), "seed": seed, "start": start, "labels": f"{fraction:.0%}",
                "pretrain_seconds": f"{pre.seconds:.1f}" if pre else "0.0",
                "pretrain_epoch_seconds": f"{_median_epoch(pre):.2f}" if pre else "",
                "finetune_test_accuracy": f"{tuned.test_accuracy:.4f}", "finetune_seconds": f"{tuned.seconds:.1f}",
                "finetune_epoch_seconds": f"{_median_epoch(tuned):.2f}", "machine": machine,
            })  # fmt: skip
    return rows


def distillation_rows(seed, teacher, args, machine):
    import keras

    from keras_vit.training import make_config, pretrain

    rows = []
    for student, extra in (("with the main job's model as teacher (hard)", dict(teacher=teacher)),
                           ("without a teacher", {})):  # fmt: skip
        name = f"student-{'teacher' if extra else 'alone'}-{seed}"
        result = pretrain(make_config("digits_pretrain", run_name=name, output_dir=args.output_dir, progress=0,
                                      seed=seed, **STUDENT, **extra, **args.short))  # fmt: skip
        rows.append({
            "backend": keras.backend.backend(), "seed": seed, "student": student,
            "test_accuracy": f"{result.test_accuracy:.4f}", "seconds": f"{result.seconds:.1f}",
            "epoch_seconds": f"{_median_epoch(result):.2f}", "machine": machine,
        })  # fmt: skip
    return rows


def mae_step_rows(args, machine, batch=16, repeats=10):
    """A masked autoencoder's training step beside the same ViT's full-sequence one."""
    import keras
    import numpy as np

    from keras_vit.models.masked_autoencoder import MaskedAutoencoder
    from keras_vit.models.registry import get_spec
    from keras_vit.models.vit import VisionTransformer

    spec = get_spec("vit_ti16").replace(num_classes=10)
    images = np.random.default_rng(0).normal(size=(batch, *spec.image_size, 3)).astype("float32")
    labels = np.zeros(batch, "int32")
    mae = MaskedAutoencoder(spec, decoder_width=128, decoder_depth=2, decoder_heads=4, seed=0, name="mae")
    mae.compile("adam")
    full = VisionTransformer(spec, name="full")
    full.compile("adam", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    steps = {
        "mae (encoder on 25% of the patches, decoder 128 wide x 2)": lambda: mae.train_on_batch(images),
        "classification (encoder on every patch)": lambda: full.train_on_batch(images, labels),
    }
    times = {name: [] for name in steps}
    for step in steps.values():  # compiled and warmed before any is timed
        step(), step()
    for _ in range(repeats if not args.quick else 2):
        for name, step in steps.items():  # interleaved: the machine's drift reaches both alike
            started = time.perf_counter()
            step()
            times[name].append((time.perf_counter() - started) * 1e3)
    return [{
        "backend": keras.backend.backend(), "model": "vit_ti16 at 224", "batch": batch, "step": name,
        "ms_median": f"{statistics.median(ms):.1f}", "ms_min": f"{min(ms):.1f}", "ms_max": f"{max(ms):.1f}",
        "repeats": len(ms), "machine": machine,
    } for name, ms in times.items()]  # fmt: skip


def summary(rows, keys, value):
    """Per group of ``keys``: the mean, standard deviation, minimum and maximum of ``value``."""
    groups = {}
    for row in rows:
        groups.setdefault(tuple(row[k] for k in keys), []).append(float(row[value]))
    out = []
    for group, values in groups.items():
        spread = statistics.stdev(values) if len(values) > 1 else 0.0
        out.append({**dict(zip(keys, group)), "seeds": len(values), f"{value}_mean": f"{statistics.mean(values):.4f}",
                    f"{value}_std": f"{spread:.4f}", f"{value}_min": f"{min(values):.4f}",
                    f"{value}_max": f"{max(values):.4f}"})  # fmt: skip
    return out


def _write(folder, name, fields, rows):
    write_csv(os.path.join(folder, f"{name}.csv"), fields, rows)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--out-dir", default=os.path.join("docs", "benchmarks"))
    parser.add_argument("--folder", default=None, help="a results folder under --out-dir (default: this machine's, "
                        "today)")  # fmt: skip
    parser.add_argument("--output-dir", default=os.path.join("saved_models", "few_labels"))
    parser.add_argument("--teacher", default=None, help="the teacher's model file (default: the main job, run once)")
    parser.add_argument("--quick", action="store_true", help="one short epoch per run: a smoke run")
    args = parser.parse_args(argv)
    args.short = dict(epochs=1, steps_per_epoch=2) if args.quick else {}

    import keras
    from harness.record import device_name, recorded_path

    folder = os.path.join(args.out_dir, args.folder) if args.folder else os.path.dirname(
        recorded_path(args.out_dir, "few_labels"))  # fmt: skip
    os.makedirs(folder, exist_ok=True)
    machine = f"{device_name()} ({os.cpu_count()} cores, {platform.machine()})"
    _write(folder, "mae_step", MAE_STEP, mae_step_rows(args, machine))
    teacher = args.teacher
    if teacher is None:
        from keras_vit.commands import main_job

        extra = ["--epochs", "1", "--steps-per-epoch", "2"] if args.quick else []
        _, tuned = main_job.main(["--seed", "0", "--progress", "0", "--output-dir", args.output_dir, *extra])
        teacher = os.path.join(tuned.run_dir, "model.keras")
    few = read_rows(os.path.join(folder, "few_labels.csv"))
    distilled = read_rows(os.path.join(folder, "distillation.csv"))
    for seed in (int(s) for s in args.seeds.split(",")):
        distilled += distillation_rows(seed, teacher, args, machine)
        _write(folder, "distillation", DISTILLATION, distilled)  # after each seed: a run stopped keeps the others
        few += few_label_rows(seed, args, machine)
        _write(folder, "few_labels", FEW_LABELS, few)
    few_summary = summary(few, ("backend", "start", "labels"), "finetune_test_accuracy")
    for row in few_summary:
        runs = [r for r in few if (r["backend"], r["start"], r["labels"]) == (row["backend"], row["start"],
                                                                                 row["labels"])]  # fmt: skip
        for field in ("pretrain_epoch_seconds", "finetune_epoch_seconds"):
            measured = [float(r[field]) for r in runs if r[field]]  # (none for a start without pre-training)
            row[field] = f"{statistics.mean(measured):.2f}" if measured else ""
    _write(folder, "few_labels_summary", list(few_summary[0]), few_summary)
    distilled_summary = summary(distilled, ("backend", "student"), "test_accuracy")
    for row in distilled_summary:
        runs = [r for r in distilled if (r["backend"], r["student"]) == (row["backend"], row["student"])]
        row["epoch_seconds"] = f"{statistics.mean(float(r['epoch_seconds']) for r in runs):.2f}"
    _write(folder, "distillation_summary", list(distilled_summary[0]), distilled_summary)
    for row in (*few_summary, *distilled_summary):
        print(", ".join(f"{k} {v}" for k, v in row.items()))
    print(f"-> {folder} ({keras.backend.backend()})")


if __name__ == "__main__":
    main()
