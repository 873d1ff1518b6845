"""Fine-tuning techniques side by side on a transfer task that ships with the package.

A ViT (the main job's architecture) is pre-trained on the embedded digits 0-4, then
fine-tuned on the digits 5-9 from 10 training images per class, each technique over
several seeds: full fine-tuning, LoRA (rank 4 and 8), layer-wise learning-rate decay, the
weights' moving average, and a linear probe (the backbone frozen). Each fine-tuning runs
in its own process, so that its peak memory (the process's resident-set high-water mark)
is its own. Rows: test accuracy on all of 5-9's test images (mean and spread over the
seeds), trainable parameters and their share, peak memory, seconds.

    python benchmarks/transfer_experiment.py --csv docs/benchmarks/transfer.csv   # about 15 minutes
    python benchmarks/transfer_experiment.py --seeds 1 --pretrain_epochs 2 --epochs 1   # a smoke run
"""

import argparse
import csv
import json
import os
import statistics
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TECHNIQUES = {
    "full fine-tuning": {},
    "LoRA rank 4": {"lora_rank": 4},
    "LoRA rank 8": {"lora_rank": 8},
    "layer decay 0.75": {"layer_decay": 0.75},
    "moving average 0.9": {"ema": 0.9},
    "linear probe": {"freeze": "backbone"},
}
# Each fine-tuning run, in a process of its own: its result as one JSON line.
CHILD = """
import json, resource, sys
import numpy as np
from keras_vit.training import finetune, make_config
result = finetune(make_config("digits_finetune", **json.loads(sys.argv[1])))
size = lambda variables: int(sum(np.prod(v.shape) for v in variables))
print("RESULT " + json.dumps({
    "test_accuracy": result.test_accuracy, "seconds": result.seconds,
    "trainable": size(result.model.trainable_weights),
    "total": size(v for v in result.model.weights if "lora" not in v.path),  # the model's own
    "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
}))
"""


def write_folders(root):
    """digits 0-4 (all of their splits) and 5-9 (10 training images a class, all of the
    validation and test images) as class folders of PNGs: ``root/{pre,fine}/{train,validation,test}``."""
    import numpy as np
    from PIL import Image

    from keras_vit.data import load_dataset

    splits = load_dataset("digits")
    for task, classes, shots in (("pre", range(0, 5), None), ("fine", range(5, 10), 10)):
        for name in ("train", "validation", "test"):
            split = getattr(splits, name)
            for digit in classes:
                indices = np.flatnonzero(split.labels == digit)
                if name == "train" and shots:
                    indices = indices[:shots]
                folder = os.path.join(root, task, name, str(digit))
                os.makedirs(folder, exist_ok=True)
                for i in indices:
                    Image.fromarray(split.images[i]).save(os.path.join(folder, f"{i}.png"))
    return os.path.join(root, "pre"), os.path.join(root, "fine")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--output_dir", default=os.path.join(REPO, "saved_models", "transfer"))
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--pretrain_epochs", type=int, default=30)
    parser.add_argument("--epochs", type=int, default=30, help="fine-tuning epochs")
    parser.add_argument("--csv", help="write the rows here too")
    args = parser.parse_args(argv)
    sys.path.insert(0, REPO)
    import keras

    from keras_vit.training import make_config, pretrain
    from keras_vit.training.config import DATASET_DEFAULTS

    # Folders of digit images: the digits' own data settings, which a folder does not get by default.
    digits = DATASET_DEFAULTS["digits"]
    pre, fine = write_folders(os.path.join(args.output_dir, "data"))
    base = pretrain(make_config("digits_pretrain", dataset=pre, epochs=args.pretrain_epochs, progress=0,
                                output_dir=args.output_dir, run_name="pretrain-0-4", **digits))  # fmt: skip
    init = os.path.join(base.run_dir, "model.keras")
    print(f"pre-trained on 0-4: test accuracy {base.test_accuracy:.4f} -> {init}", flush=True)
    rows = []
    for technique, options in TECHNIQUES.items():
        runs = []
        for seed in range(args.seeds):
            runs_dir = os.path.join(args.output_dir, "runs")
            config = dict(init_from=init, dataset=fine, epochs=args.epochs, batch_size=16, warmup_steps=5,
                          seed=seed, progress=0, output_dir=runs_dir, **digits, **options)  # fmt: skip
            out = subprocess.run([sys.executable, "-c", CHILD, json.dumps(config)], capture_output=True, text=True,
                                 cwd=REPO)  # fmt: skip
            line = [text for text in out.stdout.splitlines() if text.startswith("RESULT ")]
            if out.returncode or not line:
                raise SystemExit(f"{technique}, seed {seed}: {out.stderr[-3000:]}")
            runs.append(json.loads(line[-1][len("RESULT ") :]))
        accuracy = [r["test_accuracy"] for r in runs]
        row = {
            "technique": technique,
            "backend": keras.backend.backend(),
            "seeds": args.seeds,
            "test_accuracy_mean": round(statistics.mean(accuracy), 4),
            "test_accuracy_spread": f"{min(accuracy):.4f}-{max(accuracy):.4f}",
            "trainable_parameters": runs[0]["trainable"],
            "trainable_share": round(runs[0]["trainable"] / runs[0]["total"], 4),
            "peak_rss_mb": round(max(r["peak_rss_mb"] for r in runs)),
            "seconds_mean": round(statistics.mean(r["seconds"] for r in runs), 1),
        }
        rows.append(row)
        print(row, flush=True)
    if args.csv:
        with open(args.csv, "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)
    print("\n| technique | test accuracy (spread) | trainable parameters | peak memory | seconds |")
    print("| --- | --- | --- | --- | --- |")
    for r in rows:
        print(f"| {r['technique']} | {r['test_accuracy_mean']:.4f} ({r['test_accuracy_spread']}) | "
              f"{r['trainable_parameters']:,} ({r['trainable_share']:.1%}) | {r['peak_rss_mb']} MB | "
              f"{r['seconds_mean']} |")  # fmt: skip
    return rows


if __name__ == "__main__":
    main()
