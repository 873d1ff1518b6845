"""Training recipes as data: one dataclass of every knob, made from a named preset of
overrides (``PRESETS``, ``training/recipe_presets.py``: the paper's two and the embedded
digits'). Every field can be overridden from the command line (``--learning-rate 3e-4``),
and so can every option of the model spec (``--depth 4``), which ``model_options`` holds;
each field's ``help`` metadata is its flag's line in ``--help``.
"""

import dataclasses
import difflib
import numbers

from keras_vit import checks
from keras_vit import vocabulary as names
from keras_vit.models.mae_spec import MAESpec
from keras_vit.models.spec import ARCHITECTURE, ViTSpec
from keras_vit.models.spec_groups import in_group
from keras_vit.training.recipe_presets import DATASET_DEFAULTS, PRESETS, SCALED_TO_BATCH


def _flag(default, help):
    """A field that is a command-line flag: ``help`` is its one line in ``--help``."""
    return dataclasses.field(default=default, metadata={"help": help})


# Each field's help says what the flag does for the user and what "none" means where the field
# may be None; keras_vit/commands/recipe_flags.py turns the fields into the training commands' flags.
@dataclasses.dataclass
class RecipeConfig:
    # fmt: off
    # data
    dataset: str = _flag("digits", "the images: digits (embedded, offline), a folder with a subfolder per class, or a "
                         "tensorflow-datasets name such as cifar10")
    data_dir: str | None = _flag(None, "where tensorflow-datasets keeps its data; none: its own default "
                                 "(~/tensorflow_datasets)")
    train_fraction: float | None = _flag(None, "train on this share of each class's training images, in (0, 1] "
                                         "(e.g. 0.1: a tenth of the labels; drawn with --seed); none: all of them")
    image_size: int | None = _flag(None, "side in pixels of the square images trained on; none: the model's own "
                                   "(fine-tuning: the pre-trained model's)")
    batch_size: int = _flag(4096, "images per optimizer update (with --accumulation-steps: over all its micro-batches)")
    accumulation_steps: int = _flag(1, "split each update's batch into this many micro-batches, their gradients "
                                    "averaged: the same updates in less memory")
    epochs: int = _flag(300, "epochs to train, each a pass over the training split (or --steps-per-epoch updates)")
    steps_per_epoch: int | None = _flag(None, "optimizer updates per epoch; none: one pass over the training split")
    normalization: str | None = _flag(None, "how pixels are scaled: vit (x / 127.5 - 1) or imagenet (ImageNet's mean "
                                      "and std); none: the pre-trained model's, vit for a new one")
    inception_crop: bool = _flag(True, "train on random resized crops (the paper's pre-training); false: on whole "
                                 "resized images (its fine-tuning)")
    crop_area_min: float | None = _flag(None, "smallest share of the image a random crop keeps, in (0, 1]; none: the "
                                        "dataset's own (0.8 for the embedded digits, else 0.08)")
    horizontal_flip: bool | None = _flag(None, "flip training images left-right at random; none: the dataset's own "
                                         "(on, but off for digits and characters, which a mirror changes)")
    rand_augment: bool = _flag(False, "apply Keras' RandAugment to the training images (2 operations, strength 0.5)")
    mixup_alpha: float | None = _flag(None, "MixUp: blend pairs of training images and their labels, the weights "
                                      "drawn from Beta(alpha, alpha), e.g. 0.2; none: off")
    cutmix_factor: float | None = _flag(None, "CutMix: paste a box of another training image, the labels mixed by "
                                        "area, the box drawn with this factor in (0, 1]; none: off")
    # model
    model: str = _flag("vit_b16", "the architecture to train, a name keras_vit.list_models() gives (vit_ti16, "
                       "vit_b16, ...); fine-tuning takes --init-from's own")
    # Fine-tuning is always classification; the masked objective is the paper's section 4.6
    # (keras_vit/models/masked_patches.py), mae He et al.'s (keras_vit/models/masked_autoencoder.py).
    objective: str = _flag("classification", "what pre-training learns: classification (the dataset's labels), "
                           "masked_patch_prediction (the paper's self-supervised objective) or mae (a masked "
                           "autoencoder); the last two leave the labels unused")
    # The masked autoencoder's (--objective mae): the MAESpec fields given, each a flag too
    # (--decoder-width 256); the rest are MAESpec's defaults, MAE's.
    mae_options: dict = dataclasses.field(default_factory=dict)
    # DeiT's distillation (keras_vit/training/distillation.py): its defaults are DeiT's code's.
    teacher: str | None = _flag(None, "distil from this classifier of the same classes (a preset, hub name, folder "
                                "or .keras file): the student gets DeiT's distillation token and head; none: no "
                                "teacher")
    distillation: str = _flag("hard", "with --teacher: hard (learn the teacher's top class) or soft (its "
                              "distribution softened by --distillation-temperature)")
    distillation_temperature: float = _flag(1.0, "with --distillation soft: the temperature of both distributions "
                                            "(DeiT's paper: 3)")
    distillation_weight: float = _flag(0.5, "with --teacher: the distillation head's share of the loss, in [0, 1] "
                                       "(the class head's: the rest)")
    # ViTSpec fields over the named model's (architecture for pre-training; pooling,
    # pre-logits and dropouts for both). Each is a flag too (--depth 4, --dropout-rate 0.1).
    model_options: dict = dataclasses.field(default_factory=dict)
    # optimisation
    optimizer: str = _flag("adam", "adam (with decoupled weight decay, the paper's pre-training) or sgd (with "
                           "momentum, its fine-tuning)")
    learning_rate: float = _flag(1e-3, "the peak learning rate, reached at the end of the warm-up")
    beta1: float = _flag(0.9, "Adam's decay of its gradient average (--optimizer adam)")
    beta2: float = _flag(0.999, "Adam's decay of its squared-gradient average (--optimizer adam)")
    momentum: float = _flag(0.9, "SGD's momentum (--optimizer sgd)")
    weight_decay: float = _flag(0.1, "weight decay, 0 for none (Adam leaves biases, norms, tokens and position "
                                "embeddings undecayed)")
    global_clipnorm: float | None = _flag(1.0, "clip the gradients to this global norm before each update; none: "
                                          "no clipping")
    warmup_steps: int = _flag(10_000, "updates over which the learning rate rises linearly from 0 to its peak")
    decay: str = _flag("linear", "how the learning rate falls to 0 after the warm-up: linear (the paper's "
                       "pre-training) or cosine (its fine-tuning)")
    label_smoothing: float = _flag(0.0, "share of each label spread evenly over all classes, in [0, 1); 0: none "
                                   "(the embedded digits' own: 0.1)")
    # evaluation during training: few-shot linear accuracy (keras_vit.evaluation) of the
    # representation, shots from the training split, measured on the validation split
    fewshot_every: int = _flag(0, "every this many epochs, log the representation's few-shot linear accuracy on the "
                               "validation split beside the loss; 0: never")
    fewshot_shots: str = _flag("1,5,10,25", "training images per class of each few-shot evaluation, "
                               "comma-separated")
    fewshot_seeds: int = _flag(3, "random draws of those images per few-shot evaluation, their accuracies averaged")
    # fine-tuning
    init_from: str | None = _flag(None, "the pre-trained model to fine-tune (pre-training: the masked autoencoder "
                                  "or ViT encoder --objective mae continues): a preset name (keras-vit presets), a "
                                  "hub name, a folder, a .keras file or a weights checkpoint (with --init-model)")
    init_model: str | None = _flag(None, "the architecture of an --init-from checkpoint that holds weights alone, "
                                   "e.g. vit_b16 for ViT-B_16.npz")
    freeze: str | None = _flag(None, "backbone: train the head alone (a linear probe); none: train the whole model")
    lora_rank: int | None = _flag(None, "train LoRA adapters of this rank on --lora-targets and the head, nothing "
                                  "else; none: no adapters")
    lora_alpha: float | None = _flag(None, "the adapters' output is scaled by alpha / rank; none: alpha is the rank "
                                     "(a scale of 1)")
    lora_targets: str = _flag("qkv,out", "the projections LoRA adapts, comma-separated: some of qkv, out, fc1, fc2")
    lora_norms: bool = _flag(False, "with LoRA, train the LayerNorms too")
    layer_decay: float | None = _flag(None, "layer-wise learning-rate decay in (0, 1]: block i learns at the rate "
                                      "times decay ** (depth - i), the embeddings slowest; none: off")
    ema: float | None = _flag(None, "keep a moving average of the weights with this momentum (e.g. 0.9999), "
                              "validated and saved in their place; none: off")
    # runtime
    run_name: str | None = _flag(None, "the run folder's name; none: <command>-<model>-<dataset>; a name taken gets "
                                 "-2, -3, ...")
    resume: bool = _flag(False, "continue the newest run folder of this name from its backup, at its last "
                         "finished epoch")
    output_dir: str = _flag("saved_models", "the folder run folders are made in: <output-dir>/<run-name>/")
    mixed_precision: bool = _flag(False, "compute in bfloat16, the weights kept in float32 (Keras' mixed_bfloat16)")
    jit_compile: bool | None = _flag(None, "compile the training step with XLA; none: Keras' auto (XLA, but not "
                                     "TensorFlow's on a CPU-only machine; never on PyTorch)")
    strategy: str = _flag("default", "how to use several devices: default (one), mirrored or tpu (TensorFlow), "
                          "data_parallel, model_parallel or sharded (JAX)")
    tpu: str = _flag("", 'the TPU\'s name or grpc:// address for --strategy tpu; "": this TPU VM\'s own')
    # Several processes training together (JAX; keras_vit/training/processes.py); each flag
    # defaults to Keras' KERAS_DISTRIBUTION_* variable.
    coordinator_address: str | None = _flag(None, "host:port of process 0, where several processes meet (JAX); "
                                            "auto: found by JAX (TPU pods, SLURM); none: "
                                            "KERAS_DISTRIBUTION_JOB_ADDRESSES")
    num_processes: int | None = _flag(None, "processes training together; none: KERAS_DISTRIBUTION_NUM_PROCESSES, "
                                      "else one")
    process_id: int | None = _flag(None, "this process's index from 0 (process 0 writes the run folder); none: "
                                   "KERAS_DISTRIBUTION_PROCESS_ID")
    coordinator_timeout: float = _flag(300.0, "seconds a process waits for the coordinator to answer")
    seed: int = _flag(0, "seeds the initial weights, the data's splits and shuffling, and the augmentations")
    progress: int | None = _flag(None, "what training prints: 1 progress bars, 2 one line per epoch, 0 nothing; "
                                 "none: bars on a terminal, else one line per epoch")
    # fmt: on
    # Not flags: the recipe preset the values start from, and where each value the user did
    # not give came from (the recipe, the dataset, the model, the field's default), which the
    # run prints first and records in recipe.json.
    recipe_name: str | None = None
    defaults: dict = dataclasses.field(default_factory=dict)

    @property
    def mae_spec(self):
        """The masked autoencoder's options (``--objective mae``) as a ``MAESpec``."""
        return MAESpec(**self.mae_options)

    def __post_init__(self):
        # Numbers out of range are refused here, before any data is read or any step taken.
        self.mae_spec  # noqa: B018 (MAESpec checks its own)
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
    ("train_fraction", 0.0, 1.0, (False, True)),
    ("distillation_temperature", 0.0, float("inf"), (False, False)),
    ("distillation_weight", 0.0, 1.0, (True, True)),
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


# The objectives' names (training/objectives.py holds what each is).
OBJECTIVES = ("classification", "masked_patch_prediction", "mae")
FREEZE = ("backbone",)
FIELDS = {f.name: f for f in dataclasses.fields(RecipeConfig) if "help" in f.metadata}
# The spec's options that a recipe may set: all but the task's size and classes (the
# recipe's image_size and the dataset's) and the nested ResNet stem (a named model's).
MODEL_OPTIONS = {k: o for k, o in ViTSpec.options().items() if k not in ("image_size", "num_classes", "resnet")}
# The masked autoencoder's options, which mae_options holds.
MAE_OPTIONS = {f.name: f for f in dataclasses.fields(MAESpec)}
# Where make_config puts an option that is not a RecipeConfig field: the dict that holds it.
_HELD_IN = {"model_options": MODEL_OPTIONS, "mae_options": MAE_OPTIONS}


# The values a field takes, where they are few (the command line lists them; "none" too
# where the field may be None). The strategies are every backend's: each refuses the others'.
CHOICES = {
    "normalization": ("vit", "imagenet"),
    "objective": OBJECTIVES,
    "distillation": names.DISTILLATIONS,
    "optimizer": names.OPTIMIZERS,
    "decay": names.DECAYS,
    "freeze": FREEZE,
    "strategy": tuple(dict.fromkeys(s for backend in names.STRATEGIES.values() for s in backend)),
    "progress": (0, 1, 2),
    "pooling": (*names.POOLINGS, names.ATTENTION_POOLING),
    "position_embedding": names.POSITION_EMBEDDINGS,
    "norm_type": names.NORM_TYPES,
    "mlp_activation": names.MLP_ACTIVATIONS,
    "rope": tuple(names.ROPE_FORMS),
    "rope_grid_indexing": names.GRID_INDEXINGS,
}
# The command line's groups of flags, in --help's order; the model's architecture and
# numerics (every ViTSpec option a recipe may set) form the last.
GROUPS = {
    "data": ("dataset", "data_dir", "train_fraction", "image_size", "normalization", "batch_size", "steps_per_epoch"),
    "augmentation": ("inception_crop", "crop_area_min", "horizontal_flip", "rand_augment", "mixup_alpha",
                     "cutmix_factor"),
    "model": ("model", "objective", "init_from", "init_model"),
    "masked autoencoder (--objective mae)": tuple(MAE_OPTIONS),
    "distillation (--teacher)": ("teacher", "distillation", "distillation_temperature", "distillation_weight"),
    "optimisation": ("optimizer", "learning_rate", "beta1", "beta2", "momentum", "weight_decay", "global_clipnorm",
                     "warmup_steps", "decay", "label_smoothing", "epochs", "accumulation_steps"),
    "fine-tuning": ("freeze", "lora_rank", "lora_alpha", "lora_targets", "lora_norms", "layer_decay", "ema"),
    "evaluation during training": ("fewshot_every", "fewshot_shots", "fewshot_seeds"),
    "output": ("output_dir", "run_name", "resume", "progress"),
    "distribution": ("strategy", "tpu", "coordinator_address", "num_processes", "process_id", "coordinator_timeout"),
    "runtime": ("mixed_precision", "jit_compile", "seed"),
    "model options (ViTSpec; default: the model's own)": tuple(k for k in MODEL_OPTIONS if not in_group(k, "rope")),
    "rotary position embeddings (ViTSpec.rope)": tuple(k for k in MODEL_OPTIONS if in_group(k, "rope")),
}  # fmt: skip
# What a recipe preset says about its own model, which a model the user names replaces.
_ARCHITECTURE = {"image_size", *(n for n in ViTSpec.fields_with_role(ARCHITECTURE) if n in MODEL_OPTIONS)}


def make_config(preset, **overrides):
    """A ``RecipeConfig`` from a preset name plus overrides; unknown keys are errors.

    What the overrides leave comes from the preset, then the dataset's own values
    (``DATASET_DEFAULTS``), then the field's default; ``config.defaults`` says which, for each.
    A preset of ``SCALED_TO_BATCH`` given another batch size scales its learning rate with it.

    >>> make_config("digits_pretrain", epochs=2).epochs
    2
    >>> config = make_config("paper_finetune", dataset="photos/", batch_size=64)
    >>> config.learning_rate, config.defaults["learning_rate"]
    (0.00125, 'recipe paper_finetune, scaled to batch 64')
    """
    if preset not in PRESETS:
        raise ValueError(f"Unknown preset {preset!r}; expected one of {sorted(PRESETS)}.")
    recipe = _for_the_named_model(PRESETS[preset], overrides)
    dataset = overrides.get("dataset", recipe.get("dataset", FIELDS["dataset"].default))
    data = {k: v for k, v in DATASET_DEFAULTS.get(dataset, {}).items() if k not in recipe}
    scaled = _scaled_to_batch(preset, overrides)
    values = {**recipe, **data, **scaled, **overrides}
    unknown = [k for k in values if option_field(k) is None]
    if unknown:
        raise ValueError(unknown_keys_message(unknown))
    sources = {
        **{k: "field default" for k in (*FIELDS, *MAE_OPTIONS)},
        **{k: f"recipe {preset}" for k in recipe},
        **{k: f"dataset {dataset}" for k in data},
        **{k: f"recipe {preset}, scaled to batch {values['batch_size']}" for k in scaled},
    }
    held = {dest: {k: values.pop(k) for k in list(values) if k in names} for dest, names in _HELD_IN.items()}
    defaults = {k: source for k, source in sources.items() if k not in overrides}
    return RecipeConfig(**values, **held, recipe_name=preset, defaults=defaults)


def option_field(name):
    """The field that describes option ``name``: a ``RecipeConfig`` field's, a ``ViTSpec``
    option's or a ``MAESpec`` option's; None for an unknown name."""
    return FIELDS.get(name) or MODEL_OPTIONS.get(name) or MAE_OPTIONS.get(name)


def _scaled_to_batch(preset, overrides):
    """``{"learning_rate": ...}`` scaled to the overrides' batch size, where it applies."""
    if preset not in SCALED_TO_BATCH or "batch_size" not in overrides or "learning_rate" in overrides:
        return {}
    recipe = PRESETS[preset]
    return {"learning_rate": recipe["learning_rate"] * overrides["batch_size"] / recipe["batch_size"]}


def with_dataset_defaults(config, info):
    """``config`` with what it leaves to the dataset (``None``) taken from the loaded dataset's
    ``DatasetInfo``: whether a flip keeps its labels, and the crop area that suits its images."""
    own = {"horizontal_flip": info.horizontal_flip, "crop_area_min": info.crop_area_range[0]}
    filled = {k: v for k, v in own.items() if getattr(config, k) is None}
    sources = {k: f"dataset {info.name}" for k in filled}
    return dataclasses.replace(config, **filled, defaults={**config.defaults, **sources})


def describe(config):
    """The lines a run prints first: the recipe and the values it trains with, each value the
    user did not give followed by where it came from.

    >>> print(describe(make_config("digits_finetune", epochs=3)).splitlines()[0])
    recipe digits_finetune: the values not given on the command line are followed by [where they came from]
    """
    lines = [f"recipe {config.recipe_name}: the values not given on the command line are followed by "
             "[where they came from]"]  # fmt: skip
    for group in ("data", "augmentation", "optimisation"):
        shown = [
            f"{name} {getattr(config, name)}" + (f" [{config.defaults[name]}]" if name in config.defaults else "")
            for name in GROUPS[group]
        ]
        lines.append(f"  {group}: {', '.join(shown)}")
    return "\n".join(lines)


def _for_the_named_model(preset, overrides):
    """The preset without what it says about its own model (architecture options, image size)
    when the overrides name another model (``model``, ``init_model``, ``init_from``): a named
    model is built as named, with only the options the overrides give it.

    >>> sorted(_for_the_named_model(PRESETS["digits_pretrain"], {"model": "vit_s16"}).keys() & _ARCHITECTURE)
    []
    """
    named = overrides.get("model", preset.get("model")) != preset.get("model")
    named = named or overrides.get("init_model") or overrides.get("init_from")
    return {k: v for k, v in preset.items() if k not in _ARCHITECTURE} if named else preset


def unknown_keys_message(unknown, flags=False):
    """Names each unknown key with the close known ones; as ``--flags`` for a command line."""
    known = [*FIELDS, *MODEL_OPTIONS, *MAE_OPTIONS]
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
