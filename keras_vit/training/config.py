"""Training recipes as data: one dataclass of every knob, named presets of overrides.

``PRESETS`` holds the paper's two recipes (ImageNet-scale pre-training and fine-tuning,
section 4.1 and appendix B.1) and the embedded default (digits) that the README's main
command runs. Every field can be overridden from the command line (``--learning-rate 3e-4``),
and so can every option of the model spec (``--depth 4``), which ``model_options`` holds.
"""

import argparse
import dataclasses
import difflib
import inspect
import numbers
import re
import sys
import types
import typing

from keras_vit import checks, quiet
from keras_vit.layers.activations import MLP_ACTIVATIONS
from keras_vit.layers.attention_pooling import ATTENTION_POOLING
from keras_vit.layers.heads import POOLINGS
from keras_vit.layers.layer_norm import NORM_TYPES
from keras_vit.layers.tokens import POSITION_EMBEDDINGS
from keras_vit.models.spec import ARCHITECTURE, ViTSpec
from keras_vit.training.distribution import STRATEGIES
from keras_vit.training.errors import RecipeInputError
from keras_vit.training.optimizers import OPTIMIZERS
from keras_vit.training.schedules import DECAYS


@dataclasses.dataclass
class RecipeConfig:
    # data
    dataset: str = "digits"  # "digits" (embedded), a folder path, or a tensorflow-datasets name
    data_dir: str | None = None  # tensorflow-datasets data_dir
    image_size: int | None = None  # None: the model's (the named one's; fine-tuning: the pre-trained one's)
    batch_size: int = 4096  # images per optimizer update (with accumulation: over its micro-batches)
    accumulation_steps: int = 1  # micro-batches of batch_size / accumulation_steps per update
    epochs: int = 300
    steps_per_epoch: int | None = None  # None: one pass over the training split
    normalization: str | None = None  # "vit" (x / 127.5 - 1) or "imagenet"; None: the model's ("vit" if new)
    inception_crop: bool = True  # random resized crop (pre-training) vs resize (fine-tuning)
    crop_area_min: float | None = None  # None: the dataset's own default
    horizontal_flip: bool | None = None  # None: the dataset's own default
    rand_augment: bool = False
    mixup_alpha: float | None = None
    cutmix_factor: float | None = None
    # model
    model: str = "vit_b16"
    # What pre-training optimises: "classification" (the dataset's labels) or
    # "masked_patch_prediction" (the paper's self-supervised objective, section 4.6: labels
    # unused; keras_vit/models/masked_patches.py). Fine-tuning is always classification.
    objective: str = "classification"
    # ViTSpec fields over the named model's (architecture for pre-training; pooling,
    # pre-logits and dropouts for both). Each is a flag too (--depth 4, --dropout-rate 0.1).
    model_options: dict = dataclasses.field(default_factory=dict)
    # optimisation
    optimizer: str = "adam"  # "adam" (decoupled weight decay) or "sgd" (momentum)
    learning_rate: float = 1e-3
    beta1: float = 0.9
    beta2: float = 0.999
    momentum: float = 0.9
    weight_decay: float = 0.1
    global_clipnorm: float | None = 1.0
    warmup_steps: int = 10_000
    decay: str = "linear"  # "linear" or "cosine", after the linear warm-up
    label_smoothing: float = 0.0
    # evaluation during training: few-shot linear accuracy (keras_vit.evaluation) of the
    # representation, shots from the training split, measured on the validation split, logged
    # beside the loss every this many epochs (0: never)
    fewshot_every: int = 0
    fewshot_shots: str = "1,5,10,25"
    fewshot_seeds: int = 3
    # fine-tuning
    init_from: str | None = None  # a preset name or folder, a .keras file or a load_weights checkpoint
    init_model: str | None = None  # the model that checkpoint fits (checkpoints without architecture)
    freeze: str | None = None  # "backbone": a linear probe, only the head trains
    lora_rank: int | None = None  # LoRA of this rank on lora_targets; only it and the head train
    lora_alpha: float | None = None  # the adapters' scale is lora_alpha / lora_rank (None: the rank)
    lora_targets: str = "qkv,out"  # which projections: some of qkv, out, fc1, fc2
    lora_norms: bool = False  # with LoRA, train the LayerNorms too
    layer_decay: float | None = None  # block i's learning rate times decay ** (depth - i); embeddings lowest
    ema: float | None = None  # momentum of the weights' moving average (0.9999), evaluated and saved
    # runtime
    run_name: str | None = None  # default: "<recipe>-<model>-<dataset>"; taken: "<name>-2", "<name>-3", ...
    resume: bool = False  # continue the newest run folder of this name from its backup
    output_dir: str = "saved_models"
    mixed_precision: bool = False  # "mixed_bfloat16" compute, float32 weights
    jit_compile: bool | None = None  # XLA; none: Keras' "auto" (XLA, but not TensorFlow's on a CPU-only machine)
    strategy: str = "default"  # tf: default|mirrored|tpu; jax: default|data_parallel|model_parallel|sharded
    tpu: str = ""  # TPU name or grpc address for strategy=tpu ("" = the local TPU VM)
    # Several processes training together (JAX; keras_vit/training/processes.py); each flag
    # defaults to Keras' KERAS_DISTRIBUTION_* variable. "auto": JAX finds all three (TPU pods).
    coordinator_address: str | None = None  # process 0's host:port
    num_processes: int | None = None
    process_id: int | None = None
    coordinator_timeout: float = 300.0  # seconds a process waits for the coordinator to answer
    seed: int = 0
    progress: int = 1  # Keras progress bars (1), one line per epoch (2), silent (0)

    def __post_init__(self):
        # Numbers out of range are refused here, before any data is read or any step taken.
        for name, low, high, closed in _RANGES:
            value = getattr(self, name)
            if value is None:
                continue
            above = value >= low if closed[0] else value > low
            below = value <= high if closed[1] else value < high
            if isinstance(value, bool) or not isinstance(value, numbers.Real) or not (above and below):
                interval = f"{'[' if closed[0] else '('}{low}, {high}{']' if closed[1] else ')'}"
                raise ValueError(f"{checks.flag(name)} must be in {interval}; got {value!r}.")


# (field, low, high, (low included, high included)) for the numeric fields of RecipeConfig.
_RANGES = (
    ("image_size", 1, float("inf"), (True, False)),
    ("batch_size", 1, float("inf"), (True, False)),
    ("accumulation_steps", 1, float("inf"), (True, False)),
    ("epochs", 1, float("inf"), (True, False)),
    ("steps_per_epoch", 1, float("inf"), (True, False)),
    ("crop_area_min", 0.0, 1.0, (False, True)),
    ("mixup_alpha", 0.0, float("inf"), (False, False)),
    ("cutmix_factor", 0.0, float("inf"), (False, False)),
    ("learning_rate", 0.0, float("inf"), (False, False)),
    ("beta1", 0.0, 1.0, (True, False)),
    ("beta2", 0.0, 1.0, (True, False)),
    ("momentum", 0.0, 1.0, (True, False)),
    ("weight_decay", 0.0, float("inf"), (True, False)),
    ("global_clipnorm", 0.0, float("inf"), (False, False)),
    ("warmup_steps", 0, float("inf"), (True, False)),
    ("label_smoothing", 0.0, 1.0, (True, False)),
    ("fewshot_every", 0, float("inf"), (True, False)),
    ("num_processes", 1, float("inf"), (True, False)),
    ("process_id", 0, float("inf"), (True, False)),
    ("coordinator_timeout", 0.0, float("inf"), (False, False)),
    ("fewshot_seeds", 1, float("inf"), (True, False)),
    ("lora_rank", 1, float("inf"), (True, False)),
    ("lora_alpha", 0.0, float("inf"), (False, False)),
    ("layer_decay", 0.0, 1.0, (False, True)),
    ("ema", 0.0, 1.0, (False, False)),
)


# fmt: off
# The paper's recipes (ImageNet-21k pre-training of ViT-B; fine-tuning, at 384 in the paper:
# --image-size 384, else at the pre-trained model's size). Their batch is the update's: the
# paper reaches 4096 over a TPU pod's devices in one step; a machine that holds 64 images
# reaches it with --accumulation-steps 64 (the same updates).
PAPER_PRETRAIN = dict(
    optimizer="adam", beta1=0.9, beta2=0.999, weight_decay=0.1, learning_rate=1e-3,
    batch_size=4096, warmup_steps=10_000, decay="linear", dropout_rate=0.1,
    representation_size=768, inception_crop=True, global_clipnorm=1.0,
)
PAPER_FINETUNE = dict(
    optimizer="sgd", momentum=0.9, weight_decay=0.0, learning_rate=0.01, batch_size=512,
    warmup_steps=500, decay="cosine", global_clipnorm=1.0, dropout_rate=0.1,
    representation_size=None, inception_crop=False, epochs=8,
)
# The embedded default: a small ViT on scikit-learn's 8x8 digits, pre-trained at 16 px
# and fine-tuned at 24 px (1.5x: the main job's --image-size), fast enough for the README's
# main command on a CPU. Tuned on the validation split: a milder crop than ImageNet's (8x8
# digits lose their identity in small crops), a higher peak learning rate for the short
# schedule, label smoothing 0.1 and 50 + 20 epochs, each kept for a higher mean fine-tuned
# accuracy over seeds and backends.
_DIGITS_DATA = dict(dataset="digits", crop_area_min=0.8, horizontal_flip=False, label_smoothing=0.1)
DIGITS_PRETRAIN = dict(
    PAPER_PRETRAIN, **_DIGITS_DATA, model="vit_ti16", patch_size=4, hidden_size=128, depth=4, num_heads=4,
    mlp_dim=256, image_size=16, batch_size=64, epochs=50, learning_rate=2e-3, warmup_steps=100,
    representation_size=128, weight_decay=0.1,
)
DIGITS_FINETUNE = dict(
    PAPER_FINETUNE, **_DIGITS_DATA, batch_size=64, epochs=20, learning_rate=0.03, warmup_steps=20,
)
# fmt: on
PRESETS = {
    "paper_pretrain": PAPER_PRETRAIN,
    "paper_finetune": PAPER_FINETUNE,
    "digits_pretrain": DIGITS_PRETRAIN,
    "digits_finetune": DIGITS_FINETUNE,
}
OBJECTIVES = ("classification", "masked_patch_prediction")
FREEZE = ("backbone",)
FIELDS = {f.name: f for f in dataclasses.fields(RecipeConfig) if f.name != "model_options"}
# The spec's options that a recipe may set: all but the task's size and classes (the
# recipe's image_size and the dataset's) and the nested ResNet stem (a named model's).
MODEL_OPTIONS = {
    f.name: f for f in dataclasses.fields(ViTSpec) if f.name not in ("image_size", "num_classes", "resnet")
}
# The values a field takes, where they are few (the command line lists them; "none" too
# where the field may be None). The strategies are every backend's: each refuses the others'.
CHOICES = {
    "normalization": ("vit", "imagenet"),
    "objective": OBJECTIVES,
    "optimizer": OPTIMIZERS,
    "decay": DECAYS,
    "freeze": FREEZE,
    "strategy": tuple(dict.fromkeys(s for names in STRATEGIES.values() for s in names)),
    "progress": (0, 1, 2),
    "pooling": (*POOLINGS, ATTENTION_POOLING),
    "position_embedding": POSITION_EMBEDDINGS,
    "norm_type": NORM_TYPES,
    "mlp_activation": MLP_ACTIVATIONS,
}
# The command line's groups of flags, in --help's order; the model's architecture and
# numerics (every ViTSpec option a recipe may set) form the last.
GROUPS = {
    "data": ("dataset", "data_dir", "image_size", "normalization", "batch_size", "steps_per_epoch"),
    "augmentation": ("inception_crop", "crop_area_min", "horizontal_flip", "rand_augment", "mixup_alpha",
                     "cutmix_factor"),
    "model": ("model", "objective", "init_from", "init_model"),
    "optimisation": ("optimizer", "learning_rate", "beta1", "beta2", "momentum", "weight_decay", "global_clipnorm",
                     "warmup_steps", "decay", "label_smoothing", "epochs", "accumulation_steps"),
    "fine-tuning": ("freeze", "lora_rank", "lora_alpha", "lora_targets", "lora_norms", "layer_decay", "ema"),
    "evaluation during training": ("fewshot_every", "fewshot_shots", "fewshot_seeds"),
    "output": ("output_dir", "run_name", "resume", "progress"),
    "distribution": ("strategy", "tpu", "coordinator_address", "num_processes", "process_id", "coordinator_timeout"),
    "runtime": ("mixed_precision", "jit_compile", "seed"),
    "model options (ViTSpec; default: the model's own)": tuple(MODEL_OPTIONS),
}  # fmt: skip
# What a recipe preset says about its own model, which a model the user names replaces.
_ARCHITECTURE = {"image_size", *(n for n in ViTSpec.fields_with_role(ARCHITECTURE) if n in MODEL_OPTIONS)}


def make_config(preset, **overrides):
    """A ``RecipeConfig`` from a preset name plus overrides; unknown keys are errors.

    >>> make_config("digits_pretrain", epochs=2).epochs
    2
    """
    if preset not in PRESETS:
        raise ValueError(f"Unknown preset {preset!r}; expected one of {sorted(PRESETS)}.")
    values = {**_for_the_named_model(PRESETS[preset], overrides), **overrides}
    unknown = [k for k in values if k not in FIELDS and k not in MODEL_OPTIONS]
    if unknown:
        raise ValueError(_unknown_keys_message(unknown))
    options = {k: values.pop(k) for k in list(values) if k in MODEL_OPTIONS}
    return RecipeConfig(**values, model_options=options)


def _for_the_named_model(preset, overrides):
    """The preset without what it says about its own model (architecture options, image size)
    when the overrides name another model (``model``, ``init_model``, ``init_from``): a named
    model is built as named, with only the options the overrides give it.

    >>> sorted(_for_the_named_model(DIGITS_PRETRAIN, {"model": "vit_s16"}).keys() & _ARCHITECTURE)
    []
    """
    named = overrides.get("model", preset.get("model")) != preset.get("model")
    named = named or overrides.get("init_model") or overrides.get("init_from")
    return {k: v for k, v in preset.items() if k not in _ARCHITECTURE} if named else preset


def _unknown_keys_message(unknown, flags=False):
    """Names each unknown key with the close known ones; as ``--flags`` for a command line."""
    known = [*FIELDS, *MODEL_OPTIONS]
    shown = checks.flag if flags else str
    parts = []
    for key in unknown:
        # Close spellings, and the fields a short form abbreviates (lr: learning_rate).
        close = difflib.get_close_matches(key, known, n=3)
        close += [k for k in known if "".join(w[0] for w in k.split("_")) == key and k not in close]
        parts.append(shown(key) + (f" (did you mean {', '.join(map(shown, close))}?)" if close else ""))
    if flags:
        return f"Unknown flag(s): {', '.join(parts)}. Every RecipeConfig field is a flag: see --help."
    return f"Unknown config key(s): {', '.join(parts)}. Known keys: {', '.join(known)}."


def _parse_value(text, field):
    kind = _kind(field)
    if kind is not field.type and text.lower() in ("none", "null", ""):  # X | None
        return None
    if kind is bool:
        if text.lower() in ("1", "true", "yes", "on"):
            return True
        if text.lower() in ("0", "false", "no", "off"):
            return False
        raise ValueError(f"{checks.flag(field.name)} expects true or false, got {text!r}.")
    try:
        return kind(text)
    except ValueError:
        raise ValueError(f"{checks.flag(field.name)} expects {kind.__name__}, got {text!r}.") from None


def run_command_line(recipe, argv, default_preset, prog=None, doc=None):
    """``recipe(parse_args(argv, default_preset))`` for a command's ``main``: bad input (flags,
    values, and what the recipe finds before its first step) is one line on stderr and exit
    status 2; anything later is a bug and keeps its traceback. ``prog`` and the first
    paragraph of ``doc`` head ``--help``."""
    try:
        config = parse_args(argv, default_preset, prog, doc)
    except ValueError as error:
        print(f"error: {error}", file=sys.stderr)
        raise SystemExit(2) from None
    try:
        return config, recipe(config)
    except RecipeInputError as error:
        print(f"error: {error}", file=sys.stderr)
        raise SystemExit(2) from None


def _field_notes():
    """Each RecipeConfig field's comment in its source line, for ``--help``."""
    lines = inspect.getsource(RecipeConfig).splitlines()
    found = (re.match(r"\s+(\w+): [^#]*#\s*(.*)", line) for line in lines)
    return {m[1]: m[2] for m in found if m and m[1] in FIELDS}


def _kind(field):
    """A field's type without ``| None``."""
    if typing.get_origin(field.type) in (typing.Union, types.UnionType):
        return next(a for a in typing.get_args(field.type) if a is not type(None))
    return field.type


def _add_flag(parser, group, name, field, default, note):
    """``--<name>`` (hyphens; ``--<name_with_underscores>`` taken too), its choices or its
    type shown, its value in the recipe as the default; ``--name`` / ``--no-name`` for a
    true/false field. Every value stays text here, parsed by ``_parse_value``."""
    flag = checks.flag(name)
    text = f"{note} (default: {checks.shown(default)}".replace("%", "%%")  # argparse formats help with %
    options = dict(default=argparse.SUPPRESS, help=f"{text})")
    optional = _kind(field) is not field.type
    if _kind(field) is bool:
        parser.add_switch(group, flag, name, f"{text}; --no-{flag[2:]}: false)", optional)
    elif name in CHOICES:
        choices = [str(c) for c in CHOICES[name]] + (["none"] if optional else [])
        group.add_argument(flag, dest=name, choices=choices, **options)
    else:
        group.add_argument(flag, dest=name, metavar=_kind(field).__name__.upper().replace("STR", "TEXT"), **options)


def build_parser(default_preset, prog=None, description=None):
    """The recipes' parser: ``--recipe NAME`` and every field as a flag in its group
    (``GROUPS``), each with its value in ``default_preset`` in the help (a flag not given
    is not in the result). ``--preset NAME``, the old spelling of ``--recipe``, is taken
    with a warning (elsewhere ``--preset`` names pretrained weights)."""
    parser = checks.CommandLineParser(
        prog=prog,
        description=(description or "keras-vit recipe.")
        + " Every RecipeConfig field and every ViTSpec option is a flag (--learning-rate 3e-4; the"
        " underscore spelling, --learning_rate, is the same flag).",
    )
    parser.add_argument("--recipe", default=default_preset, choices=sorted(PRESETS), help="the recipe whose values are "
                        "the defaults below")  # fmt: skip
    parser.add_argument("--preset", dest="old_recipe", default=argparse.SUPPRESS, help=argparse.SUPPRESS)
    defaults = make_config(default_preset)
    notes = _field_notes()
    for title, names in GROUPS.items():
        group = parser.add_argument_group(title)
        for name in names:
            if name in FIELDS:
                _add_flag(parser, group, name, FIELDS[name], getattr(defaults, name), notes.get(name, ""))
            else:
                default = defaults.model_options.get(name, "the model's")
                _add_flag(parser, group, name, MODEL_OPTIONS[name], default, "a ViTSpec option")
    quiet.add_flag(parser)
    return parser


def _recipe(args):
    """The recipe asked for: ``--recipe``, or the old ``--preset`` with a warning."""
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


def parse_args(argv, default_preset, prog=None, doc=None):
    """Command line -> ``RecipeConfig``: ``--recipe NAME`` plus ``--<field> VALUE`` pairs."""
    description = doc.strip().split("\n\n")[0] if doc else None
    args, unknown = build_parser(default_preset, prog, description).parse_known_args(argv)
    if unknown:
        keys = [u[2:].split("=")[0].replace("-", "_") for u in unknown if u.startswith("--")]
        raise ValueError(_unknown_keys_message(keys or unknown, flags=True))
    overrides = {
        name: _parse_value(value, FIELDS.get(name) or MODEL_OPTIONS[name])
        for name, value in vars(args).items()
        if name not in ("recipe", "old_recipe", "verbose")
    }
    return make_config(_recipe(args), **overrides)
