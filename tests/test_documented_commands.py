"""Every command the README and the manual show runs as written, offline, on small models.

The pages' shell blocks are read as tests/test_docs.py reads them (``helpers``), and each
page's commands run in their order, in a folder of the page's own, through the program's entry
point (``keras_vit.commands.main``, in this process). What a command names that no command
before it wrote is put there first, as a reader would have it (``PROVIDED``: photos in two
classes, a model file, a preset folder). A command that an earlier page ran as written runs
once: a page that repeats it gets the files it wrote there (``_run_once``). The presets the
pages name are served by a mirror on 127.0.0.1 under their own names and in their publishers'
layouts, as small models (``TINY``). Each training command gets flags appended that make it
small and short (the last flag given wins); every other command runs as written. A command that
needs what an offline test cannot have is in ``NOT_RUN`` with the reason (test_docs.py still
parses it). The commands run on TensorFlow, but those a page runs on JAX
(``KERAS_BACKEND=jax``, ``keras-vit launch``'s processes), which run in the JAX run. Where a
page says what a command prints or writes (the recipe's values first, the test accuracy and run
folder last, the main job's table, the top classes, each export's file, the few-shot table, the
figures), its output is checked against that (``PRINTS``), and no line of the backends' own
(TensorFlow's, XLA's, Gloo's: ``NOISE``) reaches the terminal.
"""

import dataclasses
import os
import re
import shutil

import pytest
from helpers import documented_commands, once_on, serve_preset, write_photo, write_photos
from image_text_pairs import serve_pairs

import keras_vit

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
    # A recipe's model.keras carries its pre-processing (classify needs it), the ViT's, at 16 px.
    preprocessing = keras_vit.layers.ImagePreprocessing.from_normalization("vit", 16)
    keras_vit.save_model(_small_model(class_names=[f"digit {d}" for d in range(10)], preprocessing=preprocessing),
                         str(path))  # fmt: skip


def _preset_folder(path):
    preprocessing = keras_vit.layers.ImagePreprocessing.from_normalization("imagenet", 16)
    keras_vit.save_preset(_small_model(num_classes=2, class_names=["daisy", "rose"], preprocessing=preprocessing), path)


def _captions_file(path):
    """A captions file as ``keras-vit evaluate --captions`` reads it: two captions for each of
    four photos written beside it."""
    photos = write_photos(path.parent / "captioned")[:4]
    rows = [
        f"{p.relative_to(path.parent)},a photo {i}\n{p.relative_to(path.parent)},image {i}"
        for i, p in enumerate(photos)
    ]
    path.write_text("image,caption\n" + "\n".join(rows) + "\n")


# What a page's command names, put there before the command if no command before it wrote it.
PROVIDED = {
    "captions.csv": _captions_file,
    "photos/": lambda folder: write_photos(folder, mirrored=True),
    "photo.jpg": write_photo,
    "model.keras": _model_file,
    "presets/flowers": _preset_folder,
    "saved_models/run/model.keras": _model_file,
    "saved_models/main-pretrain/model.keras": _model_file,
    "saved_models/main-finetune/model.keras": _model_file,
}


@pytest.fixture
def reader(request, tmp_path, monkeypatch, timm):
    """A fresh folder to run a page's commands in, the presets the pages name served small."""
    from http_server import FileServer, download_env, hub_env

    from keras_vit.presets import catalog

    named = {word for _, _, argv in documented_commands() for word in argv if word in catalog.PRESETS}
    named.add(PLACEHOLDERS["..."])
    with FileServer(tmp_path / "served") as server:
        download_env(monkeypatch, tmp_path / "home", mirror=server.url)
        hub_env(monkeypatch, server, tmp_path / "hub-cache")
        page = request.node.callspec.params.get("page") if hasattr(request.node, "callspec") else None
        commands = [" ".join(argv) for named, _, argv in documented_commands() if page in (None, named)]
        serve_pairs(" ".join(commands), tmp_path / "served")  # the image-text pairs the page names
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


def _command_at(argv):
    """Where the command that acts stands in ``argv``: 0, or after ``launch --num-processes N``."""
    return argv.index("--num-processes") + 2 if argv[0] == "launch" else 0


def _as_run(argv):
    """The command as the test runs it: placeholders filled in, a training command made short."""
    argv = [PLACEHOLDERS.get(word, word) for word in argv]
    argv = [word.replace("<run>", PLACEHOLDERS["<run>"]) for word in argv]
    return argv + TRAINING.get(argv[_command_at(argv)], [])


# The backends' own lines, which no documented command may show (keras_vit/quiet.py holds
# them back): absl's C++ log lines (W0000 00:00:... file.cc:12]), TensorFlow's start-up and
# converter lines, XLA's service lines, Gloo's.
NOISE = re.compile(
    r"^[IWEF]\d{4} \d\d:\d\d:\d\d|absl::InitializeLog|oneDNN|cuda drivers|cuInit|cpu_feature_guard|"
    r"fully_quantize|XLA service|StreamExecutor|\[Gloo\]",
    re.M,
)


def _run(folder, argv, capfd):
    """Runs one command; returns what it printed. ``capfd``: what reaches the terminal, the
    C++ libraries' writes and the processes it starts included."""
    from keras_vit.commands import main

    for word in argv:
        if word in PROVIDED and not os.path.exists(folder / word):
            PROVIDED[word](folder / word)
    capfd.readouterr()
    try:
        status = main(argv)
    except SystemExit as stop:
        status = stop.code
    printed, errors = capfd.readouterr()
    assert status in (0, None), f"keras-vit {' '.join(argv)} exited with {status}"
    noise = [line for line in (printed + errors).splitlines() if NOISE.search(line)]
    assert not noise, f"keras-vit {' '.join(argv)} showed the backends' own lines:\n" + "\n".join(noise[:10])
    for what, check in PRINTS.items():
        if check(folder, argv, printed) is False:
            raise AssertionError(f"keras-vit {' '.join(argv)} printed otherwise than {what}:\n{printed[-3000:]}")


# What the pages say a command prints or writes, each as a check of a command's output: a check
# returns None for a command it is not about, else whether the output is what the pages say.
RECIPE_LINE = r"^recipe \w+: the values not given on the command line are followed by \[where they came from\]$"


def _summed_up(folder, printed, phase, metric):
    # The recipes' last line: the best and last validation accuracy (a masked autoencoder's
    # loss), then model.keras's test accuracy (loss), and the run folder it wrote
    # (guide/recipes.md, quickstart.md).
    last = re.search(rf"^{phase}: validation {metric} best [\d.]+ \(epoch \d+\), last [\d.]+; test {metric} [\d.]+; "
                     rf"[\d.]+ s -> (?P<run>\S+)$", printed.strip().splitlines()[-1])  # fmt: skip
    return bool(last) and (folder / last["run"] / "model.keras").is_file()


def _recipe(folder, argv, printed):
    phase = {"pretrain": r"(pre-training|masked patch prediction \(.+\))", "finetune": "fine-tuning"}.get(argv[0])
    metric = "accuracy"
    if argv[0] == "pretrain" and "mae" in argv:  # --objective mae
        phase, metric = r"masked autoencoder \(.+\)", "loss"
    if phase:
        return bool(re.match(RECIPE_LINE, printed, re.M)) and _summed_up(folder, printed, phase, metric)


def _main_job(folder, argv, printed):
    # "the held-out test accuracy of each phase is printed" (README), at 16 then 24 pixels.
    if argv[0] == "main":
        rows = [r"^phase\s+image size\s+test accuracy\s+seconds\s+epochs\s+time per epoch$",
                r"^pretrain\s+16\s+0\.\d{4}\s", r"^finetune\s+24\s+0\.\d{4}\s"]  # fmt: skip
        return all(re.search(row, printed, re.M) for row in rows)


def _classify(folder, argv, printed):
    # The image, then its --top classes, most probable first: rank, probability, name (index).
    if argv[0] == "classify":
        top = int(argv[argv.index("--top") + 1]) if "--top" in argv else 5
        if "--labels" in argv:  # an image-text model: its labels are its classes
            classes = len(argv[argv.index("--labels") + 1].split(","))
        else:
            classes = keras_vit.create_model(argv[1]).spec.num_classes
        top = min(top, classes)  # a model of two classes shows two
        ranks = re.findall(r"^\s+(\d+)\.\s+[\d.]+%\s+.+ \(\d+\)$", printed, re.M)
        return printed.startswith(argv[2]) and ranks == [str(i) for i in range(1, top + 1)]


def _presets(folder, argv, printed):
    # "keras-vit presets prints them with their top-1" (README).
    if argv == ["presets"]:
        from keras_vit.presets import catalog

        header = "| preset | image size | classes | ImageNet top-1 |"
        return header in printed and all(f"| {name} |" in printed for name in catalog.PRESETS)


def _export(folder, argv, printed):
    # Each format asked for, with the file it wrote and that file's check against the model.
    if argv[0] == "export":
        formats = argv[argv.index("--formats") + 1]
        if formats == "all":
            from keras_vit.export.formats import FORMATS

            formats = ",".join(FORMATS)
        lines = {line.split()[0]: line.split() for line in printed.splitlines() if line.strip()}
        return all(name in lines and os.path.exists(lines[name][3]) and "max_abs_diff=" in " ".join(lines[name])
                   for name in formats.split(","))  # fmt: skip


def _fewshot(folder, argv, printed):
    # "digits: 1, 5, 10, 25 shots x 5 seeds" (guide/recipes.md).
    if argv[0] == "fewshot":
        rows = re.findall(r"^\s+(\d+)\s+0\.\d{4}\s+0\.\d{4}\s+(\d+)\s", printed, re.M)
        return "few-shot linear accuracy" in printed and rows == [(k, "5") for k in ("1", "5", "10", "25")]


def _inspect(folder, argv, printed):
    # The paper's figures, each drawn and its numbers beside it (guide/inspect.md).
    if argv[0] == "inspect":
        paths = printed.split()
        figures = ("attention_rollout", "attention_distance", "position_embedding_similarity", "embedding_filters")
        if "--reconstruct" in argv:  # a masked autoencoder's reconstructions (guide/recipes.md)
            figures = ("reconstructions",)
        return all(any(p.endswith(f"{f}{ext}") and os.path.isfile(p) for p in paths) for f in figures
                   for ext in (".png", ".csv"))  # fmt: skip


def _help(folder, argv, printed):
    # "the commands" (README): each, with what it does.
    if argv == ["--help"]:
        from keras_vit.commands import COMMANDS

        return all(re.search(rf"^\s+{name}\s+\S", printed, re.M) for name in COMMANDS)


PRINTS = {
    "the recipe's values first and its test accuracy and run folder last": _recipe,
    "the main job's table of both phases": _main_job,
    "the top classes of the image": _classify,
    "the presets with their top-1": _presets,
    "each format with its file and check": _export,
    "few-shot accuracy at 1, 5, 10 and 25 shots over 5 seeds": _fewshot,
    "the paper's figures and their numbers": _inspect,
    "the commands": _help,
}


# A command an earlier page ran as written runs once: a page that repeats it (the same
# words, after _as_run) gets the files it wrote there, as if it had run again.
_RAN = {}


def _files(folder):
    return {
        os.path.relpath(os.path.join(root, name), folder): os.stat(os.path.join(root, name)).st_mtime_ns
        for root, _, names in os.walk(folder)
        for name in names
    }


# The recipes whose flags a training command's words are parsed against, where a command that
# differs only in a value the appended flags replace runs once (_effective).
RECIPE_OF = {"pretrain": "digits_pretrain", "finetune": "digits_finetune"}


def _effective(argv):
    """A training command as it acts: a flag given again later (the appended SHORT and SMALL
    ones) replaces the earlier value, which is dropped. Any other command: as written."""
    inner = _command_at(argv)
    if argv[inner] not in RECIPE_OF:
        return tuple(argv)
    kept, later = [], set()
    for i in range(len(argv) - 1, -1, -1):  # from the end: the last value of a flag wins
        if argv[i].startswith("--") and i + 1 < len(argv) and i > inner and not argv[i + 1].startswith("--"):
            if argv[i] in later:
                kept = kept[:-1]  # drop the value kept just before this flag
                continue
            later.add(argv[i])
        kept.append(argv[i])
    return tuple(reversed(kept))


def _run_once(folder, argv, capfd):
    key = _effective(argv)
    if key != tuple(argv):  # its words may differ from the run's that acts as it: they must parse
        from keras_vit.commands.recipe_flags import parse_args

        inner = _command_at(argv)
        parse_args(argv[inner + 1 :], RECIPE_OF[argv[inner]])
    if key not in _RAN:
        before = _files(folder)
        _run(folder, argv, capfd)
        _RAN[key] = folder, [path for path, stamp in _files(folder).items() if before.get(path) != stamp]
        return
    source, written = _RAN[key]
    if source == folder:  # a repeat on the same page (the JAX test's one folder): its files are here
        return
    for path in written:
        (folder / path).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source / path, folder / path)


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
@pytest.mark.parametrize("page", sorted(_page_commands("tensorflow")))
def test_each_pages_commands_run_in_order(page, reader, capfd):
    for argv in _page_commands("tensorflow")[page]:
        _run_once(reader, _as_run(argv), capfd)


@once_on("jax", "what the pages run on JAX: several processes, keras.distribution")
def test_the_commands_the_pages_run_on_jax_run(reader, capfd):
    commands = [argv for argvs in _page_commands("jax").values() for argv in argvs]
    assert commands, "the pages show commands on JAX"
    for argv in commands:
        _run_once(reader, _as_run(argv), capfd)
