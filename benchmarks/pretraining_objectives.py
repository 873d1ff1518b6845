"""Pre-training objectives side by side on the embedded digits: few-shot, then fine-tuned.

Three starting points for the same ViT (the main job's architecture): supervised
pre-training (the main job's first phase), masked patch prediction (the paper's
self-supervision, the same schedule, labels unused) and no pre-training (random weights).
For each, the paper's few-shot linear accuracy of the frozen representation on the test
split (1, 5 and 10 shots over 5 seeds; mean and spread), then the test accuracy after the
main job's fine-tuning at 24x24.

    python benchmarks/pretraining_objectives.py                # about 20 minutes on 2 CPU cores
    python benchmarks/pretraining_objectives.py --epochs 2 --finetune_epochs 1   # a smoke run

Runs are written under ``--output_dir`` (default ``saved_models/objectives``).
"""

import argparse
import os
import sys

try:
    import keras_vit
except ImportError:  # run from a checkout without installing
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    import keras_vit

import keras  # noqa: E402

from keras_vit.data import load_dataset
from keras_vit.evaluation import fewshot_linear_eval
from keras_vit.factory import save_model
from keras_vit.layers import ImagePreprocessing
from keras_vit.training import finetune, make_config, pretrain

OBJECTIVES = ("supervised", "masked_patch_prediction", "none (random)")


def pretrained_models(args):
    """``{objective: (path of its model.keras, the ViT)}``."""
    options = dict(output_dir=args.output_dir, progress=0, seed=args.seed)
    if args.epochs:
        options["epochs"] = args.epochs
    supervised = pretrain(make_config("digits_pretrain", run_name="supervised", **options))
    masked = pretrain(make_config("digits_pretrain", run_name="masked_patch_prediction",
                                  objective="masked_patch_prediction", **options))  # fmt: skip
    vit = supervised.model
    random = keras_vit.VisionTransformer(vit.spec, preprocessing=ImagePreprocessing.from_config(
        vit.preprocessing.get_config()), class_names=vit.class_names, name=vit.name)  # fmt: skip
    random_path = os.path.join(args.output_dir, "random", "model.keras")
    os.makedirs(os.path.dirname(random_path), exist_ok=True)
    save_model(random, random_path)
    return {
        "supervised": (os.path.join(supervised.run_dir, "model.keras"), vit),
        "masked_patch_prediction": (os.path.join(masked.run_dir, "model.keras"), masked.model.backbone),
        "none (random)": (random_path, random),
    }


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--epochs", type=int, default=None, help="pre-training epochs (default: the preset's 50)")
    parser.add_argument("--finetune_epochs", type=int, default=None, help="default: the preset's 20")
    parser.add_argument("--shots", default="1,5,10")
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0, help="the training runs' seed")
    parser.add_argument("--output_dir", default=os.path.join("saved_models", "objectives"))
    args = parser.parse_args(argv)
    shots = [int(k) for k in args.shots.split(",")]
    splits = load_dataset("digits")
    rows = []
    for objective, (path, vit) in pretrained_models(args).items():
        fewshot = fewshot_linear_eval(vit, splits.train, splits.test, shots, args.seeds).summary()
        # At 24 px, 1.5x the pre-training size, as the main job fine-tunes.
        options = dict(output_dir=args.output_dir, progress=0, seed=args.seed, init_from=path, image_size=24)
        if args.finetune_epochs:
            options["epochs"] = args.finetune_epochs
        tuned = finetune(make_config("digits_finetune", run_name=f"finetune-{objective.split()[0]}", **options))
        rows.append((objective, fewshot, tuned.test_accuracy))
    print(f"\nbackend {keras.backend.backend()}: digits test split, few-shot over {args.seeds} seeds")
    header = f"{'pre-training':<26}" + "".join(f"{f'{k}-shot':>16}" for k in shots) + f"{'fine-tuned':>12}"
    print(header)
    for objective, fewshot, tuned in rows:
        cells = "".join(f"{f'{fewshot[k][0]:.3f} ± {fewshot[k][1]:.3f}':>16}" for k in shots)
        print(f"{objective:<26}{cells}{tuned:>12.4f}")
    return rows


if __name__ == "__main__":
    main()
