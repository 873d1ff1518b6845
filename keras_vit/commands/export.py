"""Export a trained model for serving: TF SavedModel, LiteRT (TFLite), ONNX and torch.export (.pt2), each verified.

Works whatever KERAS_BACKEND you run it with, on a model file written by any backend:
on JAX or PyTorch the conversion runs in a child process with the TensorFlow backend.

    keras-vit export saved_models/run/model.keras \\
        --formats savedmodel,tflite_float32,tflite_float16,tflite_dynamic_int8,tflite_int8,onnx \\
        --output saved_models/run/export --representative-data digits

    # calibrated on your own images (a folder; its class subfolders too):
    keras-vit export saved_models/run/model.keras --formats tflite_int8 \\
        --output saved_models/run/export --representative-data photos/

    # a checkpoint (weights only) needs the architecture:
    keras-vit export ViT-B_16.npz --model vit_b16 --image-size 224 \\
        --formats savedmodel,onnx --output saved_models/vit_b16/export

Every export takes raw uint8 images (any batch size) and pre-processes them inside, with
the model's own pre-processing when it has one; a model's class names are written beside
the exports as labels.txt (one a line, in index order). Each file is written beside its
target, checked against the Keras model, and only then moved into place. An existing
export is replaced only with --overwrite. Exit status: 0 done, 2 bad input or an output
that cannot be written (nothing was done; a full disk: nothing was left behind), 1 the
export failed (nothing was left behind), 130 / 143 stopped by Ctrl-C / SIGTERM (the files
being written removed; what a run killed outright left, the next one removes).
"""

import argparse
import ast
import sys

from keras_vit import commands
from keras_vit.atomic import check_writable
from keras_vit.export.formats import FORMATS, parse_formats

# The command-line options export_model takes as they are (the same names).
_EXPORT_OPTIONS = (
    "overwrite",
    "representative_data",
    "num_representative",
    "top_k",
    "normalization",
    "model_name",
    "image_size",
    "num_classes",
    "imports",
    "verbose",
)


def _model_arg(text):
    key, sep, value = text.partition("=")
    if not sep or not key.isidentifier():
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE (e.g. gelu_approximate=False); got {text!r}")
    try:
        return key, ast.literal_eval(value)
    except (ValueError, SyntaxError):
        return key, value  # a bare string, e.g. pooling=gap


def build_parser():
    formats = "\n".join(f"  {f.name:<20} {f.description}" for f in FORMATS.values())
    parser = commands.parser("export", __doc__, epilog=f"formats:\n{formats}")  # --verbose: converters' output too
    parser.add_argument(
        "model_file",
        help="a .keras file, a local preset folder, a preset name, or a checkpoint keras_vit.load_weights reads "
        "(with --model)",
    )
    parser.add_argument("--formats", default="all", help="comma-separated format names, or 'all'")
    parser.add_argument("--output", required=True, help="folder to write into, e.g. saved_models/<run>/export")
    parser.add_argument("--overwrite", action="store_true", help="replace existing exports")
    parser.add_argument("--image-size", type=int, help="export at this input size (position embeddings resampled)")
    parser.add_argument(
        "--representative-data",
        metavar="digits|FOLDER",
        help="calibration images for tflite_int8 (and the images the exports are verified on): the embedded "
        "digits, or a folder of your images (its subfolders too, e.g. your training folder)",
    )
    parser.add_argument("--num-representative", type=int, default=300, help="calibration images")
    parser.add_argument("--model", dest="model_name", help="architecture for a checkpoint, e.g. vit_b16")
    parser.add_argument("--num-classes", type=int, help="classifier size when building from a checkpoint")
    parser.add_argument(
        "--model-arg",
        action="append",
        type=_model_arg,
        default=[],
        metavar="KEY=VALUE",
        help="further create_model option for a checkpoint (repeatable)",
    )
    parser.add_argument("--top-k", type=int, default=5, help="length of the SavedModel's top-k outputs")
    parser.add_argument(
        "--normalization",
        default="auto",
        choices=["auto", "vit", "imagenet"],
        help="auto: the model's own pre-processing (resize, crop, normalise), else vit (x / 127.5 - 1); "
        "vit or imagenet: for a model without its own (must agree with it otherwise)",
    )
    parser.add_argument(
        "--import",
        dest="imports",
        action="append",
        default=[],
        metavar="MODULE",
        help="module defining custom layers, imported first (repeatable)",
    )
    return parser


def main(argv=None):
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        check_writable(args.output, "--output")  # before the model loads: nothing to wait for
        formats = parse_formats(args.formats)
        if args.representative_data is None and args.formats == "all":
            # 'all' without calibration data: everything that needs none.
            formats = tuple(f for f in formats if not FORMATS[f].needs_representative_data)
            print("note: tflite_int8 skipped; give --representative-data (digits or a folder of images) to include it",
                  file=sys.stderr)  # fmt: skip
    except ValueError as error:
        commands.bad_input(error)
    from keras_vit.export import ExportError, export_model  # here: --help needs no backend

    try:
        options = {name: getattr(args, name) for name in _EXPORT_OPTIONS}
        result = export_model(args.model_file, args.output, formats, model_kwargs=dict(args.model_arg), **options)
    except FileExistsError as error:
        commands.bad_input(f"{error} --overwrite replaces them.")
    except ValueError as error:  # InvalidModelFileError is one too
        commands.bad_input(error)
    except ExportError as error:
        print(f"export failed, nothing was written: {error}", file=sys.stderr)
        return 1
    print(result.summary())
    return 0
