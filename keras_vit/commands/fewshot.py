"""Few-shot linear evaluation of a model's frozen representation (the paper's section 4).

    keras-vit fewshot saved_models/main-pretrain/model.keras          # embedded digits
    keras-vit fewshot vit_b16.augreg_in21k --dataset cifar100 --shots 1,5,10,25
    keras-vit fewshot model.keras --dataset path/to/folder --l2 0.25,1,4,16,64,256,1024

k training images per class (1, 5, 10 and 25 by default, over 5 seeds) fit a closed-form
regularised least-squares probe on the pre-logits representation; the test split gives the
accuracy. ``--l2`` is big_vision's 1024, or a list to choose from on the validation split.
The model is a ``.keras`` file, a local preset folder or a preset name; the dataset any
the recipes read. Prints the table; ``--csv`` also writes it. Exit status 2: bad input,
found before any image goes through the model.
"""

from keras_vit import commands
from keras_vit.atomic import check_writable_file
from keras_vit.evaluation.fewshot_defaults import DEFAULT_L2, DEFAULT_SHOTS


def build_parser():
    parser = commands.parser("fewshot", __doc__)
    parser.add_argument("model", help="a .keras file, a local preset folder or a preset name")
    parser.add_argument("--dataset", default="digits", help="digits (embedded), a folder, or a tfds name")
    parser.add_argument("--data-dir", help="where tensorflow-datasets keeps its data (none: its own default)")
    parser.add_argument(
        "--shots", type=commands.comma_separated(int), default=list(DEFAULT_SHOTS), help="images per class, k"
    )
    parser.add_argument("--seeds", type=int, default=5, help="k-shot sets drawn per k")
    parser.add_argument(
        "--l2",
        type=commands.comma_separated(float),
        default=[DEFAULT_L2],
        help="the probe's L2 regularisation: one value, or several to choose from on the validation split",
    )
    parser.add_argument("--batch-size", type=int, default=256, help="images per forward pass")
    parser.add_argument("--csv", help="also write the table here")
    return parser


def main(argv=None):
    args = build_parser().parse_args(argv)
    from keras_vit.data import load_dataset  # here: --help needs no backend
    from keras_vit.evaluation.fewshot import check_shots, fewshot_linear_eval
    from keras_vit.factory import load_model
    from keras_vit.inspect.attention import check_vit

    try:
        if args.seeds < 1:
            raise ValueError(f"--seeds must be at least 1; got {args.seeds}.")
        if args.csv:
            check_writable_file(args.csv, "--csv")  # before the evaluation, not after it
        model = load_model(args.model, tower="image")  # an image-text model: its image tower's features
        check_vit(model, args.model)
        splits = load_dataset(args.dataset, data_dir=args.data_dir)
        train = splits.train
        labels = train.labels if train.labels is not None else [y for _, y in train.as_dataset().as_numpy_iterator()]
        check_shots(labels, args.shots, splits.info.num_classes)
    except (ValueError, OSError) as error:
        commands.bad_input(error)
    validation = splits.validation if len(args.l2) > 1 else None
    result = fewshot_linear_eval(model, train, splits.test, args.shots, args.seeds, args.l2, validation,
                                 batch_size=args.batch_size)  # fmt: skip
    print(f"{model.name} on {args.dataset} ({result.num_test} test images): few-shot linear accuracy")
    print(result.table())
    if args.csv:
        rows = [(shots, seed, f"{v:.6f}", result.l2[shots]) for shots, values in result.accuracy.items()
                for seed, v in enumerate(values)]  # fmt: skip
        commands.write_csv(args.csv, ["shots", "seed", "accuracy", "l2"], rows)
    return result
