"""keras-vit's command line: ``keras-vit COMMAND [options]``.

Installed with the package as the ``keras-vit`` program (also ``python -m keras_vit``);
the scripts in the source tree's ``recipes/`` run the same commands. Each command is a
module here with ``main(argv)``; ``keras-vit COMMAND --help`` lists its flags and their
defaults. Bad input is one line on stderr and exit status 2, as is a feature whose
package is not installed (naming the extra that installs it); a traceback is for bugs.
The backends' own lines (TensorFlow's, XLA's, Gloo's) are held back while a command runs,
and written out before a traceback (``keras_vit/quiet.py``); ``--verbose`` or ``KERAS_VIT_VERBOSE=1``
shows them as they come. ``keras-vit --help`` and ``keras-vit presets`` import no backend,
nor do most commands' ``--help``: a command imports what it needs when it runs.

Examples:
    >>> main(["presets", "vit_ti16.augreg_in21k_ft_in1k_384"])  # doctest: +ELLIPSIS
    vit_ti16.augreg_in21k_ft_in1k_384
      file            https://storage.googleapis.com/vit_models/augreg/Ti_16-i21k-300ep-...
      ImageNet top-1  78.44% ...
    0
"""

import argparse
import difflib
import importlib
import os
import sys

from keras_vit import quiet
from keras_vit.atomic import DiskFullError
from keras_vit.commands.interrupts import run_stoppable
from keras_vit.commands.parser import CommandLineParser
from keras_vit.dependencies import MissingDependencyError, backend_problem

# command: (module, what it does); the order of ``keras-vit --help``.
COMMANDS = {
    "pretrain": ("pretrain", "pre-train a ViT with the paper's recipe (the embedded digits by default)"),
    "finetune": ("finetune", "fine-tune a pre-trained ViT at a higher resolution"),
    "launch": ("launch", "run a training command as several processes on this machine (JAX)"),
    "main": ("main_job", "the README's main job: pre-train on the digits, fine-tune at 1.5x, test accuracy"),
    "classify": ("classify", "classify image files with a model file or a pretrained preset"),
    "export": ("export", "export for serving: SavedModel, LiteRT, ONNX, .pt2, each verified"),
    "fewshot": ("fewshot", "few-shot linear evaluation of a model's representation"),
    "evaluate": ("evaluate", "an image-text model's zero-shot accuracy on a folder, or its retrieval recall"),
    "inspect": ("inspect_model", "the paper's figures: attention rollout and distance, position similarity"),
    "presets": ("presets", "the pretrained presets as a table, or one preset's card"),
}


# The commands that run without Keras' backend (its children load their own: launch).
NO_BACKEND = ("presets", "launch")


def _asks_help(argv):
    return any(word in ("-h", "--help") for word in argv[1:])


def parser(command, doc, **options):
    """A command's parser: ``keras-vit COMMAND``, the first paragraph of ``doc`` as its
    description, every flag's default in ``--help``, and ``--verbose``."""
    made = CommandLineParser(
        prog=f"keras-vit {command}",
        description=doc.strip().split("\n\n")[0],
        **options,
    )
    quiet.add_flag(made)
    return made


def comma_separated(kind, least=None):
    """An argparse type: comma-separated numbers of ``kind`` (``"1,5,10"``) as a list;
    ``least``: one or more, each at least it."""
    wanted = f"{kind.__name__}s" if least is None else f"whole numbers of {least} or more"

    def parse(text):
        try:
            values = [kind(value) for value in text.split(",") if value.strip()]
        except ValueError:
            values = None
        if values is None or least is not None and (not values or min(values) < least):
            raise argparse.ArgumentTypeError(f"expected comma-separated {wanted}; got {text!r}")
        return values

    return parse


def bad_input(error):
    """Answers bad input as every command does: one line on stderr, exit status 2."""
    print(f"error: {error}", file=sys.stderr)
    raise SystemExit(2) from None


def write_csv(path, header, rows):
    """A table as CSV at ``path``, written beside it and renamed (never half-written)."""
    import csv

    from keras_vit.atomic import atomic_path

    with atomic_path(path) as staged, open(staged, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(header)
        writer.writerows(rows)


def usage():
    """``keras-vit --help``: the commands, one a line."""
    width = max(map(len, COMMANDS))
    lines = [f"  {name:<{width}}  {about}" for name, (_, about) in COMMANDS.items()]
    return "\n".join(
        [
            "usage: keras-vit [--verbose] COMMAND [options]",
            "",
            "The Vision Transformer for Keras 3 (TensorFlow, JAX, PyTorch: set KERAS_BACKEND).",
            "",
            "commands:",
            *lines,
            "",
            "keras-vit COMMAND --help lists a command's flags and their defaults.",
            "--verbose (or KERAS_VIT_VERBOSE=1) shows the backends' own lines and warnings.",
        ]
    )


def known(name):
    """``name`` if it is a command, else ValueError naming the commands (and the closest)."""
    if name not in COMMANDS:
        close = difflib.get_close_matches(name, COMMANDS, n=1)
        hint = f" (did you mean {close[0]}?)" if close else ""
        raise ValueError(f"Unknown command {name!r}{hint}; expected one of {', '.join(COMMANDS)}.")
    return name


def command(name):
    """The module of command ``name`` (imported now: what it imports, it needs), or ``known``'s ValueError."""
    return importlib.import_module(f"keras_vit.commands.{COMMANDS[known(name)][0]}")


def main(argv=None):
    """Runs ``keras-vit`` with ``argv`` (default: the process's); returns the exit status
    (Ctrl-C and SIGTERM: one line, and 130 or 143: ``interrupts``). The backends' own lines
    are held back meanwhile, and written out before a traceback (``quiet.held``)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    with quiet.held(quiet.verbose(argv)):
        try:
            try:
                status = run_stoppable(_run, argv)
            finally:  # --help and bad input leave through SystemExit: their output is flushed too
                sys.stdout.flush()  # here, not at the interpreter's exit, where a closed pipe is a traceback
        except BrokenPipeError:
            return closed_output()
    return status


def _run(argv):
    if argv[:1] == ["--verbose"]:  # main has seen it; commands take it too
        argv = argv[1:] + ["--verbose"]
    if not argv or argv[0] in ("-h", "--help"):
        print(usage(), file=sys.stdout if argv else sys.stderr)
        return 0 if argv else 2
    if argv[0] == "--version":
        from keras_vit.version import __version__

        print(f"keras-vit {__version__}")
        return 0
    try:
        module = command(argv[0])
    except ValueError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    problem = None if argv[0] in NO_BACKEND or _asks_help(argv) else backend_problem()
    if problem is not None:  # a misspelt KERAS_BACKEND, a backend not installed: before Keras says it
        print(f"error: {problem}", file=sys.stderr)
        return 2
    try:
        status = module.main(argv[1:])
    except (MissingDependencyError, DiskFullError) as error:  # a feature's first use; a write out of space
        print(f"error: {error}", file=sys.stderr)
        return 2
    return status if isinstance(status, int) else 0  # the training commands return their run


def closed_output():
    """Answers a standard output closed by its reader (``keras-vit presets | head -1``):
    one line on stderr, exit status 2, and nothing more written (Python would otherwise try
    to flush the lost output again at exit, with a traceback)."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    print("error: standard output was closed before the command finished (its reader ended)", file=sys.stderr)
    return 2
