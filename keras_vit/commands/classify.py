"""Classify image files with a model file or a pretrained preset: the top classes of each.

    keras-vit classify vit_b16.augreg2_in21k_ft_in1k photo.jpg other.png   # downloads once
    keras-vit classify saved_models/main-finetune/model.keras digit.png --top 3
    keras-vit classify model.keras photos/ --csv predictions.csv           # a folder's images
    keras-vit classify clip.keras photo.jpg --labels "a cat,a dog"         # an image-text model

An image-text model (CLIP, SigLIP) classifies against the labels given, each written into
the templates (``--templates``; by default transformers' zero-shot pipeline's).

Each image goes through the model's own pre-processing (resize, crop, normalisation, as
its checkpoint was evaluated): presets, the recipes' models and saved presets carry one.
Prints, per image, its file and the top classes with their probabilities; the class names
are the model's own, else the ImageNet names for 1000 or 21843 classes, else the index.
Exit status 2 for bad input (a file that is not an image, an unknown model), before any
image goes through the model.
"""

import os

from keras_vit import commands
from keras_vit.atomic import check_writable_file
from keras_vit.commands.sources import image_paths
from keras_vit.images import read_image


def build_parser():
    parser = commands.parser("classify", __doc__)
    parser.add_argument("model", help="a .keras file, a local preset folder or a preset name")
    parser.add_argument("images", nargs="+", help="image files (.jpg, .png, ...) or folders of them (subfolders too)")
    parser.add_argument("--top", type=int, default=5, help="classes shown per image")
    parser.add_argument("--batch-size", type=int, default=32, help="images per forward pass")
    parser.add_argument("--csv", help="also write image,rank,index,class,probability rows here")
    parser.add_argument("--labels", help="an image-text model's labels, separated by commas")
    parser.add_argument(
        "--templates", nargs="+", help="an image-text model's templates, each with {} where a label goes"
    )
    return parser


def _images(sources):
    """(file name, uint8 image) for every file given and every image of every folder given."""
    paths = [p for source in sources for p in (image_paths(source) if os.path.isdir(source) else [source])]
    return [(path, read_image(path)) for path in paths]


def _class_names(model):
    from keras_vit.labels import LABEL_SETS

    if getattr(model, "class_names", None) is not None:
        return model
    num_classes = model.output_shape[-1]
    if num_classes in LABEL_SETS.values():
        return None  # decode_predictions picks the ImageNet set of that size
    return [str(i) for i in range(num_classes)]


def _labels(model, args):
    """``(labels, templates)`` for an image-text model, None for a classifier; a ``ValueError``
    where the flags and the model do not go together."""
    from keras_vit.models.image_text import ImageTextModel, checked_labels

    if not isinstance(model, ImageTextModel):
        if args.labels is not None or args.templates is not None:
            raise ValueError(
                f"--labels and --templates go with an image-text model (CLIP, SigLIP); {args.model} is a classifier "
                "of its own classes."
            )
        return None
    if args.labels is None:
        raise ValueError(f'{args.model} is an image-text model: it classifies against --labels (e.g. "a cat,a dog").')
    return checked_labels([label.strip() for label in args.labels.split(",")], args.templates)


def main(argv=None):
    args = build_parser().parse_args(argv)
    try:
        if args.top < 1:
            raise ValueError(f"--top must be at least 1; got {args.top}.")
        if args.batch_size < 1:
            raise ValueError(f"--batch-size must be at least 1; got {args.batch_size}.")
        if args.csv:
            check_writable_file(args.csv, "--csv")
        images = _images(args.images)
        from keras_vit.factory import load_model  # here: --help needs no backend

        model = load_model(args.model)
        labels = _labels(model, args)
        if model.preprocessing is None:
            raise ValueError(
                f"{args.model} has no pre-processing to classify raw images with: expected a preset, a "
                "recipe's model.keras or a saved preset (keras_vit.save_preset), which carry theirs."
            )
    except (ValueError, OSError) as error:
        commands.bad_input(error)
    from keras_vit.labels import decode_predictions

    pixels = [image for _, image in images]
    if labels is None:
        probabilities, names = model.classify(pixels, batch_size=args.batch_size), _class_names(model)
    else:
        probabilities, names = model.classify(pixels, *labels), labels[0]
    predictions = decode_predictions(probabilities, min(args.top, probabilities.shape[-1]), names)
    rows = []
    for (path, _), best in zip(images, predictions):
        print(path)
        for rank, (index, name, score) in enumerate(best, 1):
            print(f"  {rank}. {score:7.2%}  {name} ({index})")
            rows.append((path, rank, index, name, f"{score:.6f}"))
    if args.csv:
        commands.write_csv(args.csv, ["image", "rank", "index", "class", "probability"], rows)
    return 0
