"""Classify image files with a model file or a pretrained preset: the top classes of each.

    keras-vit classify vit_b16.augreg2_in21k_ft_in1k photo.jpg other.png   # downloads once
    keras-vit classify saved_models/main-finetune/model.keras digit.png --top 3
    keras-vit classify model.keras photos/ --csv predictions.csv           # a folder's images

Each image goes through the model's own pre-processing (resize, crop, normalisation, as
its checkpoint was evaluated): presets, the recipes' models and saved presets carry one.
Prints, per image, its file and the top classes with their probabilities; the class names
are the model's own, else the ImageNet names for 1000 or 21843 classes, else the index.
Exit status 2 for bad input (a file that is not an image, an unknown model), before any
image goes through the model.
"""

import csv
import os
import sys

from keras_vit import commands
from keras_vit.commands.sources import load_any_model, read_folder, read_image


def build_parser():
    parser = commands.parser("classify", __doc__)
    parser.add_argument("model", help="a .keras file, a local preset folder or a preset name")
    parser.add_argument("images", nargs="+", help="image files (.jpg, .png, ...) or folders of them")
    parser.add_argument("--top", type=int, default=5, help="classes shown per image")
    parser.add_argument("--batch_size", type=int, default=32, help="images per forward pass")
    parser.add_argument("--csv", help="also write image,rank,index,class,probability rows here")
    return parser


def _images(sources):
    """(file name, uint8 image) for every file given and every image of every folder given."""
    found = []
    for source in sources:
        if os.path.isdir(source):
            from keras_vit.data import IMAGE_EXTENSIONS

            names = sorted(n for n in os.listdir(source) if n.lower().endswith(IMAGE_EXTENSIONS))
            found += zip((os.path.join(source, n) for n in names), read_folder(source))
        else:
            found.append((source, read_image(source)))
    return found


def _class_names(model):
    from keras_vit.labels import LABEL_SETS

    if getattr(model, "class_names", None) is not None:
        return model
    num_classes = model.output_shape[-1]
    if num_classes in LABEL_SETS.values():
        return None  # decode_predictions picks the ImageNet set of that size
    return [str(i) for i in range(num_classes)]


def main(argv=None):
    args = build_parser().parse_args(argv)
    try:
        if args.top < 1:
            raise ValueError(f"--top must be at least 1; got {args.top}.")
        if args.batch_size < 1:
            raise ValueError(f"--batch_size must be at least 1; got {args.batch_size}.")
        images = _images(args.images)
        model = load_any_model(args.model)
        if model.preprocessing is None:
            raise ValueError(
                f"{args.model} has no pre-processing to classify raw images with: expected a preset, a "
                "recipe's model.keras or a saved preset (keras_vit.save_preset), which carry theirs."
            )
    except (ValueError, OSError) as error:
        print(f"error: {error}", file=sys.stderr)
        raise SystemExit(2) from None
    from keras_vit.labels import decode_predictions

    probabilities = model.classify([image for _, image in images], batch_size=args.batch_size)
    predictions = decode_predictions(probabilities, args.top, _class_names(model))
    rows = []
    for (path, _), best in zip(images, predictions):
        print(path)
        for rank, (index, name, score) in enumerate(best, 1):
            print(f"  {rank}. {score:7.2%}  {name} ({index})")
            rows.append((path, rank, index, name, f"{score:.6f}"))
    if args.csv:
        from keras_vit.saving import atomic_path

        with atomic_path(args.csv) as path, open(path, "w", newline="") as f:
            writer = csv.writer(f)
            writer.writerow(["image", "rank", "index", "class", "probability"])
            writer.writerows(rows)
    return 0
