"""Zero-shot evaluation of an image-text model (CLIP, SigLIP): its accuracy on a folder of
labelled images, or its image-text retrieval recall on a captions file.

    keras-vit evaluate hf-hub:openai/clip-vit-base-patch32 --images photos/
    keras-vit evaluate clip.keras --images photos/ --class-names names.txt --templates openai_imagenet
    keras-vit evaluate clip.keras --captions captions.csv --recall-at 1,5,10 --json recall.json

``--images``: one subfolder per class, whose name is the class's text unless
``--class-names`` gives a file with one a line in the subfolders' sorted order; each image
is scored against every class as ``classify --labels`` scores it, with ``--templates`` (an
open_clip set's name, ``openai_imagenet`` or ``simple_imagenet``, or templates with ``{}``
where the label goes). Prints ``acc1``, ``acc5`` and ``mean_per_class_recall``, as
clip_benchmark names them.

``--captions``: a CSV with ``image`` (a path relative to the file) and ``caption``
columns, a row per caption; an image may have several. Prints each ``--recall-at`` k's
``image_retrieval_recall@k`` (captions finding their image) and ``text_retrieval_recall@k``
(images finding one of their captions), as clip_benchmark counts them.

``--json`` also writes the numbers. Exit status 2: bad input, found before any image goes
through the model.
"""

import json

from keras_vit import commands
from keras_vit.atomic import atomic_path, check_writable_file


def build_parser():
    parser = commands.parser("evaluate", __doc__)
    parser.add_argument("model", help="an image-text model: a .keras file, a hub name or a folder")
    data = parser.add_mutually_exclusive_group(required=True)
    data.add_argument("--images", help="zero-shot accuracy: a folder with one subfolder of images per class")
    data.add_argument("--captions", help="retrieval recall: a CSV file of image,caption rows")
    parser.add_argument("--class-names", help="a text file: each class's text, one a line, in the subfolders' order")
    parser.add_argument(
        "--templates", nargs="+", help="openai_imagenet, simple_imagenet, or templates with {} where a label goes"
    )
    parser.add_argument(
        "--top-k",
        type=commands.comma_separated(int, least=1),
        default=[1, 5],
        help="the accuracies: a class among the k best",
    )
    parser.add_argument(
        "--recall-at",
        type=commands.comma_separated(int, least=1),
        default=[1, 5, 10],
        help="the recalls: an answer among the k best",
    )
    parser.add_argument("--batch-size", type=int, default=32, help="images (and texts) per forward pass")
    parser.add_argument("--json", help="also write the numbers here")
    return parser


def _templates(args):
    """The templates flag as ``zero_shot_accuracy`` takes it: one set's name, or a list."""
    if args.templates is None:
        return None
    return args.templates[0] if len(args.templates) == 1 and "{}" not in args.templates[0] else args.templates


def _task(args):
    """``(function, its data arguments)``: what the flags ask, each input read and checked."""
    from keras_vit.data.folder import labelled_files
    from keras_vit.evaluation import read_captions, retrieval_recall, template_set, zero_shot_accuracy
    from keras_vit.evaluation.zero_shot import class_names_from

    if args.captions is not None:
        if args.class_names is not None or args.templates is not None:
            raise ValueError(
                "--class-names and --templates go with --images; --captions ranks the captions as written."
            )
        images, captions = read_captions(args.captions)
        return retrieval_recall, dict(images=images, captions=captions, ks=args.recall_at)
    images, labels, names = labelled_files(args.images)
    templates = template_set(_templates(args))
    class_names = class_names_from(args.class_names, names)
    options = dict(class_names=class_names, templates=templates, top_k=args.top_k)
    return zero_shot_accuracy, dict(data=(images, labels), **options)


def main(argv=None):
    args = build_parser().parse_args(argv)
    try:
        if args.batch_size < 1:
            raise ValueError(f"--batch-size must be at least 1; got {args.batch_size}.")
        if args.json:
            check_writable_file(args.json, "--json")  # before the evaluation, not after it
        evaluate, data = _task(args)
        from keras_vit.factory import load_model  # here: --help needs no backend

        model = load_model(args.model, tower="pair")
    except (ValueError, OSError) as error:
        commands.bad_input(error)
    result = evaluate(model, **data, batch_size=args.batch_size)
    for name, value in result.items():
        print(f"{name:<28} {value:.4f}")
    if args.json:
        with atomic_path(args.json) as staged, open(staged, "w", encoding="utf-8") as f:
            json.dump(result, f, indent=2)
    return result
