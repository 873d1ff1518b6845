"""The README's main job over seeds: each phase's test accuracy and time, on this backend.

Runs ``keras-vit main`` (pre-training on the embedded digits at 16 px, fine-tuning at
24 px) once per seed, each seed with its own split of the digits, and appends a row per run
to ``<out-dir>/<device>-<day>/main_job.csv``; then writes ``main_job_summary.csv`` beside
it: per backend and recipe, the fine-tuned test accuracy's mean and minimum over the seeds,
and the mean training time. Run it once per backend (``KERAS_BACKEND``) into one folder.
Extra arguments after ``--`` go to both phases (``-- --epochs 2`` for a smoke run; a
recipe's variant, named by ``--label``).

    KERAS_BACKEND=tensorflow python benchmarks/main_job.py --out-dir docs/benchmarks   # about 7 minutes
    KERAS_BACKEND=jax python benchmarks/main_job.py --out-dir docs/benchmarks --folder <the same folder>
"""

import argparse
import csv
import os
import platform
import statistics
import sys

try:
    import keras_vit  # noqa: F401
except ImportError:  # run from a checkout without installing
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

FIELDS = ("backend", "recipe", "seed", "pretrain_test_accuracy", "finetune_test_accuracy", "pretrain_seconds",
          "finetune_seconds", "training_seconds", "machine")  # fmt: skip
SUMMARY = ("backend", "recipe", "seeds", "finetune_test_accuracy_mean", "finetune_test_accuracy_min",
           "pretrain_test_accuracy_mean", "training_seconds_mean", "machine")  # fmt: skip


def run_once(seed, extra, output_dir):
    """One main job: ``(pre-training result, fine-tuning result)``."""
    from keras_vit.commands import main_job

    return main_job.main(["--seed", str(seed), "--progress", "0", "--output-dir", output_dir, *extra])


def summarise(rows):
    """One row per (backend, recipe): the fine-tuned accuracy's mean and minimum over seeds."""
    groups = {}
    for row in rows:
        groups.setdefault((row["backend"], row["recipe"], row["machine"]), []).append(row)
    out = []
    for (backend, recipe, machine), runs in groups.items():
        tuned = [float(r["finetune_test_accuracy"]) for r in runs]
        out.append({
            "backend": backend, "recipe": recipe, "seeds": " ".join(str(r["seed"]) for r in runs),
            "finetune_test_accuracy_mean": f"{statistics.mean(tuned):.4f}",
            "finetune_test_accuracy_min": f"{min(tuned):.4f}",
            "pretrain_test_accuracy_mean": f"{statistics.mean(float(r['pretrain_test_accuracy']) for r in runs):.4f}",
            "training_seconds_mean": f"{statistics.mean(float(r['training_seconds']) for r in runs):.1f}",
            "machine": machine,
        })  # fmt: skip
    return out


def write_csv(path, fields, rows):
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=fields)
        writer.writeheader()
        writer.writerows(rows)


def read_rows(path):
    if not os.path.exists(path):
        return []
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    extra = argv[argv.index("--") + 1 :] if "--" in argv else []
    argv = argv[: argv.index("--")] if "--" in argv else argv
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--label", default="main job", help="the recipe's name in the rows")
    parser.add_argument("--out-dir", default=os.path.join("docs", "benchmarks"))
    parser.add_argument(
        "--folder", default=None, help="a results folder under --out-dir (default: this machine's, today)"
    )
    parser.add_argument("--output-dir", default=os.path.join("saved_models", "main_job_benchmark"))
    args = parser.parse_args(argv)

    import keras
    from harness.record import device_name, recorded_path

    folder = os.path.join(args.out_dir, args.folder) if args.folder else os.path.dirname(
        recorded_path(args.out_dir, "main_job"))  # fmt: skip
    os.makedirs(folder, exist_ok=True)
    rows_path = os.path.join(folder, "main_job.csv")
    rows = read_rows(rows_path)
    machine = f"{device_name()} ({os.cpu_count()} cores, {platform.machine()})"
    for seed in (int(s) for s in args.seeds.split(",")):
        first, second = run_once(seed, extra, args.output_dir)
        rows.append({
            "backend": keras.backend.backend(), "recipe": args.label, "seed": seed,
            "pretrain_test_accuracy": f"{first.test_accuracy:.4f}",
            "finetune_test_accuracy": f"{second.test_accuracy:.4f}",
            "pretrain_seconds": f"{first.seconds:.1f}", "finetune_seconds": f"{second.seconds:.1f}",
            "training_seconds": f"{first.seconds + second.seconds:.1f}", "machine": machine,
        })  # fmt: skip
        write_csv(rows_path, FIELDS, rows)  # after each run: a run stopped keeps those before it
    write_csv(os.path.join(folder, "main_job_summary.csv"), SUMMARY, summarise(rows))
    for row in summarise(rows):
        print(", ".join(f"{k} {row[k]}" for k in SUMMARY))
    return rows


if __name__ == "__main__":
    main()
