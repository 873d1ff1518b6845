"""Helpers the tests share (tests import this module, never each other).

A comparison that cannot fail is a defect: a model left at its initial weights has a zero
classifier (``head_zero_init=True``), so its logits are exactly 0 and its probabilities
uniform whatever its other weights and inputs are, and two such models agree however
wrong one of them is. ``randomize_keras`` (and ``randomize_torch`` with
``informative=True``, for a peer whose weights are then loaded into keras-vit) give a
model weights under which every layer's output carries information and stays near unit
size, so that a defect anywhere reaches the logits; ``assert_close_to_scale`` compares
outputs relative to their size and refuses expected values that carry no information.
"""

import math
import os
import pathlib
import re
import subprocess
import sys

import numpy as np

# Standard deviation of the class token and the position embeddings: of the order of the
# patch embeddings they are added to (unit size for unit-size pixels), so neither drowns
# the other.
TOKEN_STD = 0.5
# Biases: small, but not zero (a bias that is dropped or loaded into the wrong place must
# change the outputs).
BIAS_STD = 0.05
# Normalisation gains: near one, not one (a gain that is dropped must change the outputs).
GAIN_STD = 0.1


# The small Transformer that the model-level tests share (seconds per backend, not minutes).
TINY_ENCODER = dict(hidden_size=32, num_heads=2, mlp_dim=64)

# Files written on one backend are read on the next one of this cycle: over the suite's
# three runs (one per backend) every backend writes once and reads once, with one child
# process per test instead of two.
BACKEND_CYCLE = ("tensorflow", "jax", "torch")


def to_numpy(x):
    import keras

    return keras.ops.convert_to_numpy(x)


def leftovers(root):
    """Every file under ``root`` but the lock files (which stay, empty, by design)."""
    found = []
    for folder, _, names in os.walk(root):
        found += [os.path.relpath(os.path.join(folder, n), root) for n in names if not n.endswith(".lock")]
    return sorted(found)


def logits(model, x):
    """A Keras model's outputs on ``x``, as numpy; on JAX through one jitted call, since its
    eager mode compiles every op for every new shape (several times slower for a ResNet)."""
    import keras

    if keras.backend.backend() == "jax":
        return to_numpy(model.predict_on_batch(x))
    return to_numpy(model(x))


def images(rng, size, batch=2):
    """``batch`` images of ``size`` (an int or ``(height, width)``), uniform in [-1, 1]."""
    h, w = (size, size) if isinstance(size, int) else size
    return rng.uniform(-1, 1, (batch, h, w, 3)).astype("float32")


def log_softmax(logits, axis=-1):
    """The log-probabilities of ``logits``, in float64."""
    logits = np.asarray(logits, np.float64)
    shifted = logits - logits.max(axis=axis, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=axis, keepdims=True))


def _fan_in(shape):
    """Inputs per output of a Keras kernel: every axis but the last ((in, out) for a
    Dense layer, (kh, kw, in, out) for a convolution)."""
    return max(1, math.prod(shape[:-1]))


def randomize_keras(model, seed=0):
    """Gives every trainable float weight of a Keras model an informative random value
    (in place; returns the model): kernels N(0, 1/fan-in) (the classifier head included,
    so logits are near unit size and never all zero), normalisation gains 1 + 0.1 N(0, 1),
    biases and shifts 0.05 N(0, 1), class tokens and position embeddings 0.5 N(0, 1).

    Non-trainable weights (a fixed sin-cos table, a seed generator's state) and integer
    ones (a quantised kernel) keep their values: quantise after randomising.
    """
    rng = np.random.default_rng(seed)
    for variable in model.trainable_weights:
        if not any(kind in str(variable.dtype) for kind in ("float", "bfloat")):
            continue
        shape = tuple(variable.shape)
        name = variable.path.rsplit("/", 1)[-1]
        noise = rng.standard_normal(shape)
        if name == "gamma" or (name == "scale" and len(shape) == 1):
            value = 1.0 + GAIN_STD * noise
        elif name in ("beta", "bias") or len(shape) <= 1:
            value = BIAS_STD * noise
        elif name == "kernel":
            value = noise / math.sqrt(_fan_in(shape))
        else:  # a class token, a position table, a mask token: added to unit-size tokens
            value = TOKEN_STD * noise
        variable.assign(value.astype(str(variable.dtype)))
    return model


def randomize_torch(module, seed=0, informative=False):
    """Fills every parameter of a torch module with random values, so that zero or one
    inits hide nothing (in place; returns the module).

    By default (``informative=False``, what the older parity tests were calibrated with)
    normalisation scales are 1 + 0.1 N(0, 1) and every other parameter 0.05 N(0, 1), so
    activations shrink layer by layer. ``informative=True`` scales as ``randomize_keras``:
    weights N(0, 1/fan-in) (torch's (out, in, ...) layout), biases 0.05 N(0, 1), class
    token and position embeddings 0.5 N(0, 1), so outputs stay near unit size.
    """
    import torch

    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in module.named_parameters():
            noise = torch.randn(p.shape, generator=generator)
            if p.ndim == 1 and "norm" in name and name.endswith("weight"):
                p.copy_(1.0 + GAIN_STD * noise)  # normalisation scales near one
            elif not informative:
                p.copy_(0.05 * noise)
            elif p.ndim <= 1:
                p.copy_(BIAS_STD * noise)
            elif name.endswith("weight"):  # (out, in, kh, kw) or (out, in)
                p.copy_(noise / math.sqrt(max(1, math.prod(p.shape[1:]))))
            else:  # cls_token, pos_embed, reg_token
                p.copy_(TOKEN_STD * noise)
    return module


def torch_logits(model, x, **kwargs):
    """A torch model's outputs (``.logits`` for HF models) on channels-last numpy images."""
    import torch

    with torch.no_grad():
        out = model(torch.from_numpy(x.transpose(0, 3, 1, 2)), **kwargs)
    return (out.logits if hasattr(out, "logits") else out).numpy()


def save_torch_state(state_dict, path):
    """Writes a state dict as safetensors (by the file's extension) or with ``torch.save``."""
    import torch

    if path.endswith(".safetensors"):
        from safetensors.torch import save_file

        save_file({k: v.contiguous() for k, v in state_dict.items()}, path)
    else:
        torch.save(state_dict, path)
    return path


def assert_informative(expected, what="the expected values"):
    """Fails when ``expected`` cannot tell a right answer from a wrong one: not finite,
    all zero, or one value everywhere (a zero head's logits, uniform probabilities)."""
    expected = np.asarray(expected, np.float64)
    assert expected.size and np.isfinite(expected).all(), f"{what} are not all finite"
    assert np.abs(expected).max() > 0, f"{what} are all zero: a comparison with them cannot fail"
    assert np.ptp(expected) > 0, f"{what} are all {expected.flat[0]}: a comparison with them cannot fail"


def assert_close_to_scale(actual, expected, rtol, err_msg=""):
    """Asserts ``max |actual - expected| <= rtol * max |expected|``: a tolerance relative to
    the outputs' size, so the same ``rtol`` is as strict for logits of 0.1 as of 100.
    ``expected`` must be informative (``assert_informative``)."""
    actual = np.asarray(actual, np.float64)
    expected = np.asarray(expected, np.float64)
    assert actual.shape == expected.shape, f"shapes differ: {actual.shape} vs {expected.shape}. {err_msg}"
    assert_informative(expected)
    scale = np.abs(expected).max()
    difference = np.abs(actual - expected).max()
    assert difference <= rtol * scale, (
        f"max |actual - expected| = {difference:.3g} > {rtol:g} x max |expected| = {rtol * scale:.3g} "
        f"(max |expected| = {scale:.3g}). {err_msg}"
    )
    return difference / scale


def pil_processor(name):
    """transformers' image processor ``name`` on its PIL backend (its default picks torchvision
    wherever the name imports, and here it names tests/torchvision_stub.py)."""
    import transformers

    return getattr(transformers, f"{name}Pil", None) or getattr(transformers, name)


def write_clip_vocabulary(folder):
    """CLIP's vocabulary in the OpenAI hub repositories' layout (``vocab.json``, ``merges.txt``)
    in ``folder``, written from the real one open_clip's package ships: the same ids under
    transformers' names of the special tokens. Returns open_clip's tokenizer module."""
    import json

    import torchvision_stub

    torchvision_stub.install()  # open_clip imports torchvision, as timm does
    from open_clip import tokenizer

    reference = tokenizer.SimpleTokenizer()
    names = {"<start_of_text>": "<|startoftext|>", "<end_of_text>": "<|endoftext|>"}
    vocab = {names.get(token, token): i for token, i in reference.encoder.items()}
    (folder / "vocab.json").write_text(json.dumps(vocab), encoding="utf-8")
    merges = sorted(reference.bpe_ranks, key=reference.bpe_ranks.get)
    (folder / "merges.txt").write_text("#version: 0.2\n" + "".join(f"{a} {b}\n" for a, b in merges), encoding="utf-8")
    return tokenizer


def train_sentencepiece(folder, vocab_size, pages=("README.md",)):
    """A SentencePiece model (``folder/spiece.model``) with SigLIP's special ids (padding 0,
    ``</s>`` 1, unknown 2, no start of text), trained offline on the repository's ``pages``."""
    import sentencepiece

    corpus = folder / "corpus.txt"
    corpus.write_text("".join((REPOSITORY / page).read_text(encoding="utf-8") for page in pages), encoding="utf-8")
    sentencepiece.SentencePieceTrainer.train(
        input=str(corpus),
        model_prefix=str(folder / "spiece"),
        vocab_size=vocab_size,
        model_type="unigram",
        pad_id=0,
        eos_id=1,
        unk_id=2,
        bos_id=-1,
        minloglevel=2,
    )
    return folder / "spiece.model"


def write_photo(path):
    """One real photo (scikit-image's cat) as a JPEG at ``path``."""
    import skimage.data
    from PIL import Image

    Image.fromarray(skimage.data.chelsea()).save(path, quality=95)


def write_photos(root, mirrored=False):
    """Eight real photos (scikit-image's samples, six RGB and two grey), shrunk to at most
    96 pixels a side and written as JPEGs under ``root``, four per class (folders ``a`` and
    ``b``); returns their paths. ``mirrored``: each photo's mirror image beside it too
    (``<name>-mirrored.jpg``, not returned), eight a class, enough for a dataset's three splits."""
    import skimage.data
    from PIL import Image, ImageOps

    names = ["astronaut", "chelsea", "coffee", "rocket", "immunohistochemistry", "colorwheel", "camera", "coins"]
    paths = []
    for i, name in enumerate(names):
        image = Image.fromarray(getattr(skimage.data, name)())
        image.thumbnail((96, 96))
        folder = pathlib.Path(root) / ("a" if i % 2 else "b")
        folder.mkdir(parents=True, exist_ok=True)
        image.save(folder / f"{name}.jpg", quality=95)
        if mirrored:
            ImageOps.mirror(image).save(folder / f"{name}-mirrored.jpg", quality=95)
        paths.append(folder / f"{name}.jpg")
    return paths


PIL_FILTERS = {"bicubic": "BICUBIC", "bilinear": "BILINEAR", "nearest": "NEAREST"}


def pil_reference(image, size, crop_fraction, crop_mode, interpolation):
    """timm's transforms_imagenet_eval with torchvision on a PIL image, as 0..255 floats."""
    from PIL import Image

    height, width = (size, size) if isinstance(size, int) else size
    scaled = (math.floor(height / crop_fraction), math.floor(width / crop_fraction))
    rows, cols = image.shape[:2]
    if crop_mode == "squash":
        new_h, new_w = scaled
    else:  # torchvision Resize(int): the shorter side to it, the longer int(size * long / short)
        assert height == width, "timm's center mode is defined for square sizes"
        short, long = min(rows, cols), max(rows, cols)
        new_short, new_long = scaled[0], int(scaled[0] * long / short)
        new_h, new_w = (new_short, new_long) if rows <= cols else (new_long, new_short)
    resized = np.asarray(
        Image.fromarray(image).resize((new_w, new_h), getattr(Image, PIL_FILTERS[interpolation])), np.float32
    )
    top, left = int(round((new_h - height) / 2.0)), int(round((new_w - width) / 2.0))  # CenterCrop
    return resized[top : top + height, left : left + width]


def cat_photo():
    """A real photo, 300x451, that installs with scikit-image."""
    import skimage.data

    return skimage.data.chelsea()


def timm_input(peer):
    """``cat_photo`` through timm's evaluation transform for the timm model ``peer`` (its
    ``pretrained_cfg``: interpolation, crop, mean, std), as one NHWC float32 image."""
    cfg = peer.pretrained_cfg
    size = tuple(peer.patch_embed.img_size)
    crop_fraction = cfg.get("crop_pct", 0.875)
    pixels = pil_reference(cat_photo(), size, crop_fraction, cfg.get("crop_mode", "center"), cfg["interpolation"])
    normalised = (pixels / 255.0 - np.asarray(cfg["mean"])) / np.asarray(cfg["std"])
    return normalised[None].astype("float32")


def small_timm_args(architecture, **model_args):
    """The timm ``model_args`` of ``small_timm_model``: depth 2, a 3x3 patch grid, 8
    channels a head; ``model_args`` override."""
    from keras_vit.checkpoints.timm_architectures import ARCHITECTURES

    row = ARCHITECTURES[architecture]
    args = {**dict(depth=2, img_size=3 * row.get("patch_size", 16), embed_dim=8 * row["num_heads"]), **model_args}
    if isinstance(row.get("num_kv_heads"), list) and "num_kv_heads" not in model_args:
        # One count per block: the first block's and the fewest (grouped, where any block is).
        args["num_kv_heads"] = [row["num_kv_heads"][0], min(row["num_kv_heads"])]
    return args


def small_timm_model(timm, architecture, embedding_scale=None, **model_args):
    """timm's ``architecture`` as the family checks build it (its options are what is
    tested, not its width): depth 2, a 3x3 patch grid, 8 channels a head, random
    informative weights; ``model_args`` override. With ``embedding_scale``, the patch
    embedding and the tokens and position table added to it are scaled by it, so that the
    first norm's inputs have a variance near its epsilon and a wrong epsilon shows."""
    import torch

    args = small_timm_args(architecture, **model_args)
    peer = randomize_torch(timm.create_model(architecture, pretrained=False, **args).eval(), informative=True)
    if embedding_scale is not None:
        with torch.no_grad():
            for name, p in peer.named_parameters():
                if name.startswith(("patch_embed.proj.", "cls_token", "reg_token", "dist_token", "pos_embed")):
                    p.mul_(embedding_scale)
    return peer


def serve_timm_model(timm, mirror, architecture, tag="random", embedding_scale=None, **model_args):
    """``helpers.small_timm_model`` of ``architecture``, written by ``save_for_hf`` at the
    hub's paths under the mirror; returns (its hub name, the timm model)."""
    peer = small_timm_model(timm, architecture, embedding_scale, **model_args)
    repo = f"timm/{architecture}.{tag}"
    folder = os.path.join(mirror.root, repo, "resolve", "main")
    timm.models.save_for_hf(peer, folder, safe_serialization=True)
    return f"hf-hub:{repo}", peer


def once_on(backend, why):
    """A mark that runs a test on ``backend`` alone: for tests of a harness that does the
    same on every backend (a benchmark's rows and CSV, an export's staging), where the
    per-backend code it drives is tested on all three elsewhere. ``why`` says so."""
    import keras
    import pytest

    return pytest.mark.skipif(keras.backend.backend() != backend, reason=f"run once, on {backend}: {why}")


def not_on(backend, why):
    """A mark that skips a test on ``backend``, where it would take the same path as on
    another backend (an export that a TensorFlow child process converts from the model's
    .keras file, whichever backend wrote it). ``why`` says which."""
    import keras
    import pytest

    return pytest.mark.skipif(keras.backend.backend() == backend, reason=f"not on {backend}: {why}")


REPOSITORY = pathlib.Path(__file__).resolve().parent.parent
SHELL_BLOCK = re.compile(r"```(?:bash|sh|shell|console)\n(.*?)```", re.S)


def run_on_next_backend(script, *args):
    """Runs ``python -c script *args`` in a child process, from the repository root, on the
    backend after this run's in ``BACKEND_CYCLE``; returns that backend's name."""
    import keras

    here = keras.backend.backend()
    backend = BACKEND_CYCLE[(BACKEND_CYCLE.index(here) + 1) % len(BACKEND_CYCLE)]
    subprocess.run(
        [sys.executable, "-c", script, *map(str, args)],
        check=True,
        env={**os.environ, "KERAS_BACKEND": backend},
        cwd=REPOSITORY,
    )
    return backend


def doc_pages():
    """The README's, the CHANGELOG's and every docs page's path."""
    pages = [str(REPOSITORY / "README.md"), str(REPOSITORY / "CHANGELOG.md")]
    for folder, _, names in os.walk(REPOSITORY / "docs"):
        pages += [os.path.join(folder, n) for n in sorted(names) if n.endswith(".md")]
    return pages


def serve_preset(preset, root, url):
    """The preset's small stand-in (its ``image_size`` and ``options``: width, depth, heads,
    MLP), with random weights in its publisher's layout, where a mirror at ``url`` serving
    the folder ``root`` keeps its path."""
    from keras_vit.presets import download

    path = root / download.source_url(preset.url)[len(url) :].lstrip("/")
    path.parent.mkdir(parents=True, exist_ok=True)
    spec, small = preset.spec, preset.options
    grid = preset.image_size // spec.patch_size
    if preset.layout == "original":
        from upstream import write_original_npz

        args = (small["hidden_size"], small["depth"], small["num_heads"], small["mlp_dim"], spec.patch_size)
        write_original_npz(path, np.random.default_rng(0), *args, grid * grid + 1, preset.num_classes)
    else:
        assert preset.layout == "timm", preset.layout
        import safetensors.torch
        import timm

        width, mlp = small["hidden_size"], small["mlp_dim"]
        peer = timm.models.vision_transformer.VisionTransformer(
            img_size=preset.image_size, patch_size=spec.patch_size, embed_dim=width, depth=small["depth"],
            num_heads=small["num_heads"], mlp_ratio=mlp / width, num_classes=preset.num_classes,
        )  # fmt: skip
        safetensors.torch.save_file(peer.state_dict(), str(path))


def instruction_pages():
    """``(page, text)`` of the README and the manual's pages: what a reader follows (the
    CHANGELOG and the dated performance history are records, not instructions)."""
    for page in doc_pages():
        if not page.endswith(("CHANGELOG.md", "performance-history.md")):
            with open(page) as f:
                yield page, f.read()


def documented_commands():
    """``(page, environment, argv)`` of every ``keras-vit`` command line (``python -m
    keras_vit`` and the recipes' scripts included) in the README's and the manual's shell
    blocks, in their order; ``environment`` holds the variables the line sets before it
    (``KERAS_BACKEND=jax keras-vit ...``). The dated performance history is a record, not
    instructions."""
    import shlex

    found = []
    for page, text in instruction_pages():
        for block in SHELL_BLOCK.findall(text):
            for line in block.replace("\\\n", " ").splitlines():
                words, environment = shlex.split(line, comments=True), {}
                while words and re.match(r"^[A-Z_]+=", words[0]):  # KERAS_BACKEND=jax keras-vit ...
                    name, value = words.pop(0).split("=", 1)
                    environment[name] = value
                where = os.path.relpath(page, REPOSITORY)
                if words[:1] == ["keras-vit"]:
                    found.append((where, environment, words[1:]))
                elif words[:3] in (["python", "-m", "keras_vit"],):
                    found.append((where, environment, words[3:]))
                elif words[:1] == ["python"] and words[1:2] and words[1].startswith("recipes/"):
                    script = os.path.basename(words[1])[: -len(".py")]
                    found.append((where, environment, [{"main": "main"}.get(script, script), *words[2:]]))
    return found


def floors(pyproject=REPOSITORY / "pyproject.toml"):
    """The package's floors, top to bottom, from the layers contract in ``pyproject``: a
    set of top-level module names each."""
    import tomllib

    with open(pyproject, "rb") as f:
        contracts = tomllib.load(f)["tool"]["importlinter"]["contracts"]
    (layers,) = [c["layers"] for c in contracts if c["type"] == "layers"]
    return [{name.strip(" ()") for name in floor.split("|")} for floor in layers]


def floor_of(module, floor_list, root_floor="factory"):
    """The index of ``module``'s floor in ``floor_list`` (by its name under the package;
    the package root stands on the front door's floor, ``root_floor``)."""
    top = module.split(".")[1] if "." in module else root_floor
    return next(i for i, names in enumerate(floor_list) if top in names)
