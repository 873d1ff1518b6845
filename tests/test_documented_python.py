"""Every Python block the README and the manual show runs as written, offline, on small models.

A page's ```` ```python ```` blocks run in their order in one namespace, as a reader pastes
them into one session, in a folder of the page's own. What a block reads that no block
before it wrote is put there first (``PROVIDED``: photos in two classes, a model file, an
export, a checkpoint), and the names a block leaves for the reader to fill in
(``train_images``, ``images_384x512``) are given small real values (``GIVEN``: photos
from scikit-image). The presets and hub names the pages use are served by a mirror on
127.0.0.1 under their own names and in their publishers' layouts, as tests/
test_documented_commands.py serves them, but at their own image size and depth (a block
feeds them its own sizes and asks for their blocks): only their width is small, and the
named variants (``vit_b16``) are made that narrow too. A block that needs what an offline
test cannot have is in ``NOT_RUN`` with the reason. Where a page shows what a block prints
(a ``print(...)`` line's comment), ``SHOWN`` checks the printed line.

The blocks call the package's public API, whose backend code is tested on all three
backends elsewhere; the pages' blocks run once, on TensorFlow, the backend a new user's
first install gets (the export blocks need it too).
"""

import ast
import csv
import dataclasses
import os
import re

import numpy as np
import pytest
from helpers import (
    REPOSITORY,
    instruction_pages,
    once_on,
    serve_preset,
    serve_timm_model,
    small_timm_model,
    write_photo,
    write_photos,
)
from image_text_pairs import serve_pairs

import keras_vit

PYTHON_BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)
# The narrow stand-ins: a variant's patch, depth and numerics, this width.
NARROW = dict(hidden_size=32, num_heads=2, mlp_dim=64)
# What an offline test on one machine cannot run, by a part of the block.
NOT_RUN = {
    "localhost:8501": "TensorFlow Serving, a server the reader starts in Docker",
}
# Lines the code contradicts, each with the error it raises and the fix the page needs; the
# test holds them to it, and fails once the page is fixed (then the entry goes).
WRONG = {}
# The hub's models a page loads as a variant of its size ("vit_s16", weights=...), at the
# narrow variant's size.
HUB_SIZES = {"vit_small_patch16_224": dict(img_size=224, embed_dim=32, depth=12, num_heads=2, mlp_ratio=2.0)}
# Placeholders the pages write for what the reader fills in, as the test fills them in.
FILLED_IN = {"epochs=...": "epochs=1"}


def documented_python():
    """``(page, line, source)`` of every Python block of the README and the manual, in page
    order (the CHANGELOG and the dated performance history are records, not instructions)."""
    found = []
    for page, text in instruction_pages():
        for match in PYTHON_BLOCK.finditer(text):
            line = text[: match.start()].count("\n") + 2  # the block's first line of code
            found.append((os.path.relpath(page, REPOSITORY), line, match.group(1)))
    return found


def _why_not_run(source):
    return next((why for part, why in NOT_RUN.items() if part in source), None)


def _page_blocks():
    pages = {}
    for page, line, source in documented_python():
        if _why_not_run(source) is None:
            pages.setdefault(page, []).append((line, source))
    return pages


# ---- what the blocks read, put there before the block that reads it -------------------------


def _photos(folder):
    write_photos(folder, mirrored=True)


def _trained_model(path, class_names=("a", "b")):
    """What a training run writes: a model with its pre-processing and its dataset's classes."""
    preprocessing = keras_vit.layers.ImagePreprocessing.from_normalization("imagenet", 224)
    model = keras_vit.create_model(
        "vit_ti16", image_size=224, num_classes=len(class_names), class_names=list(class_names),
        preprocessing=preprocessing, **NARROW, depth=1,
    )  # fmt: skip
    keras_vit.save_model(model, str(path))


def _digits_model(path):
    _trained_model(path, [f"digit {d}" for d in range(10)])


def _export(path):
    """The export file or folder ``path`` names (``export/<file>``), of the model the page
    fine-tuned, the int8 file calibrated on the photos."""
    from keras_vit.export import export_model

    model = path.parent.parent / "saved_models/finetune-vit_s16-photos/model.keras"
    if not model.exists():
        _trained_model(model)
    photos = path.parent.parent / "photos"
    if not photos.exists():
        _photos(photos)
    formats = {"model_int8.tflite": "tflite_int8", "savedmodel": "savedmodel"}[path.name]
    export_model(str(model), str(path.parent), formats=formats, representative_data=str(photos))


def _original_checkpoint(path):
    """The paper's ViT-B/16 file as it publishes it (ImageNet-21k's 21843 classes, a 14x14
    grid at 224), narrow."""
    from upstream import write_original_npz

    spec = keras_vit.models.variants.VARIANTS["vit_b16"]
    tokens = (224 // spec.patch_size) ** 2 + 1
    args = (spec.hidden_size, spec.depth, spec.num_heads, spec.mlp_dim, spec.patch_size, tokens, 21843)
    write_original_npz(path, np.random.default_rng(0), *args)
    with np.load(path) as f:  # the 21k checkpoints keep their pre-logits layer
        arrays = dict(f)
    width = spec.hidden_size
    arrays["pre_logits/kernel"] = np.random.default_rng(1).normal(0, width**-0.5, (width, width)).astype("float32")
    arrays["pre_logits/bias"] = np.zeros(width, "float32")
    np.savez(path, **arrays)


def _timm_folder(path):
    """A timm model saved as the hub keeps it (config.json and model.safetensors); timm is
    imported by the ``reader`` fixture (its ``timm`` fixture)."""
    import timm

    architecture = path.name.split(".")[0]
    timm.models.save_for_hf(small_timm_model(timm, architecture), str(path), safe_serialization=True)


def _captions(path):
    """A captions file (columns image and caption) of the photos, two captions for the first."""
    if not (path.parent / "photos").exists():
        _photos(path.parent / "photos")
    photos = sorted((path.parent / "photos").rglob("*.jpg"))
    rows = [("image", "caption")] + [(p.relative_to(path.parent), f"photo number {i}") for i, p in enumerate(photos)]
    rows.append((photos[0].relative_to(path.parent), "the first photo"))
    with open(path, "w", newline="") as f:
        csv.writer(f).writerows(rows)


PROVIDED = {
    "photos/": _photos,
    "captions.csv": _captions,
    "photo.jpg": write_photo,
    "saved_models/run/model.keras": _digits_model,
    "saved_models/finetune-vit_s16-photos/model.keras": _trained_model,
    "export/model_int8.tflite": _export,
    "export/savedmodel": _export,
    "ViT-B_16.npz": _original_checkpoint,
    "downloads/vit_base_patch16_clip_224.openai": _timm_folder,
}


def _pictures(height, width, batch=2):
    """Real photos (scikit-image's) resized to ``height`` x ``width``, as 0..255 floats."""
    import skimage.data
    from PIL import Image

    photos = [skimage.data.chelsea(), skimage.data.astronaut()][:batch]
    return np.stack([np.asarray(Image.fromarray(p).resize((width, height)), "float32") for p in photos])


# Names a block uses for what the reader has, given small real values.
GIVEN = {
    "images": lambda: _pictures(384, 384),
    "images_384x512": lambda: _pictures(384, 512),
    "images_224x224": lambda: _pictures(224, 224),
    "train_images": lambda: _pictures(224, 320),
    "train_masks": lambda: np.random.default_rng(0).integers(0, 21, (2, 224, 320)),
    "my_model": lambda: keras_vit.create_model(
        "vit_s16", image_size=32, num_classes=2, class_names=["a", "b"], **NARROW
    ),  # fmt: skip
}


# ---- what the pages show a block printing -----------------------------------------------------


def _top_predictions(printed, block):
    """``[[(index, name, p), ...]]``: one image's ``top=`` classes (the block's), named, most
    probable first."""
    (image,) = ast.literal_eval(printed.splitlines()[-1])
    assert len(image) == int(re.search(r"\btop=(\d+)", block)[1]), image
    for index, name, p in image:
        assert isinstance(index, int) and isinstance(name, str) and name and 0.0 <= p <= 1.0, (index, name, p)
    assert [p for _, _, p in image] == sorted((p for _, _, p in image), reverse=True), image


def _card(printed, block):
    """A preset's card: file, numerics, pre-processing, top-1, licence."""
    for word in ("file", "numerics", "pre-processing", "top-1", "licence"):
        assert word in printed.lower(), (word, printed)


def _run_summary(printed, block):
    """A run's summary: best and last validation accuracy, test accuracy, the run folder."""
    number = r"(\d\.\d{4}|nan)"
    pattern = rf"validation accuracy best {number} \(epoch \d+\), last {number}; test accuracy \d\.\d{{4}}; .* -> (.+)"
    match = re.fullmatch(pattern, printed.splitlines()[-1])
    assert match, printed.splitlines()[-1]
    assert os.path.isfile(os.path.join(match[3], "model.keras")), match[3]


# A print(...) line's comment (the block's last line) on a page -> the check of what that line printed.
SHOWN = {
    "# [[(index, name, p), ...]]": _top_predictions,
    "# file, numerics, pre-processing, top-1, licence": _card,
    "# best and last validation accuracy, test accuracy, the run folder": _run_summary,
}
PRINT_WITH_COMMENT = re.compile(r"^print\(.*\)\s+(#.*)$", re.M)


# ---- running a page --------------------------------------------------------------------------


@pytest.fixture
def reader(request, tmp_path, monkeypatch, timm):
    """A fresh folder to run a page's blocks in; the presets and hub names the pages use served
    narrow, the named variants narrow too."""
    from http_server import FileServer, download_env, hub_env

    from keras_vit.models.variants import VARIANTS
    from keras_vit.presets import catalog

    text = " ".join(source for _, _, source in documented_python())
    with FileServer(tmp_path / "served") as server:
        download_env(monkeypatch, tmp_path / "home", mirror=server.url)
        hub_env(monkeypatch, server, tmp_path / "hub-cache")
        for name, spec in list(VARIANTS.items()):
            if f'"{name}"' in text:
                monkeypatch.setitem(VARIANTS, name, dataclasses.replace(spec, **NARROW))
        for name, preset in list(catalog.PRESETS.items()):
            if f'"{name}"' in text:
                options = dict(NARROW, depth=preset.spec.depth)
                small = dataclasses.replace(preset, sha256=None, size=None, options=options)
                monkeypatch.setitem(catalog.PRESETS, name, small)
                serve_preset(small, tmp_path / "served", server.url)
        page = request.node.callspec.params.get("page") if hasattr(request.node, "callspec") else None
        serve_pairs(" ".join(source for _, source in _page_blocks().get(page, [])), tmp_path / "served")
        for repo in sorted(set(re.findall(r'"hf-hub:timm/([\w.]+)"', text))):
            architecture, tag = repo.split(".", 1)
            serve_timm_model(timm, server, architecture, tag, **HUB_SIZES.get(architecture, {}))
        # A URL the reader's weights are at: the mirror keeps it under its path.
        spec = VARIANTS["vit_s16"]
        serve_preset(
            dataclasses.replace(
                catalog.PRESETS["vit_s16.augreg_in21k_ft_in1k"], url="https://example.org/vit_small.safetensors",
                layout="timm", options=dict(NARROW, depth=spec.depth),
            ), tmp_path / "served", server.url,
        )  # fmt: skip
        (tmp_path / "reader").mkdir()
        monkeypatch.chdir(tmp_path / "reader")
        yield tmp_path / "reader"


def _provide(folder, source):
    for name, make in PROVIDED.items():
        if f'"{name}"' in source and not os.path.exists(folder / name):
            (folder / name).parent.mkdir(parents=True, exist_ok=True)
            make(folder / name)


def _run_page(page, folder, capsys):
    namespace = {"__name__": "__main__"}
    for line, source in _page_blocks()[page]:
        for name, make in GIVEN.items():
            if re.search(rf"\b{name}\b", source) and name not in namespace:
                namespace[name] = make()
        _provide(folder, source)
        for placeholder, value in FILLED_IN.items():
            source = source.replace(placeholder, value)
        capsys.readouterr()
        wrong = [(part, error) for part, (error, _) in WRONG.items() if part in source]
        if wrong:
            ((part, error),) = wrong
            with pytest.raises(Exception) as raised:
                exec(compile(source, f"{page}:{line}", "exec"), namespace)
            assert type(raised.value).__name__ == error, f"{page}:{line}: {part} raised {raised.value!r}, not {error}"
            continue
        try:
            exec(compile(source, f"{page}:{line}", "exec"), namespace)
        except Exception as error:
            raise AssertionError(f"the Python block at {page}:{line} failed: {error!r}") from error
        printed = "\n".join(p for p in capsys.readouterr().out.splitlines() if not _keras_progress(p))
        for comment in PRINT_WITH_COMMENT.findall(source):
            assert printed, f"{page}:{line} printed nothing; the page shows {comment}"
            SHOWN[comment](printed, source)


def _keras_progress(line):
    """Keras' own lines (fit's epochs and steps, a model summary): not what the block prints."""
    return bool(re.match(r"^\s*(Epoch \d+/\d+|\d+/\d+ |[━─┏┃┡│└]|Model:|Total params|Trainable|Non-trainable)", line))


def test_what_is_not_run_is_few_and_each_needs_what_a_test_cannot_have():
    blocks = documented_python()
    left = [(page, line) for page, line, source in blocks if _why_not_run(source) is not None]
    assert len(left) <= 2 and len(blocks) - len(left) >= 12, left
    for part in NOT_RUN:  # every reason still names a block on the pages
        assert any(part in source for _, _, source in blocks), part


def test_every_output_a_page_shows_is_checked():
    shown = [c for _, _, source in documented_python() for c in PRINT_WITH_COMMENT.findall(source)]
    assert shown, "the pages show what some blocks print"
    assert set(shown) <= set(SHOWN), set(shown) - set(SHOWN)


@once_on("tensorflow", "the blocks call the public API, whose backend code is tested on all three")
@pytest.mark.parametrize("page", sorted(_page_blocks()))
def test_each_pages_python_blocks_run_in_order(page, reader, capsys):
    _run_page(page, reader, capsys)
