"""open_clip's hub layout loaded whole by hub name through a loopback hub: its own ViT with the
built-in CLIP tokenizer (a ``CLIP``), and a timm image tower with a SigLIP text tower and
tokenizer files named by ``hf_tokenizer_name`` (a ``CustomTextCLIP``, as
``timm/ViT-B-16-SigLIP``). Each written by open_clip's own code (random weights at unit
scale, ``save_config_for_hf``'s config) and compared with open_clip's model and tokenizer on
every backend: the ids, both towers' normalised embeddings (2e-5) and the zero-shot
probabilities of raw photos (0.02) with keras-vit's own pre-processing. A pickled weights file
that would run code is refused before anything runs."""

import json
import os
import warnings
from pathlib import Path

import numpy as np
import pytest
import skimage.data
from helpers import (
    assert_close_to_scale,
    once_on,
    pil_reference,
    randomize_torch,
    run_on_next_backend,
    to_numpy,
    train_sentencepiece,
)
from image_text_pairs import informative_scores

import keras_vit

NATIVE = dict(
    embed_dim=24,
    quick_gelu=True,
    vision_cfg=dict(image_size=32, layers=2, width=32, head_width=16, patch_size=8),
    text_cfg=dict(context_length=77, vocab_size=49408, width=32, heads=2, layers=2),
)
TIMM_TOWER = dict(
    embed_dim=96,
    init_logit_bias=-10,
    custom_text=True,
    vision_cfg=dict(image_size=224, timm_model_name="test_vit3", timm_pool="map", timm_proj="none"),
    text_cfg=dict(
        context_length=64,
        vocab_size=300,
        hf_tokenizer_name="org/open-clip-siglip",
        tokenizer_kwargs={"clean": "canonicalize"},
        width=32,
        heads=2,
        layers=2,
        no_causal_mask=True,
        proj_bias=True,
        pool_type="last",
        norm_kwargs={"eps": 1e-6},
        act_kwargs={"approximate": "tanh"},
    ),
)
KINDS = {"open-clip-native": NATIVE, "open-clip-siglip": TIMM_TOWER}
# Perception Encoder core as open_clip's PE-Core-T-16-384 config has it (timm's tower, whose own
# head of embed_dim outputs is the projection: no timm_proj; a context of 32), the text tower
# narrower and shallower.
PE_CORE = dict(
    embed_dim=48,
    custom_text=True,
    vision_cfg=dict(image_size=384, timm_model_name="vit_pe_core_tiny_patch16_384", timm_model_pretrained=False,
                    timm_pool="map", timm_proj=None),
    text_cfg=dict(context_length=32, vocab_size=49408, width=32, heads=2, layers=2),
)  # fmt: skip
LABELS = ["a cat", "a cup of coffee", "an astronaut"]
HARD = ["A photo of a CAT.", "café\tau  lait", "snake_case &amp; Co.", "a long caption " * 30, ""]
MEAN, STD = (0.48, 0.45, 0.40), (0.27, 0.26, 0.28)


def _open_clip():
    import torchvision_stub

    torchvision_stub.install()  # open_clip imports torchvision, as timm does
    import open_clip

    return open_clip


def _upstream(config, folder):
    """open_clip's model of ``config`` (one of ``KINDS``, or ``PE_CORE``) and its tokenizer,
    saved in ``folder`` as its hub layout: ``open_clip_model.safetensors`` and
    ``open_clip_config.json``."""
    from safetensors.torch import save_file

    open_clip = _open_clip()
    from open_clip.push_to_hf_hub import save_config_for_hf

    context = config["text_cfg"]["context_length"]
    if config["text_cfg"].get("hf_tokenizer_name"):
        from transformers import SiglipTokenizer

        SiglipTokenizer(vocab_file=str(train_sentencepiece(folder, 300))).save_pretrained(str(folder))
        tokenizer = open_clip.tokenizer.HFTokenizer(str(folder), context_length=context, clean="canonicalize")
    else:
        tokenizer = open_clip.tokenizer.SimpleTokenizer(context_length=context)
    if config.get("custom_text"):
        model = open_clip.model.CustomTextCLIP(**{k: v for k, v in config.items() if k != "custom_text"})
    else:
        model = open_clip.model.CLIP(**config)
    model = informative_scores(randomize_torch(model.eval(), seed=5, informative=True))
    model.visual.image_mean, model.visual.image_std = MEAN, STD
    model.visual.preprocess_cfg = {"interpolation": "bicubic", "resize_mode": "shortest"}
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(folder / "open_clip_model.safetensors"))
    save_config_for_hf(model, folder / "open_clip_config.json", model_config=config)
    return model, tokenizer


@pytest.fixture(scope="module", params=sorted(KINDS))
def pairs(request, tmp_path_factory):
    """``(name, open_clip's model, its tokenizer, keras-vit's pair, the saved folder)``."""
    from http_server import FileServer, download_env, hub_env

    name, root = request.param, tmp_path_factory.mktemp(request.param)
    folder = root / "served" / "org" / name / "resolve" / "main"
    folder.mkdir(parents=True)
    model, tokenizer = _upstream(KINDS[name], folder)
    with FileServer(root / "served") as server, pytest.MonkeyPatch.context() as patch:
        download_env(patch, root / "home", mirror=server.url)
        hub_env(patch, server, root / "hf-cache")
        pair = keras_vit.load_model(f"hf-hub:org/{name}")
    return name, model, tokenizer, pair, folder


def _photos():
    return [skimage.data.chelsea(), skimage.data.coffee()]


def _pixels(size):
    """open_clip's evaluation transform of the photos (the shorter side resized, bicubic,
    a centre crop), normalised, channels last."""
    resized = np.stack([pil_reference(photo, size, 1.0, "center", "bicubic") for photo in _photos()])
    return (resized / 255.0 - np.array(MEAN)) / np.array(STD)


def test_the_tokenizer_gives_open_clips_ids(pairs):
    _, _, tokenizer, pair, _ = pairs
    np.testing.assert_array_equal(pair.tokenize(HARD), tokenizer(HARD).numpy())


def test_both_towers_are_open_clips(pairs):
    import torch

    name, model, tokenizer, pair, _ = pairs
    pixels = _pixels(pair.image_encoder.spec.image_size[0]).astype("float32")
    with torch.no_grad():
        texts = model.encode_text(tokenizer(HARD), normalize=True).numpy()
        images = model.encode_image(torch.from_numpy(pixels.transpose(0, 3, 1, 2)), normalize=True).numpy()
    assert_close_to_scale(to_numpy(pair.encode_texts(HARD)), texts, 2e-5)
    assert_close_to_scale(to_numpy(pair.encode_images(pixels)), images, 2e-5)


def test_zero_shot_probabilities_of_raw_photos_are_open_clips(pairs):
    import torch

    name, model, tokenizer, pair, _ = pairs
    pixels = _pixels(pair.image_encoder.spec.image_size[0]).astype("float32")
    with torch.no_grad():
        texts = model.encode_text(tokenizer([f"This is a photo of {label}." for label in LABELS]), normalize=True)
        images = model.encode_image(torch.from_numpy(pixels.transpose(0, 3, 1, 2)), normalize=True)
        logits = model.logit_scale.exp() * images @ texts.T
        if model.logit_bias is None:
            expected = torch.softmax(logits, dim=-1).numpy()
        else:
            expected = torch.sigmoid(logits + model.logit_bias).numpy()
    np.testing.assert_allclose(pair.classify(_photos(), LABELS), expected, atol=0.02)


def test_a_timm_repository_holding_open_clips_files_too_loads_whole(mirror, timm):
    import torch
    from timm.models.vision_transformer import _convert_openai_clip

    repository = "timm/vit_base_patch16_clip_quickgelu_224.test"
    folder = Path(mirror.root) / repository / "resolve" / "main"
    folder.mkdir(parents=True)
    model, tokenizer = _upstream(NATIVE, folder)
    # timm's own files of the image tower, as timm converts open_clip's for its hub repositories.
    vision = NATIVE["vision_cfg"]
    peer = timm.create_model(
        "vit_base_patch16_clip_quickgelu_224",
        img_size=vision["image_size"],
        patch_size=vision["patch_size"],
        embed_dim=vision["width"],
        depth=vision["layers"],
        num_heads=2,
        num_classes=NATIVE["embed_dim"],
    )
    peer.load_state_dict(_convert_openai_clip(model.state_dict(), peer))
    timm.models.save_for_hf(peer.eval(), str(folder), safe_serialization=True)
    assert type(keras_vit.create_model(f"hf-hub:{repository}")).__name__ == "VisionTransformer"  # as before
    pair = keras_vit.load_model(f"hf-hub:{repository}")
    pixels = _pixels(vision["image_size"]).astype("float32")
    with torch.no_grad():
        texts = model.encode_text(tokenizer(HARD), normalize=True).numpy()
        images = model.encode_image(torch.from_numpy(pixels.transpose(0, 3, 1, 2)), normalize=True).numpy()
    assert_close_to_scale(to_numpy(pair.encode_texts(HARD)), texts, 2e-5)
    assert_close_to_scale(to_numpy(pair.encode_images(pixels)), images, 2e-5)


# Its layers compute on every backend in test_family (PE-Core's timm tower) and
# test_text_tower; what is new here is which of open_clip's options makes which tower.
@once_on("torch", "which towers open_clip's config makes is the reader's; their layers run on every backend elsewhere")
def test_a_perception_encoder_core_pair_is_open_clips(tmp_path):
    import torch

    model, tokenizer = _upstream(PE_CORE, tmp_path)
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        pair = keras_vit.load_model(str(tmp_path))
    # The tower's numerics are its timm architecture's, which open_clip's config names.
    assert not [w for w in said if "was trained with" in str(w.message)], [str(w.message) for w in said]
    np.testing.assert_array_equal(pair.tokenize(HARD), tokenizer(HARD).numpy())  # 32 ids
    pixels = _pixels(384).astype("float32")
    with torch.no_grad():
        texts = model.encode_text(tokenizer(HARD), normalize=True).numpy()
        images = model.encode_image(torch.from_numpy(pixels.transpose(0, 3, 1, 2)), normalize=True).numpy()
    assert images.shape == (2, PE_CORE["embed_dim"])  # timm's own head, the projection
    assert_close_to_scale(to_numpy(pair.encode_texts(HARD)), texts, 2e-5)
    assert_close_to_scale(to_numpy(pair.encode_images(pixels)), images, 2e-5)


# On the next backend: the pair's file read by keras_vit.load_model, its embeddings written.
NEXT_BACKEND = """
import sys
import keras, numpy as np
import keras_vit

pair = keras_vit.load_model(sys.argv[1])
np.save(sys.argv[2], keras.ops.convert_to_numpy(pair.encode_texts(sys.argv[3].split("|"))))
"""


@pytest.mark.slow  # a child process on the next backend
def test_a_saved_pair_reloads_on_the_next_backend_to_the_same_embeddings(pairs, tmp_path):
    *_, pair, _ = pairs
    path, texts = tmp_path / "pair.keras", tmp_path / "texts.npy"
    pair.save(path)
    run_on_next_backend(NEXT_BACKEND, path, texts, "|".join(HARD))
    np.testing.assert_allclose(np.load(texts), to_numpy(pair.encode_texts(HARD)), atol=1e-6)


class _RunsCode:
    """A pickled object that would create a file if unpickled unsafely."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (open, (self.marker, "w"))


@once_on("torch", "the refusal is the reader's, before any backend computes")
def test_a_pickle_that_would_run_code_is_refused_and_nothing_runs(pairs, tmp_path):
    import shutil

    import torch

    *_, folder = pairs
    pickled = tmp_path / "repository"
    pickled.mkdir()
    shutil.copy(folder / "open_clip_config.json", pickled)
    for name in os.listdir(folder):  # the tokenizer's files
        if not name.startswith("open_clip"):
            shutil.copy(folder / name, pickled)
    marker = tmp_path / "ran"
    torch.save({"state_dict": _RunsCode(str(marker))}, pickled / "open_clip_pytorch_model.bin")
    with pytest.raises(ValueError, match="safe_mode=False"):
        keras_vit.load_model(str(pickled))
    assert not marker.exists()


@once_on("torch", "which file is read is the resolver's, the same on every backend")
def test_safetensors_are_read_first_and_a_pickle_of_tensors_alone_loads(pairs, tmp_path):
    import shutil

    import torch
    from safetensors.torch import load_file

    *_, pair, folder = pairs
    pickled = tmp_path / "repository"
    shutil.copytree(folder, pickled)
    state = load_file(str(folder / "open_clip_model.safetensors"))
    torch.save({k: v * 0 for k, v in state.items()}, pickled / "open_clip_pytorch_model.bin")  # beside: unread
    both = keras_vit.load_model(str(pickled))
    np.testing.assert_array_equal(to_numpy(both.encode_texts(LABELS)), to_numpy(pair.encode_texts(LABELS)))
    os.remove(pickled / "open_clip_model.safetensors")
    torch.save(state, pickled / "open_clip_pytorch_model.bin")
    alone = keras_vit.load_model(str(pickled))
    np.testing.assert_allclose(to_numpy(alone.encode_texts(LABELS)), to_numpy(pair.encode_texts(LABELS)), atol=1e-6)


@pytest.mark.backend_free
@pytest.mark.parametrize(
    "change, expected",
    [
        ({"text_cfg": {"pool_type": "first"}}, "pool_type='first'"),
        ({"text_cfg": {"embed_cls": True}}, "embed_cls=True"),
        ({"vision_cfg": {"attentional_pool": True}}, "attentional_pool=True"),
        ({"vision_cfg": {"timm_model_name": "test_vit3", "timm_proj": "linear"}}, "timm_proj='linear'"),
    ],
)
def test_an_open_clip_tower_keras_vit_does_not_build_is_one_clear_error(tmp_path, change, expected):
    from keras_vit.sources.resolver import resolve

    config = {**NATIVE, **{k: {**NATIVE[k], **v} for k, v in change.items()}}
    (tmp_path / "open_clip_config.json").write_text(json.dumps({"model_cfg": config, "preprocess_cfg": {}}))
    with pytest.raises(ValueError, match=expected.replace("(", r"\(")):
        resolve(str(tmp_path))
