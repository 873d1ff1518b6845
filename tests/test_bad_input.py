"""Every bad input keras-vit is known to meet, in one catalogue, each answered clearly.

``CASES`` is the catalogue: each case is a call that must fail before any work starts,
the exception type it must raise (keras-vit's own, or the standard type its docstring
names), and what the message must say: what was expected and what was given. Raised by
keras-vit's own checks, never from deep inside Keras or a backend: the test checks where
it was raised. Command-line cases must end with one line, ``error: ...``, and exit status
2. The catalogue runs in each backend's process; ``test_the_catalogue`` states its size.
(Files that lie about themselves are also here; crashes and full disks are in
test_faults.py.)
"""

import dataclasses
import functools
import json
import os
import struct
import subprocess
import sys
import textwrap
import zipfile

import keras
import numpy as np
import pytest
from helpers import TINY_ENCODER, once_on

import keras_vit
from keras_vit.atomic import UnwritableOutputError
from keras_vit.checkpoints.readers import CheckpointReadError
from keras_vit.commands.recipe_flags import run_command_line
from keras_vit.data import load_dataset
from keras_vit.dependencies import MissingDependencyError, require
from keras_vit.sources import InvalidModelFileError
from keras_vit.training import distribution as distribution_module
from keras_vit.training import finetune, make_config, pretrain


@dataclasses.dataclass(frozen=True)
class Case:
    name: str
    call: object  # (tmp_path) -> anything; must raise
    error: type  # SystemExit: a command line, exit status 2 and one line on stderr
    says: tuple  # what the message must contain


CASES = []


def case(name, error, *says):
    def register(call):
        CASES.append(Case(name, call, error, says))
        return call

    return register


@functools.cache
def tiny(**options):
    """A small ViT for the calls that need a model (one per process and options)."""
    options = {"image_size": 16, "num_classes": 3, "depth": 1, **TINY_ENCODER, **options}
    return keras_vit.create_model("vit_ti16", **options)


def saved(tmp, model=None, name="model.keras"):
    path = str(tmp / name)
    (model or tiny()).save(path)
    return path


def write(tmp, name, data):
    path = tmp / name
    path.write_bytes(data)
    return str(path)


def cli(*argv, recipe=pretrain, preset="digits_pretrain"):
    """A recipe's command line; afterwards its --output_dir holds no run folder (none was begun)."""
    try:
        run_command_line(recipe, list(argv), preset)
    finally:
        output = argv[argv.index("--output_dir") + 1] if "--output_dir" in argv else None
        if output and os.path.isdir(output):
            assert not [entry.name for entry in os.scandir(output) if entry.is_dir()]


# --- Building a model -------------------------------------------------------------------


@case("unknown model name", ValueError, "Unknown model name 'vit_b_16'", "Did you mean 'vit_b16'")
def _(tmp):
    keras_vit.create_model("vit_b_16")


# create_model("vit_ti16", **options) with an option it refuses: the case, the options, what
# the message says.
BAD_OPTIONS = [
    ("misspelt model option", dict(hiden_size=3), "unknown option(s) ['hiden_size']", "Did you mean 'hidden_size'"),
    ("image size zero", dict(image_size=0), "image_size must be a positive integer", "got 0"),
    ("image size not an integer", dict(image_size=16.5), "image_size must be a positive integer", "16.5"),
    ("image size not divisible by the patch", dict(image_size=20), "not divisible", "20"),
    ("negative classes", dict(num_classes=-1), "num_classes must be a positive integer", "-1"),
    ("fractional class count", dict(num_classes=2.5), "num_classes must be a positive integer", "2.5"),
    ("zero depth", dict(depth=0), "depth", "0"),
    ("heads that do not divide the width", dict(num_heads=5), "hidden_size 192 is not divisible by num_heads 5"),
    ("negative width", dict(hidden_size=-1), "hidden_size", "-1"),
    ("zero patch size", dict(patch_size=0), "patch_size", "0"),
    ("dropout rate of 1.5", dict(dropout_rate=1.5), "dropout_rate", "1.5"),
    ("unknown pooling", dict(pooling="maxx"), "pooling", "'maxx'"),
    ("token pooling without a class token", dict(pooling="token", class_token=False), "needs class_token=True"),
    ("no pooling with a classifier", dict(pooling=None), "only possible with include_top=False"),
    ("unknown position embedding", dict(position_embedding="rotary"), "position_embedding", "'rotary'"),
]


def _created_with(options):
    return lambda tmp: keras_vit.create_model("vit_ti16", **options)


for _name, _options, *_says in BAD_OPTIONS:
    case(_name, ValueError, *_says)(_created_with(_options))


@case("unknown preset tag", ValueError, "'vit_b16.nonexistent'", "The tags of vit_b16: ", "augreg2_in21k_ft_in1k")
def _(tmp):
    keras_vit.create_model("vit_b16", weights="nonexistent")


@case("unknown preset name", ValueError, "vit_b16.nonsense")
def _(tmp):
    keras_vit.get_preset("vit_b16.nonsense")


@case("weights path that does not exist", FileNotFoundError, "no_such_weights.npz")
def _(tmp):
    keras_vit.create_model("vit_ti16", weights=str(tmp / "no_such_weights.npz"))


@case("an unknown backend", ValueError, "KERAS_BACKEND='tensorflw' is not a Keras backend", "did you mean tensorflow")
def _(tmp):
    keras_vit.dependencies.backend_name("tensorflw")  # what the first use of keras_vit checks (test below)


# --- Calling a model --------------------------------------------------------------------


@case("predict: images without a batch axis", ValueError, "Expected images of shape (batch, 16, 16, 3)", "(16, 16, 3)")
def _(tmp):
    tiny().predict(np.zeros((16, 16, 3), "float32"), verbose=0)


@case("predict: one channel", ValueError, "Expected images of shape (batch, 16, 16, 3)", "(2, 16, 16, 1)")
def _(tmp):
    tiny().predict(np.zeros((2, 16, 16, 1), "float32"), verbose=0)


@case("predict: another size", ValueError, "Expected images of shape (batch, 16, 16, 3)", "(2, 32, 32, 3)")
def _(tmp):
    tiny().predict(np.zeros((2, 32, 32, 3), "float32"), verbose=0)


@case("predict: text instead of pixels", ValueError, "Expected images of real numbers", "<U1")
def _(tmp):
    tiny().predict(np.full((2, 16, 16, 3), "a"), verbose=0)


@case("predict: complex pixels", ValueError, "Expected images of real numbers", "complex128")
def _(tmp):
    tiny().predict(np.zeros((2, 16, 16, 3), complex), verbose=0)


@case("evaluate: images of another size", ValueError, "Expected images of shape (batch, 16, 16, 3)", "(4, 8, 8, 3)")
def _(tmp):
    model = tiny()
    model.compile(loss="sparse_categorical_crossentropy")
    model.evaluate(np.zeros((4, 8, 8, 3)), np.zeros(4), verbose=0)


@case("dynamic size: a side the patch does not divide", ValueError, "width 36 is not a multiple", "16 x n")
def _(tmp):
    tiny(dynamic_image_size=True).predict(np.zeros((1, 32, 36, 3), "float32"), verbose=0)


@case("dynamic size: an image smaller than one patch", ValueError, "height 8 is smaller than one 16-pixel patch")
def _(tmp):
    tiny(dynamic_image_size=True).predict(np.zeros((1, 8, 32, 3), "float32"), verbose=0)


# --- Checkpoint and model files ---------------------------------------------------------


@case("an empty checkpoint file", CheckpointReadError, "empty.npz is empty (0 bytes)")
def _(tmp):
    keras_vit.load_weights(tiny(), write(tmp, "empty.npz", b""))


@case("a truncated .keras file", InvalidModelFileError, "truncated", "model.keras")
def _(tmp):
    path = saved(tmp)
    with open(path, "rb") as f:
        data = f.read()
    keras_vit.load_model(write(tmp, "model.keras", data[: len(data) // 2]))


@case("a truncated safetensors file", CheckpointReadError, "cut.safetensors", "bytes")
def _(tmp):
    data = _safetensors({"patch_embed.proj.weight": np.zeros((32, 3, 16, 16), "float32")})
    keras_vit.load_weights(tiny(), write(tmp, "cut.safetensors", data[:-100]))


@case("a checkpoint of a wider model", ValueError, "has shape (64,), expected (32,)", "nothing was loaded")
def _(tmp):
    wide = keras_vit.create_model("vit_ti16", image_size=16, num_classes=3, depth=1, hidden_size=64, num_heads=2,
                                  mlp_dim=64)  # fmt: skip
    keras_vit.load_weights(tiny(), saved(tmp, wide))


@case("a checkpoint with missing keys", ValueError, "missing key", "Transformer/encoderblock_0")
def _(tmp):
    path = str(tmp / "partial.npz")
    np.savez(path, **{"embedding/kernel": np.zeros((16, 16, 3, 32), "float32")})
    keras_vit.load_weights(tiny(), path)


@case("a checkpoint with extra blocks", ValueError, "holds 2 encoder blocks, the model 1", "depth=2")
def _(tmp):
    deep = keras_vit.create_model("vit_ti16", image_size=16, num_classes=3, depth=2, **TINY_ENCODER)
    keras_vit.load_weights(tiny(), saved(tmp, deep))


@case("a checkpoint of integers", ValueError, "holds int32", "quantized")
def _(tmp):
    path = str(tmp / "ints.npz")
    np.savez(path, **_timm_arrays(dtype="int32"))
    keras_vit.load_weights(tiny(), path)


@case("a checkpoint with NaN values", ValueError, "NaN", "fc1")
def _(tmp):
    source = keras_vit.create_model("vit_ti16", image_size=16, num_classes=3, depth=1, **TINY_ENCODER)
    kernel = source.get_layer("block_0").mlp.fc1.kernel
    kernel.assign(np.full(kernel.shape, np.nan, "float32"))
    keras_vit.load_weights(tiny(), saved(tmp, source, "nan.keras"))


@case("a checkpoint with infinite values", ValueError, "infinite values", "patch_embed.proj.weight")
def _(tmp):
    arrays = _timm_arrays()
    arrays["patch_embed.proj.weight"][0, 0, 0, 0] = np.inf
    path = str(tmp / "inf.npz")
    np.savez(path, **arrays)
    keras_vit.load_weights(tiny(), path)


@case("a folder given as a checkpoint", InvalidModelFileError, "is a folder")
def _(tmp):
    keras_vit.load_model(str(tmp))


@case("a checkpoint without the architecture", InvalidModelFileError, "holds weights only", "model_name")
def _(tmp):
    path = str(tmp / "w.npz")
    np.savez(path, **_timm_arrays())
    keras_vit.load_model(path)


@case("a pickle that holds more than tensors", CheckpointReadError, "safe_mode=False", "Python objects")
def _(tmp):
    import torch

    path = str(tmp / "model.pth")
    torch.save({"state_dict": {"w": torch.zeros(2)}, "config": Opaque()}, path)
    keras_vit.load_weights(tiny(), path)


@case("an npz of object arrays", CheckpointReadError, "object arrays")
def _(tmp):
    path = str(tmp / "objects.npz")
    np.savez(path, **{"patch_embed.proj.weight": np.array([{"a": 1}], dtype=object)})
    keras_vit.load_weights(tiny(), path)


@case("a safetensors header whose offsets pass the data", CheckpointReadError, "claims bytes", "corrupt or truncated")
def _(tmp):
    data = _safetensors({"patch_embed.proj.weight": np.zeros((32, 3, 16, 16), "float32")}, offset_shift=1000)
    keras_vit.load_weights(tiny(), write(tmp, "lies.safetensors", data))


@case("a safetensors header that claims 50 MB", CheckpointReadError, "header claims 50000000 bytes", "the file has 16")
def _(tmp):
    keras_vit.load_weights(tiny(), write(tmp, "huge.safetensors", struct.pack("<Q", 50_000_000) + b'{"a": 1}'))


@case("a .keras file with a Lambda layer", InvalidModelFileError, "Lambda layer", "safe_mode=False")
def _(tmp):
    model = keras.Sequential([keras.Input((3,)), keras.layers.Lambda(lambda x: x * 2)])
    keras_vit.load_model(saved(tmp, model, "lambda.keras"))


@case("a zip bomb posing as a .keras file", InvalidModelFileError, "declares 1.0 GB", "zip bomb")
def _(tmp):
    keras_vit.load_model(zip_bomb(tmp / "bomb.keras"))


# --- Data -------------------------------------------------------------------------------


@case("unknown dataset name", ValueError, "mnits", "mnist")
def _(tmp):
    load_dataset("mnits")


@case("a dataset folder that does not exist", ValueError, "no_such_folder")
def _(tmp):
    load_dataset(str(tmp / "no_such_folder"))


@case("a dataset folder with no images", ValueError, "No images found", "one subfolder per class")
def _(tmp):
    (tmp / "cats").mkdir()
    (tmp / "cats" / "notes.txt").write_text("no image here")
    load_dataset(str(tmp))


@case("a dataset folder with one class", ValueError, "has 1 class subfolder(s) (cats)", "needs at least two")
def _(tmp):
    _image_folder(tmp, {"cats": 6})
    load_dataset(str(tmp))


@case("a dataset folder with a file that is not an image", ValueError, "not PNG, JPEG, GIF or BMP", "broken.jpg")
def _(tmp):
    _image_folder(tmp, {"cats": 6, "dogs": 6})
    (tmp / "dogs" / "broken.jpg").write_text("<html>404 Not Found</html>")
    load_dataset(str(tmp))


@case("a dataset folder with an image that cannot be read", ValueError, "cannot be read", "gone.png")
def _(tmp):
    _image_folder(tmp, {"cats": 6, "dogs": 6})
    os.symlink(tmp / "nowhere.png", tmp / "dogs" / "gone.png")  # a link to a file since removed
    load_dataset(str(tmp))


@case(
    "a feature whose package is not installed",
    MissingDependencyError,
    "pip install 'keras-vision-transformer[inspect]'",
)
def _(tmp):
    require("keras_vit_absent_package", "inspect")


# --- Recipe configuration (the API) -----------------------------------------------------


@case("misspelt recipe field", ValueError, "learnin_rate", "learning_rate")
def _(tmp):
    make_config("digits_pretrain", learnin_rate=0.1)


@case("unknown recipe preset", ValueError, "digits_pretrian", "digits_pretrain")
def _(tmp):
    make_config("digits_pretrian")


@case("fine-tuning from a file that is not there", FileNotFoundError, "--init-from", "nope.keras", "is not a file")
def _(tmp):
    finetune(make_config("digits_finetune", output_dir=str(tmp), init_from=str(tmp / "nope.keras")))


@case("a batch size the devices do not divide", ValueError, "batch_size 3 is not divisible by the 2 devices")
def _(tmp):
    strategy = {"tensorflow": "mirrored", "jax": "data_parallel", "torch": "default"}[keras.backend.backend()]
    with pytest.MonkeyPatch.context() as patch:  # two devices: what a two-GPU machine reports
        patch.setattr(distribution_module, "num_replicas", lambda name: 2)
        distribution_module.check_strategy(strategy, 3)


@case("a strategy the backend lacks", ValueError, "is not available on the", "expected one of")
def _(tmp):
    wrong = {"tensorflow": "data_parallel", "jax": "mirrored", "torch": "mirrored"}[keras.backend.backend()]
    pretrain(make_config("digits_pretrain", output_dir=str(tmp), strategy=wrong))


@case("few-shot shots beyond the smallest class", ValueError, "5000-shot needs 5000 training images of every class")
def _(tmp):
    pretrain(make_config("digits_pretrain", output_dir=str(tmp), fewshot_every=1, fewshot_shots="1,5000"))


# --- The command lines: one line, exit status 2 -----------------------------------------


@case("--batch-size 0", SystemExit, "--batch-size must be in [1, inf)", "got 0")
def _(tmp):
    cli("--batch_size", "0")


@case("--learning-rate -1", SystemExit, "--learning-rate must be in (0.0, inf)", "-1")
def _(tmp):
    cli("--learning_rate", "-1")


@case("--epochs 0", SystemExit, "--epochs must be in [1, inf)", "got 0")
def _(tmp):
    cli("--epochs", "0")


@case("--epochs 2.5", SystemExit, "--epochs", "2.5")
def _(tmp):
    cli("--epochs", "2.5")


@case("--epochs many", SystemExit, "--epochs expects int, got 'many'")
def _(tmp):
    cli("--epochs", "many")


@case("a mask ratio outside (0, 1)", SystemExit, "mask_ratio must be a number in (0, 1)", "got 1.5")
def _(tmp):
    cli("--objective", "mae", "--mask_ratio", "1.5", "--output_dir", str(tmp))


@case("a mask ratio that hides every patch", SystemExit, "mask_ratio=0.99 hides all 16 patches")
def _(tmp):
    cli("--objective", "mae", "--mask_ratio", "0.99", "--output_dir", str(tmp))


@case("an MAE decoder its heads do not divide", SystemExit, "decoder_width must be a multiple of decoder_heads",
      "decoder_width=100, decoder_heads=16")  # fmt: skip
def _(tmp):
    cli("--objective", "mae", "--decoder_width", "100", "--output_dir", str(tmp))


@case("MAE on a hybrid", SystemExit, "A masked autoencoder cannot be built on this ViT",
      "ResNet stem convolves across patch borders")  # fmt: skip
def _(tmp):
    cli("--objective", "mae", "--model", "r26_vit_s32", "--image_size", "32", "--output_dir", str(tmp))


@case("a teacher of other classes", SystemExit, "--teacher", "classifies 3 classes; the student learns 10")
def _(tmp):
    cli("--teacher", saved(tmp), "--representation_size", "none", "--output_dir", str(tmp))


@case("a teacher that does not load", SystemExit, "--teacher", "is not a file or folder")
def _(tmp):
    cli("--teacher", str(tmp / "teacher.keras"), "--output_dir", str(tmp))


@case("a teacher for a self-supervised objective", SystemExit, "--teacher distils a classifier",
      "got 'mae'")  # fmt: skip
def _(tmp):
    cli("--teacher", saved(tmp), "--objective", "mae", "--output_dir", str(tmp))


@case("a student that cannot take a distillation token", SystemExit, "--teacher gives the student",
      "no representation_size", "got representation_size=64")  # fmt: skip
def _(tmp):
    # A pre-logits layer the user asks for (the recipe's own is dropped for a teacher).
    cli("--teacher", saved(tmp, tiny(num_classes=10)), "--representation_size", "64", "--output_dir", str(tmp))


@case("a distillation weight outside [0, 1]", SystemExit, "--distillation-weight must be in [0.0, 1.0]", "got 2.0")
def _(tmp):
    cli("--teacher", "x", "--distillation_weight", "2", "--output_dir", str(tmp))


@case("pre-training from a model, not as a masked autoencoder", SystemExit,
      "--init-from in pre-training continues a masked autoencoder", "got 'classification'")  # fmt: skip
def _(tmp):
    cli("--init_from", saved(tmp), "--output_dir", str(tmp))


@case("continuing a masked autoencoder with another decoder", SystemExit, "has another decoder than the recipe asks",
      "--decoder-width 64 (the model's: 16)")  # fmt: skip
def _(tmp):
    mae = keras_vit.models.MaskedAutoencoder(image_size=16, patch_size=4, depth=1, **TINY_ENCODER, decoder_width=16,
                                             decoder_depth=1, decoder_heads=2)  # fmt: skip
    cli("--objective", "mae", "--init_from", saved(tmp, mae), "--decoder_width", "64", "--output_dir", str(tmp))


@case("an unknown objective", SystemExit, "--objective: invalid choice: 'colour'", "masked_patch_prediction")
def _(tmp):
    cli("--objective", "colour", "--output_dir", str(tmp))


@case("fine-tuning without --init-from", SystemExit, "Fine-tuning needs --init-from")
def _(tmp):
    cli("--output_dir", str(tmp), recipe=finetune, preset="digits_finetune")


@case("--dropout-rate 1.5", SystemExit, "dropout_rate", "1.5")
def _(tmp):
    cli("--dropout_rate", "1.5", "--output_dir", str(tmp))


@case("--crop-area-min 1.5", SystemExit, "--crop-area-min must be in (0.0, 1.0]", "1.5")
def _(tmp):
    cli("--crop_area_min", "1.5")


@case("an unknown flag", SystemExit, "Unknown flag(s): --lr (did you mean --learning-rate")
def _(tmp):
    cli("--lr", "0.1")


@case("an unknown strategy", SystemExit, "--strategy: invalid choice: 'tpu_pod'", "data_parallel")
def _(tmp):
    cli("--strategy", "tpu_pod", "--output_dir", str(tmp))


@case("an unknown dataset on the command line", SystemExit, "mnits")
def _(tmp):
    cli("--dataset", "mnits", "--output_dir", str(tmp))


@case("an unknown model on the command line", SystemExit, "vit_b17")
def _(tmp):
    cli("--model", "vit_b17", "--output_dir", str(tmp))


@case("a missing --init-from file", SystemExit, "--init-from", "missing.keras", "is not a file")
def _(tmp):
    cli("--init_from", str(tmp / "missing.keras"), "--output_dir", str(tmp), recipe=finetune, preset="digits_finetune")


@case("fine-tuning from a model name alone", SystemExit, "--init-from 'vit_ti16' is not a file, a folder or a preset",
      "vit_ti16.augreg_in21k_ft_in1k")  # fmt: skip
def _(tmp):
    cli("--init_from", "vit_ti16", "--output_dir", str(tmp / "runs"), recipe=finetune, preset="digits_finetune")


@case("architecture options that contradict the pre-trained model", SystemExit, "built otherwise than the recipe asks",
      "--depth 3 (the model's: 1)", "--patch-size 8 (the model's: 4)")  # fmt: skip
def _(tmp):
    keras_vit.save_preset(tiny(patch_size=4), tmp / "preset")
    cli("--init_from", str(tmp / "preset"), "--depth", "3", "--patch_size", "8", "--output_dir", str(tmp / "runs"),
        recipe=finetune, preset="digits_finetune")  # fmt: skip


@case("a LoRA rank of 0", SystemExit, "--lora-rank must be in [1, inf)", "got 0")
def _(tmp):
    cli("--lora_rank", "0", "--init_from", "x.keras", recipe=finetune, preset="digits_finetune")


@case("a LoRA rank above the layer width", SystemExit, "--lora-rank must be from 1 to 32", "got 33")
def _(tmp):
    keras_vit.save_preset(tiny(patch_size=4), tmp / "preset")
    cli("--init_from", str(tmp / "preset"), "--lora_rank", "33", "--output_dir", str(tmp / "runs"), recipe=finetune,
        preset="digits_finetune")  # fmt: skip


@case("a layer decay above 1", SystemExit, "--layer-decay must be in (0.0, 1.0]", "got 1.5")
def _(tmp):
    cli("--layer_decay", "1.5", "--init_from", "x.keras", recipe=finetune, preset="digits_finetune")


@case("LoRA in pre-training", SystemExit, "--lora-rank: options of fine-tuning a pre-trained model")
def _(tmp):
    cli("--lora_rank", "4", "--output_dir", str(tmp / "runs"))


@case("a dataset folder too small to validate on", SystemExit, "The validation split(s) of", "are empty",
      "6 images or more per class")  # fmt: skip
def _(tmp):
    (tmp / "photos").mkdir()
    _image_folder(tmp / "photos", {"cats": 3, "dogs": 3})
    cli("--dataset", str(tmp / "photos"), "--output_dir", str(tmp / "runs"))


@case("a dataset with one class on the command line", SystemExit, "1 class subfolder(s) (cats)", "needs at least two")
def _(tmp):
    (tmp / "photos").mkdir()
    _image_folder(tmp / "photos", {"cats": 6})
    cli("--dataset", str(tmp / "photos"), "--output_dir", str(tmp / "runs"))


@case("--resume with another configuration", SystemExit, "began as another run", "--learning-rate 0.002 -> 0.5")
def _(tmp):
    from keras_vit.training.objectives import OBJECTIVES
    from keras_vit.training.pretrained import model_name
    from keras_vit.training.run_folder import open_run_dir, record_config, run_name

    config = make_config("digits_pretrain", output_dir=str(tmp))
    objective = OBJECTIVES[config.objective]
    name = run_name(config, "pretrain", model_name(config, None), objective)  # the folder the command opens
    run_dir, _ = open_run_dir(config, name)  # a run stopped before its end
    record_config(run_dir, config, "pretrain", resumed=False)
    before = os.listdir(run_dir)
    try:
        run_command_line(pretrain, ["--resume", "--learning_rate", "0.5", "--output_dir", str(tmp)], "digits_pretrain")
    finally:
        assert os.listdir(tmp) == [name] and os.listdir(run_dir) == before


@case("an output folder that is a file", SystemExit, "(--output-dir)", "output.txt is a file, not a folder",
      "give --output-dir another path")  # fmt: skip
def _(tmp):
    (tmp / "output.txt").write_text("a file, not a folder")
    cli("--output_dir", str(tmp / "output.txt"), "--epochs", "1")


@case("an output folder that cannot be written", SystemExit, "Cannot write /sys/keras-vit-runs/", "(--output-dir)")
def _(tmp):
    cli("--output_dir", "/sys/keras-vit-runs", "--epochs", "1")  # sysfs: no one may create files there


def recipe(name):
    """A command's module (``keras-vit NAME``; the recipe scripts run the same)."""
    from keras_vit.commands import command

    return command(name)


@case("an unknown command", SystemExit, "Unknown command 'pretrian' (did you mean pretrain?)")
def _(tmp):
    from keras_vit.commands import main

    raise SystemExit(main(["pretrian", "--epochs", "1"]))


@case("an unknown recipe on the command line", SystemExit, "--recipe: invalid choice: 'paper'", "digits_pretrain")
def _(tmp):
    cli("--recipe", "paper")


@case("a flag without its value", SystemExit, "argument --epochs: expected one argument", "--help lists the flags")
def _(tmp):
    cli("--epochs")


@case("export: no output folder", SystemExit, "the following arguments are required: --output")
def _(tmp):
    recipe("export").main([saved(tmp)])


@case("few-shot: a count that is not a number", SystemExit, "argument --seeds: invalid int value: 'many'")
def _(tmp):
    recipe("fewshot").main([saved(tmp), "--seeds", "many"])


@case("classify: a file that is not an image", SystemExit, "Cannot read", "notes.png")
def _(tmp):
    (tmp / "notes.png").write_text("not an image")
    recipe("classify").main([saved(tmp), str(tmp / "notes.png")])


@case("classify: no top classes", SystemExit, "--top must be at least 1; got 0")
def _(tmp):
    recipe("classify").main([saved(tmp), str(tmp / "x.png"), "--top", "0"])


@case("export: an unknown format", SystemExit, "tflite_int4", "tflite_int8")
def _(tmp):
    recipe("export").main([saved(tmp), "--output", str(tmp / "out"), "--formats", "tflite_int4"])


@case("export: a model file that is not there", SystemExit, "missing.keras")
def _(tmp):
    recipe("export").main([str(tmp / "missing.keras"), "--output", str(tmp / "out"), "--formats", "savedmodel"])


@case("export: an output that exists", SystemExit, "these exist", "--overwrite replaces them")
def _(tmp):
    (tmp / "out").mkdir()
    (tmp / "out" / "savedmodel").mkdir()  # a previous export
    recipe("export").main([saved(tmp), "--output", str(tmp / "out"), "--formats", "savedmodel"])


@case("few-shot: zero seeds", SystemExit, "--seeds must be at least 1; got 0")
def _(tmp):
    recipe("fewshot").main([saved(tmp), "--seeds", "0"])


@case("few-shot: more shots than the smallest class has", SystemExit, "5000-shot needs 5000 training images")
def _(tmp):
    recipe("fewshot").main([saved(tmp), "--shots", "1,5000", "--seeds", "1"])


@case("inspect: zero images", SystemExit, "--num-images must be at least 1; got 0")
def _(tmp):
    recipe("inspect").main([saved(tmp), "--num_images", "0"])


@case("inspect: a model that is neither a file nor a preset", SystemExit, "no_such_model")
def _(tmp):
    recipe("inspect").main([str(tmp / "no_such_model"), "--output", str(tmp / "figures.txt")])


# --- Outputs that cannot be written, refused before the model loads ---------------------

# sysfs: no process, root included (as tests often run), may create files there.
UNWRITABLE = "/sys/keras-vit-output"


def a_file(tmp, name="cat.jpg"):
    (tmp / name).write_bytes(b"\xff\xd8 not a folder")
    return tmp / name


@case("export: an output folder that cannot be made", SystemExit, f"Cannot write {UNWRITABLE} (--output)",
      "give --output another path")  # fmt: skip
def _(tmp):
    recipe("export").main([saved(tmp), "--output", UNWRITABLE, "--formats", "savedmodel"])


@case("export: an output folder inside a file", SystemExit, "(--output)", "cat.jpg is a file, not a folder",
      "give --output another path")  # fmt: skip
def _(tmp):
    recipe("export").main([saved(tmp), "--output", str(a_file(tmp) / "export"), "--formats", "savedmodel"])


@case("export: an output folder that is a file", SystemExit, "(--output)", "cat.jpg is a file, not a folder")
def _(tmp):
    recipe("export").main([saved(tmp), "--output", str(a_file(tmp)), "--formats", "savedmodel"])


@case("inspect: an output folder that cannot be made", SystemExit, f"Cannot write {UNWRITABLE} (--output)",
      "give --output another path")  # fmt: skip
def _(tmp):
    recipe("inspect").main([saved(tmp), "--output", UNWRITABLE])


@case("inspect: an output folder inside a file", SystemExit, "(--output)", "cat.jpg is a file, not a folder")
def _(tmp):
    recipe("inspect").main([saved(tmp), "--output", str(a_file(tmp) / "figures")])


@case("few-shot: a --csv that cannot be written", SystemExit, f"Cannot write {UNWRITABLE}/fewshot.csv (--csv)",
      "give --csv another path")  # fmt: skip
def _(tmp):
    recipe("fewshot").main([saved(tmp), "--csv", f"{UNWRITABLE}/fewshot.csv", "--shots", "1", "--seeds", "1"])


@case("few-shot: a --csv inside a file", SystemExit, "(--csv)", "cat.jpg is a file, not a folder")
def _(tmp):
    recipe("fewshot").main([saved(tmp), "--csv", str(a_file(tmp) / "fewshot.csv"), "--shots", "1", "--seeds", "1"])


@case("classify: a --csv that is a folder", SystemExit, "(--csv): it is a folder", "give --csv a file name")
def _(tmp):
    recipe("classify").main([saved(tmp), str(tmp / "x.png"), "--csv", str(tmp)])  # refused before any image is read


@case("export_model: an output folder that cannot be made", UnwritableOutputError, f"Cannot write {UNWRITABLE}",
      "(output)")  # fmt: skip
def _(tmp):
    from keras_vit.export import export_model

    export_model(tiny(), UNWRITABLE, formats="tflite_float32")


# --- Writing files ----------------------------------------------------------------------


@case("a model path without .keras", ValueError, "Expected a path ending in .keras", "model.h5")
def _(tmp):
    keras_vit.save_model(tiny(), str(tmp / "model.h5"))


@case("a preset folder that exists", FileExistsError, "these exist", "flowers")
def _(tmp):
    (tmp / "flowers").mkdir()
    keras_vit.save_preset(tiny(), str(tmp / "flowers"))


@case("an export format that does not exist", ValueError, "tflite_int4", "tflite_int8")
def _(tmp):
    from keras_vit.export import export_model

    export_model(tiny(), str(tmp / "out"), formats="tflite_int4")


# --- Helpers ----------------------------------------------------------------------------


class Opaque:
    """A pickled object that is not a tensor."""


def _timm_arrays(dtype="float32"):
    """A complete timm-layout state dict of ``tiny()``."""
    width, mlp = TINY_ENCODER["hidden_size"], TINY_ENCODER["mlp_dim"]
    shapes = {
        "cls_token": (1, 1, width),
        "pos_embed": (1, 2, width),
        "patch_embed.proj.weight": (width, 3, 16, 16),
        "patch_embed.proj.bias": (width,),
        "norm.weight": (width,),
        "norm.bias": (width,),
        "head.weight": (3, width),
        "head.bias": (3,),
    }
    block = {
        "norm1.weight": (width,),
        "norm1.bias": (width,),
        "attn.qkv.weight": (3 * width, width),
        "attn.qkv.bias": (3 * width,),
        "attn.proj.weight": (width, width),
        "attn.proj.bias": (width,),
        "norm2.weight": (width,),
        "norm2.bias": (width,),
        "mlp.fc1.weight": (mlp, width),
        "mlp.fc1.bias": (mlp,),
        "mlp.fc2.weight": (width, mlp),
        "mlp.fc2.bias": (width,),
    }
    shapes.update({f"blocks.0.{k}": v for k, v in block.items()})
    rng = np.random.default_rng(0)
    return {k: rng.normal(size=s).astype(dtype) for k, s in shapes.items()}


def _safetensors(arrays, offset_shift=0):
    header, offset, body = {}, 0, b""
    for name, array in arrays.items():
        data = array.tobytes()
        header[name] = {"dtype": "F32", "shape": list(array.shape), "data_offsets": [offset + offset_shift,
                        offset + offset_shift + len(data)]}  # fmt: skip
        offset, body = offset + len(data), body + data
    text = json.dumps(header).encode()
    return struct.pack("<Q", len(text)) + text + body


def _image_folder(root, counts):
    from PIL import Image

    for name, count in counts.items():
        (root / name).mkdir()
        for i in range(count):
            Image.new("RGB", (8, 8), (i * 20, 0, 0)).save(root / name / f"{i}.png")


def zip_bomb(path, gigabytes=1):
    """A .keras-shaped zip whose weights member expands to ``gigabytes`` of zeros (4 MB on disk)."""
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=1) as archive:
        archive.writestr("config.json", json.dumps({"class_name": "Functional", "config": {}}))
        archive.writestr("metadata.json", "{}")
        with archive.open("model.weights.h5", "w", force_zip64=True) as member:
            chunk = bytes(64 << 20)
            for _ in range(16 * gigabytes):
                member.write(chunk)
    return str(path)


# --- Checked before the recipe prints its values, each error naming its flag --------------


def before_the_printout(*argv, **options):
    """``cli(*argv)``, its printout held: the recipe's values must not be printed before the error."""
    import contextlib
    import io

    printed = io.StringIO()
    try:
        with contextlib.redirect_stdout(printed):
            cli(*argv, **options)
    finally:
        assert "recipe " not in printed.getvalue(), f"printed before the error: {printed.getvalue()}"


@case("an image size the patch size does not divide, before the printout", SystemExit,
      "--image-size 15 is not divisible by --patch-size 4", "a multiple of 4 such as 12 or 16")  # fmt: skip
def _(tmp):
    before_the_printout("--image_size", "15", "--patch_size", "4", "--output_dir", str(tmp))


@case("fine-tuning at a size the model's patches do not divide, before the printout", SystemExit,
      "--image-size 18 is not divisible by the patch size 4 of --init-from", "such as 16 or 20")  # fmt: skip
def _(tmp):
    before_the_printout("--init_from", saved(tmp, tiny(patch_size=4)), "--image_size", "18", "--output_dir",
                        str(tmp / "runs"), recipe=finetune, preset="digits_finetune")  # fmt: skip


@case("fine-tuning on three images a class, before the printout", SystemExit,
      "The validation split(s) of --dataset", "6 images or more per class")  # fmt: skip
def _(tmp):
    (tmp / "few").mkdir()
    _image_folder(tmp / "few", {"cats": 3, "dogs": 3})
    before_the_printout("--init_from", saved(tmp, tiny(patch_size=4)), "--dataset", str(tmp / "few"), "--output_dir",
                        str(tmp / "runs"), recipe=finetune, preset="digits_finetune")  # fmt: skip


# --- The tests --------------------------------------------------------------------------


def test_the_catalogue():
    names = [c.name for c in CASES]
    assert len(set(names)) == len(names), "two cases of one name"
    assert len(CASES) >= 50, f"{len(CASES)} bad-input cases; the issue asks for at least 50"
    print(f"{len(CASES)} bad-input cases on {keras.backend.backend()}")


def _raised_here(excinfo):
    """Whether the innermost frame that raised is keras-vit's own code (or this file's CLI)."""
    package = os.path.dirname(keras_vit.__file__)
    return str(excinfo.traceback[-1].path).startswith(package)


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_bad_input_is_refused_clearly(case, tmp_path, capsys):
    with pytest.raises(case.error) as excinfo:
        case.call(tmp_path)
    if case.error is SystemExit:
        assert excinfo.value.code == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith("error: ") and "\n" not in err, err  # one line, no traceback
        message = err
    else:
        message = str(excinfo.value)
        assert _raised_here(excinfo), f"raised at {excinfo.traceback[-1].path}:{excinfo.traceback[-1].lineno}"
    for fragment in case.says:
        assert fragment in message, f"{fragment!r} not in: {message}"


def test_a_batch_that_two_real_devices_do_not_divide_is_refused_before_training(tmp_path):
    """The devices-do-not-divide case above, on two devices of a real process."""
    if keras.backend.backend() == "torch":
        pytest.skip("no multi-device strategy on torch")
    script = textwrap.dedent("""
        import os, sys
        if os.environ["KERAS_BACKEND"] == "tensorflow":
            import tensorflow as tf
            cpu = tf.config.list_physical_devices("CPU")[0]
            tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
        from keras_vit.training import make_config, pretrain
        strategy = "mirrored" if os.environ["KERAS_BACKEND"] == "tensorflow" else "data_parallel"
        pretrain(make_config("digits_pretrain", batch_size=33, strategy=strategy, output_dir=sys.argv[1]))
    """)
    env = {**os.environ, "XLA_FLAGS": os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=2"}
    out = subprocess.run([sys.executable, "-c", script, str(tmp_path)], env=env, capture_output=True, text=True)
    assert out.returncode != 0
    assert "batch_size 33 is not divisible by the 2 devices" in out.stderr
    assert "Epoch 1" not in out.stdout


# A child whose backend Keras cannot load: the Python API's first use, then a command.
BACKEND_CHILD = """
import sys
if sys.argv[1]:
    sys.modules[sys.argv[1]] = None  # the backend's package, as if it were not installed
import keras_vit
try:
    keras_vit.create_model("vit_ti16")
except Exception as error:
    print(f"{type(error).__name__}: {error}")
from keras_vit.commands import main
status = main(["classify", "photo.jpg", "--model", "vit_ti16"])
assert "keras" not in sys.modules, "refused before Keras was imported"
print(f"exit {status}")
"""


@pytest.mark.backend_free(processes="the child stops before Keras is imported")
@pytest.mark.parametrize(
    "backend, hidden, error, says",
    [
        ("tensorflw", "", "UnknownBackendError", "KERAS_BACKEND='tensorflw' is not a Keras backend (did you mean"),
        ("jax", "jax", "MissingDependencyError", "needs jax, which is not installed: pip install 'keras-vision-"),
    ],
    ids=["misspelt", "not installed"],
)
def test_a_backend_keras_cannot_load_is_one_error_in_python_and_one_line_on_the_command_line(
    backend, hidden, error, says
):
    env = {**os.environ, "KERAS_BACKEND": backend}
    out = subprocess.run([sys.executable, "-c", BACKEND_CHILD, hidden], env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-3000:]
    first, last = out.stdout.splitlines()
    assert first.startswith(f"{error}: ") and says in first  # Python: a keras-vit error class
    assert last == "exit 2" and out.stderr.splitlines() == [f"error: {first.split(': ', 1)[1]}"]


# --- Files that could run code or exhaust memory: the opt-in, and the memory bound ------


def test_safe_mode_false_is_the_opt_in_for_a_trusted_pickle_and_lambda(tmp_path):
    import torch

    source = tiny()
    state = {k: torch.from_numpy(v) for k, v in _timm_arrays().items()}
    path = str(tmp_path / "trusted.pth")
    torch.save({"state_dict": state, "config": Opaque()}, path)
    report = keras_vit.load_weights(source, path, safe_mode=False, warn=False)
    assert "block_0/mlp/fc1/kernel" in report.loaded
    np.testing.assert_allclose(keras.ops.convert_to_numpy(source.get_layer("head").bias), _timm_arrays()["head.bias"])
    model = keras.Sequential([keras.Input((3,)), keras.layers.Lambda(lambda x: x * 2)])
    loaded = keras_vit.load_model(saved(tmp_path, model, "lambda.keras"), safe_mode=False)
    assert keras.ops.convert_to_numpy(loaded(np.ones((1, 3), "float32"))).tolist() == [[2.0, 2.0, 2.0]]


MEMORY = """
import resource, sys
import keras_vit
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
try:
    keras_vit.load_model(sys.argv[1])
except keras_vit.sources.InvalidModelFileError as error:
    after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print("REFUSED", (after - before) // 1024)  # MB more at the peak
"""


@once_on("torch", "the archive is checked by keras-vit's own code before any backend reads it")
def test_a_zip_bomb_is_refused_within_a_memory_bound(tmp_path):
    out = subprocess.run([sys.executable, "-c", MEMORY, zip_bomb(tmp_path / "bomb.keras")], capture_output=True,
                         text=True, timeout=300)  # fmt: skip
    assert out.stdout.startswith("REFUSED"), out.stderr[-3000:]
    assert int(out.stdout.split()[1]) < 64  # MB; the bomb expands to 1024
