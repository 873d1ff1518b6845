"""The training commands' flags (``keras-vit pretrain``, ``finetune``, ``main``): every
``RecipeConfig`` field and every ``ViTSpec`` option a recipe sets, each described by its
field's ``help`` metadata, in the groups of ``keras_vit.training.config.GROUPS``.

A value stays text until the whole line is read; ``parse_args`` then gives each its
field's type and builds the ``RecipeConfig``, whose checks refuse a value out of range
before any data is read.
"""

import argparse
import sys
import types
import typing

from keras_vit import commands
from keras_vit.checks import flag
from keras_vit.commands.parser import shown
from keras_vit.training.config import (
    CHOICES,
    FIELDS,
    GROUPS,
    MODEL_OPTIONS,
    make_config,
    option_field,
    unknown_keys_message,
)
from keras_vit.training.errors import RecipeInputError
from keras_vit.training.recipe_presets import DEFAULT_RECIPES, PRESETS, default_recipe

EVERY_FIELD = (
    " Every RecipeConfig field and every ViTSpec option is a flag (--learning-rate 3e-4; the underscore spelling, "
    "--learning_rate, is the same flag)."
)
RECIPE_HELP = (
    "the recipe whose values are the defaults below: digits_* train on the embedded digits in minutes on a CPU, "
    "paper_* are the paper's ImageNet-scale recipes (default: %s)"
)


def build_parser(command, default_preset, doc=None):
    """The parser of ``keras-vit COMMAND``: ``--recipe NAME`` and every field as a flag in its
    group, each with its value in ``default_preset`` shown as its default (a flag not given is
    not in the result). ``--preset NAME``, the old spelling of ``--recipe``, is taken with a
    warning (elsewhere ``--preset`` names pretrained weights).

    >>> help = " ".join(build_parser("pretrain", "digits_pretrain").format_help().split())
    >>> "--depth INT number of Transformer blocks (default: 4)" in help
    True
    """
    parser = commands.parser(command, (doc or "A keras-vit recipe.").strip().split("\n\n")[0] + EVERY_FIELD)
    shown_default = DEFAULT_RECIPES.get(default_preset, default_preset).replace("%", "%%")
    parser.add_argument("--recipe", default=None, choices=sorted(PRESETS), help=RECIPE_HELP % shown_default)
    parser.add_argument("--preset", dest="old_recipe", default=argparse.SUPPRESS, help=argparse.SUPPRESS)
    defaults = make_config(default_preset)
    for title, names in GROUPS.items():
        group = parser.add_argument_group(title)
        for name in names:
            if name in FIELDS:
                _add_flag(parser, group, FIELDS[name], getattr(defaults, name))
            elif name in MODEL_OPTIONS:
                _add_flag(parser, group, MODEL_OPTIONS[name], defaults.model_options.get(name, "the model's"))
            else:
                _add_flag(parser, group, option_field(name), getattr(defaults.mae_spec, name))
    return parser


def _kind(field):
    """A field's type without ``| None``."""
    if typing.get_origin(field.type) in (typing.Union, types.UnionType):
        return next(a for a in typing.get_args(field.type) if a is not type(None))
    return field.type


def _add_flag(parser, group, field, default):
    """``--<name>`` (hyphens; ``--<name_with_underscores>`` taken too) with its field's help,
    its choices or its type shown, and ``default``; ``--name`` / ``--no-name`` for a
    true/false field. Every value stays text here, parsed by ``_value``."""
    name = flag(field.name)
    text = f"{field.metadata['help']} (default: {shown(default)}".replace("%", "%%")  # argparse formats help with %
    optional = _kind(field) is not field.type
    if _kind(field) is bool:
        parser.add_switch(group, name, field.name, f"{text}; --no-{name[2:]}: false)", optional)
        return
    options = dict(dest=field.name, default=argparse.SUPPRESS, help=f"{text})")
    if field.name in CHOICES:
        group.add_argument(name, choices=[str(c) for c in CHOICES[field.name]] + (["none"] if optional else []),
                           **options)  # fmt: skip
    else:
        metavar = "INT[,INT...]" if _kind(field) is typing.Any else _kind(field).__name__.upper().replace("STR", "TEXT")
        group.add_argument(name, metavar=metavar, **options)


def _value(text, field):
    """A flag's text as its field's type: ``none`` for a field that may be None, ``true`` /
    ``false`` (``yes``, ``1``, ...) for a switch."""
    kind = _kind(field)
    if kind is not field.type and text.lower() in ("none", "null", ""):  # X | None
        return None
    if kind is bool:
        if text.lower() in ("1", "true", "yes", "on"):
            return True
        if text.lower() in ("0", "false", "no", "off"):
            return False
        raise ValueError(f"{flag(field.name)} expects true or false, got {text!r}.")
    if kind is typing.Any:  # a count or a tuple of them: "16" or "16,12"
        return _integers(text, field)
    try:
        return kind(text)
    except ValueError:
        raise ValueError(f"{flag(field.name)} expects {kind.__name__}, got {text!r}.") from None


def _integers(text, field):
    """``"16"`` -> 16, ``"16,12"`` -> (16, 12)."""
    try:
        values = tuple(int(part) for part in text.split(","))
    except ValueError:
        raise ValueError(f"{flag(field.name)} expects an integer or integers joined by commas, got {text!r}.") from None
    return values[0] if len(values) == 1 else values


def _recipe(args):
    """The recipe asked for: ``--recipe``, or the old ``--preset`` with a warning; None if neither."""
    old = getattr(args, "old_recipe", None)
    if old is None:
        return args.recipe
    if old not in PRESETS:
        raise ValueError(
            f"--preset {old!r}: the training commands take a recipe as --recipe (one of {', '.join(sorted(PRESETS))}) "
            f"and pretrained weights as --init-from {old}."
        )
    print(f"warning: --preset {old} is --recipe {old} now (--preset names pretrained weights).", file=sys.stderr)
    return old


def parse_args(argv, default_preset, command=None, doc=None):
    """Command line -> ``RecipeConfig``: ``--recipe NAME`` plus ``--<field> VALUE`` pairs.
    ``command`` names the program in its messages (default: the recipe's kind, ``pretrain``
    or ``finetune``); the first paragraph of ``doc`` heads ``--help``.

    >>> config = parse_args(["--learning_rate", "3e-4", "--no-resume", "--depth=2"], "digits_pretrain")
    >>> config.learning_rate, config.resume, config.model_options["depth"]
    (0.0003, False, 2)
    """
    parser = build_parser(command or default_preset.rpartition("_")[2], default_preset, doc)
    args, unknown = parser.parse_known_args(argv)
    if unknown:
        keys = [u[2:].split("=")[0].replace("-", "_") for u in unknown if u.startswith("--")]
        raise ValueError(unknown_keys_message(keys or unknown, flags=True))
    overrides = {
        name: _value(text, option_field(name))
        for name, text in vars(args).items()
        if name not in ("recipe", "old_recipe", "verbose")
    }
    recipe = _recipe(args) or default_recipe(default_preset, overrides.get("dataset"))
    return make_config(recipe, **overrides)


def run_command_line(recipe, argv, default_preset, command=None, doc=None):
    """``recipe(parse_args(argv, default_preset))`` for a command's ``main``: bad input (flags,
    values, and what the recipe finds before its first step) is one line on stderr and exit
    status 2; anything later is a bug and keeps its traceback. ``recipe`` is the recipe's
    function or its name in ``keras_vit.training.run``, imported once the flags are read (so
    that ``--help`` answers without a backend)."""
    try:
        config = parse_args(argv, default_preset, command, doc)
    except ValueError as error:
        commands.bad_input(error)
    if isinstance(recipe, str):
        from keras_vit.training import run

        recipe = getattr(run, recipe)
    try:
        return config, recipe(config)
    except RecipeInputError as error:
        commands.bad_input(error)
