"""Every command the README and the manual show runs as written, offline, on small models.

The pages' shell blocks are read as tests/test_docs.py reads them (``helpers``), and each page's commands
run in their order, in a folder of the page's own, through the program's entry point
(``keras_vit.commands.main``, in this process). What a command names that no command
before it wrote is put there first, as a reader would have it (``PROVIDED``: photos in two
classes, a model file, a preset folder). The presets the pages name are served by a mirror
on 127.0.0.1 under their own names and in their publishers' layouts, as small models
(``TINY``). Each training command gets flags appended that make it small and short (the
last flag given wins); every other command runs as written. A command that needs what an
offline test cannot have is in ``NOT_RUN`` with the reason (test_docs.py still parses it).
The commands run on TensorFlow, but those a page runs on JAX (``KERAS_BACKEND=jax``,
``keras-vit launch``'s processes), which run in the JAX run.

The whole suite (CI) runs the README's commands on TensorFlow, a new user's first ones. The
manual's pages and the commands on JAX train, export and start processes for several
minutes more: ``KERAS_VIT_DOCS_COMMANDS=1`` runs them too (docs/contributing.md: before a
change to the docs or to the commands).
"""

import dataclasses
import os

import pytest
from helpers import documented_commands, once_on, serve_preset, write_photo, write_photos

import keras_vit

ON_REQUEST = pytest.mark.skipif(
    os.environ.get("KERAS_VIT_DOCS_COMMANDS") != "1", reason="the manual's commands: KERAS_VIT_DOCS_COMMANDS=1"
)
# What an offline test on one machine cannot run, by a part of the command line.
NOT_RUN = {
    "imagenet2012": "ImageNet, which tensorflow-datasets cannot download (its files are the reader's)",
    "cifar100": "a download of CIFAR-100, and the tests run offline",
    "--strategy tpu": "a TPU",
    "--coordinator-address": "other hosts",
    "my_training.py": "the reader's own script",
}
# The presets' small stand-ins: the variant's patch and numerics, this width and depth.
TINY = dict(hidden_size=32, depth=1, num_heads=2, mlp_dim=64)
TINY_IMAGE_SIZE = 32
# Appended to the training commands: one short epoch (of a small model, where none is named).
SHORT = ["--epochs", "1", "--steps-per-epoch", "2", "--progress", "0"]
SMALL = [w for k, v in TINY.items() for w in (f"--{k.replace('_', '-')}", str(v))] + ["--batch-size", "16"]
TRAINING = {"pretrain": SHORT + SMALL, "main": SHORT + SMALL, "finetune": SHORT + ["--batch-size", "4"]}
# Placeholders the pages write for what the reader fills in.
PLACEHOLDERS = {"<run>": "main-pretrain", "...": "vit_s16.augreg_in21k_ft_in1k"}


def _small_model(**options):
    options = {"image_size": 16, "num_classes": 10, "patch_size": 4, **TINY, **options}
    return keras_vit.create_model("vit_ti16", **options)


def _model_file(path):
    path.parent.mkdir(parents=True, exist_ok=True)
    keras_vit.save_model(_small_model(class_names=[f"digit {d}" for d in range(10)]), str(path))


def _preset_folder(path):
    preprocessing = keras_vit.layers.ImagePreprocessing.from_normalization("imagenet", 16)
    keras_vit.save_preset(_small_model(num_classes=2, class_names=["daisy", "rose"], preprocessing=preprocessing), path)


# What a page's command names, put there before the command if no command before it wrote it.
PROVIDED = {
    "photos/": lambda folder: write_photos(folder, mirrored=True),
    "photo.jpg": write_photo,
    "model.keras": _model_file,
    "presets/flowers": _preset_folder,
    "saved_models/run/model.keras": _model_file,
    "saved_models/main-pretrain/model.keras": _model_file,
    "saved_models/main-finetune/model.keras": _model_file,
}


@pytest.fixture
def reader(tmp_path, monkeypatch, timm):
    """A fresh folder to run a page's commands in, the presets the pages name served small."""
    from http_server import FileServer, download_env

    from keras_vit.presets import catalog

    named = {word for _, _, argv in documented_commands() for word in argv if word in catalog.PRESETS}
    named.add(PLACEHOLDERS["..."])
    with FileServer(tmp_path / "served") as server:
        download_env(monkeypatch, tmp_path / "home", mirror=server.url)
        for name in sorted(named):
            small = dataclasses.replace(
                catalog.PRESETS[name], image_size=TINY_IMAGE_SIZE, sha256=None, size=None, options=dict(TINY)
            )
            monkeypatch.setitem(catalog.PRESETS, name, small)
            serve_preset(small, tmp_path / "served", server.url)
        (tmp_path / "reader").mkdir()
        monkeypatch.chdir(tmp_path / "reader")
        yield tmp_path / "reader"


def _why_not_run(argv):
    line = " ".join(argv)
    return next((why for part, why in NOT_RUN.items() if part in line), None)


def _backend(environment, argv):
    return "jax" if argv[0] == "launch" else environment.get("KERAS_BACKEND", "tensorflow")


def _as_run(argv):
    """The command as the test runs it: placeholders filled in, a training command made short."""
    argv = [PLACEHOLDERS.get(word, word) for word in argv]
    argv = [word.replace("<run>", PLACEHOLDERS["<run>"]) for word in argv]
    name = argv[0] if argv[0] != "launch" else argv[argv.index("--num-processes") + 2]
    return argv + TRAINING.get(name, [])


def _run(folder, argv):
    from keras_vit.commands import main

    for word in argv:
        if word in PROVIDED and not os.path.exists(folder / word):
            PROVIDED[word](folder / word)
    try:
        status = main(argv)
    except SystemExit as stop:
        status = stop.code
    assert status in (0, None), f"keras-vit {' '.join(argv)} exited with {status}"


def _page_commands(backend):
    pages = {}
    for page, environment, argv in documented_commands():
        if _why_not_run(argv) is None and _backend(environment, argv) == backend:
            pages.setdefault(page, []).append(argv)
    return pages


def test_what_is_not_run_is_few_and_each_needs_what_a_test_cannot_have():
    commands = documented_commands()
    left = [argv for _, _, argv in commands if _why_not_run(argv) is not None]
    assert len(left) <= 6 and len(commands) - len(left) >= 25, left
    for part in NOT_RUN:  # every reason still names a command on the pages
        assert any(part in " ".join(argv) for argv in left), part


@once_on("tensorflow", "the commands' code is one on every backend; each command's backend code is tested on all three")
@pytest.mark.parametrize(
    "page", [pytest.param(p, marks=[ON_REQUEST] * (p != "README.md")) for p in sorted(_page_commands("tensorflow"))]
)
def test_each_pages_commands_run_in_order(page, reader, capsys):
    for argv in _page_commands("tensorflow")[page]:
        _run(reader, _as_run(argv))
    capsys.readouterr()


@ON_REQUEST
@once_on("jax", "what the pages run on JAX: several processes, keras.distribution")
def test_the_commands_the_pages_run_on_jax_run(reader, capsys):
    commands = [argv for argvs in _page_commands("jax").values() for argv in argvs]
    assert commands, "the pages show commands on JAX"
    for argv in commands:
        _run(reader, _as_run(argv))
    capsys.readouterr()
