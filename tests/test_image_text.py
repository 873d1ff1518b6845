"""Image-text pairs at their upstreams' outputs: transformers' ``CLIPModel``, ``SiglipModel``
and a fixed-resolution SigLIP 2 (a ``SiglipModel`` with its Gemma tokenizer), loaded by hub
name through a loopback hub (random weights at unit scale, written by their own ``save_pretrained`` with their tokenizer
and image processor) as one ``ImageTextModel``: the image tower as keras-vit loads it from the
folder, the text tower read by its table's rows, the upstream's tokenizer from the folder and
the learned scale (and SigLIP's bias). On every backend: both towers' normalised embeddings and
the pair's logits within 2e-5 of the upstream's, zero-shot probabilities of raw photos with
keras-vit's own pre-processing within 0.02 of the upstream's on its processor's pixels."""

import json
import re

import numpy as np
import pytest
import skimage.data
from helpers import (
    assert_close_to_scale,
    once_on,
    run_on_next_backend,
    to_numpy,
    write_photo,
)
from image_text_pairs import write_transformers_pair

import keras_vit
from keras_vit.images import as_model_input
from keras_vit.sources import InvalidModelFileError

LABELS = ["a cat", "a cup of coffee", "an astronaut"]


def _photos():
    return [skimage.data.chelsea(), skimage.data.coffee()]


KINDS = ("clip", "siglip", "siglip2")


def _load_pair(kind, root):
    """``(kind, transformers' model, tokenizer, processor, keras-vit's pair, the saved folder)``:
    the pair as ``keras_vit.load_model`` loads the folder by hub name, through a loopback hub."""
    from http_server import FileServer, download_env, hub_env

    folder = root / "served" / f"org/{kind}-pair" / "resolve" / "main"
    folder.mkdir(parents=True)
    model, tokenizer, processor = write_transformers_pair(kind, folder)
    with FileServer(root / "served") as server, pytest.MonkeyPatch.context() as patch:
        download_env(patch, root / "home", mirror=server.url)
        hub_env(patch, server, root / "hf-cache")
        pair = keras_vit.load_model(f"hf-hub:org/{kind}-pair")
    return kind, model, tokenizer, processor, pair, folder


@pytest.fixture(scope="module")
def loaded(tmp_path_factory):
    """Each kind's pair, loaded once a module, for the tests of one kind and those of all three."""
    made = {}

    def pair_of(kind):
        if kind not in made:
            made[kind] = _load_pair(kind, tmp_path_factory.mktemp(kind))
        return made[kind]

    return pair_of


@pytest.fixture(scope="module", params=KINDS)
def pairs(request, loaded):
    return loaded(request.param)


def _upstream_ids(kind, tokenizer, texts):
    length = 64 if kind.startswith("siglip") else 77
    return tokenizer(texts, padding="max_length", max_length=length, truncation=True, return_tensors="pt")["input_ids"]


def _pixels(processor):
    return processor(images=_photos(), return_tensors="pt")["pixel_values"]


def test_both_towers_and_the_logits_are_the_upstreams(pairs):
    import torch

    kind, model, tokenizer, processor, pair, _ = pairs
    texts = ["A photo of a CAT.", "coffee, black", "café\tau  lait!", "a long caption " * 30]
    ids, pixels = _upstream_ids(kind, tokenizer, texts), _pixels(processor)
    np.testing.assert_array_equal(pair.tokenize(texts), ids.numpy())
    with torch.no_grad():
        output = model(input_ids=ids, pixel_values=pixels)
    nhwc = pixels.numpy().transpose(0, 2, 3, 1)
    assert_close_to_scale(to_numpy(pair.encode_texts(texts)), output.text_embeds.numpy(), 2e-5)
    assert_close_to_scale(to_numpy(pair.encode_images(nhwc)), output.image_embeds.numpy(), 2e-5)
    logits = to_numpy(pair({"images": nhwc, "token_ids": ids.numpy().astype("int32")}))
    assert_close_to_scale(logits, output.logits_per_image.numpy(), 2e-5)


def test_zero_shot_probabilities_of_raw_photos_are_the_upstreams(pairs):
    import torch

    kind, model, tokenizer, processor, pair, _ = pairs
    texts = [f"This is a photo of {label}." for label in LABELS]
    with torch.no_grad():
        logits = model(input_ids=_upstream_ids(kind, tokenizer, texts), pixel_values=_pixels(processor))
    logits = logits.logits_per_image
    expected = (torch.sigmoid(logits) if kind.startswith("siglip") else torch.softmax(logits, dim=-1)).numpy()
    got = pair.classify(_photos(), LABELS)
    assert got.shape == (2, len(LABELS))
    np.testing.assert_allclose(got, expected, atol=0.02)


def test_the_image_tower_alone_loads_as_before(pairs):
    *_, pair, folder = pairs
    photos = [skimage.data.chelsea()]
    for image in (keras_vit.load_model(str(folder), tower="image"), keras_vit.create_model(str(folder))):
        assert type(image).__name__ == "VisionTransformer"
        embedding = to_numpy(image(as_model_input(photos, image.preprocessing)))  # the projection is its head
        embedding /= np.linalg.norm(embedding, axis=-1, keepdims=True)
        np.testing.assert_allclose(embedding, to_numpy(pair.encode_images(photos)), atol=1e-6)


def test_templates_are_averaged_per_label_as_open_clip_does(pairs):
    kind, *_, pair, _ = pairs
    templates = ["a photo of {}.", "a drawing of {}."]
    texts = pair.encode_texts([t.format(label) for label in LABELS for t in templates])
    mean = to_numpy(texts).reshape(len(LABELS), 2, -1).mean(axis=1)
    mean /= np.linalg.norm(mean, axis=-1, keepdims=True)
    logits = to_numpy(pair.logits(pair.encode_images(_photos()), mean))
    expected = logits if kind.startswith("siglip") else logits - logits.max(axis=-1, keepdims=True)
    expected = (
        1 / (1 + np.exp(-expected))
        if kind.startswith("siglip")
        else np.exp(expected) / np.exp(expected).sum(-1, keepdims=True)
    )
    np.testing.assert_allclose(pair.classify(_photos(), LABELS, templates), expected, atol=1e-5)


def test_a_zero_shot_classifier_is_a_plain_classifier_that_scores_as_the_pair(pairs, tmp_path):
    kind, *_, pair, _ = pairs
    templates = ["a photo of {}.", "a drawing of {}."]
    classifier = pair.zero_shot_classifier(LABELS, templates)
    assert type(classifier).__name__ == "VisionTransformer" and list(classifier.class_names) == LABELS
    assert classifier.spec.outputs_probabilities == kind.startswith("siglip")  # SigLIP's sigmoid, CLIP's logits
    expected = pair.classify(_photos(), LABELS, templates)
    np.testing.assert_allclose(classifier.classify(_photos()), expected, atol=1e-5)
    # Saved, it reloads as any keras-vit classifier, with the same scores and no text tower.
    path = str(tmp_path / "zero_shot.keras")
    keras_vit.save_model(classifier, path)
    again = keras_vit.load_model(path)
    assert not any(layer.name.startswith("text") for layer in again.layers)
    np.testing.assert_allclose(again.classify(_photos()), expected, atol=1e-5)


@pytest.mark.slow  # a LiteRT conversion a pair
@once_on("tensorflow", "an export is written by TensorFlow from every backend")
def test_a_zero_shot_classifier_exports_to_litert_and_serves_the_pairs_scores(pairs, tmp_path):
    from keras_vit.export import export_model, load_exported

    kind, *_, pair, _ = pairs
    if kind == "siglip2":
        pytest.skip("SigLIP's classifier is SigLIP 2's (a sigmoid head): exported once, as siglip")
    classifier = pair.zero_shot_classifier(LABELS)
    result = export_model(classifier, str(tmp_path / "out"), formats="tflite_float32")
    with open(result.labels) as f:
        assert f.read().split("\n")[: len(LABELS)] == LABELS
    size = classifier.spec.image_size
    photos = np.stack([np.asarray(photo[: size[0], : size[1]]) for photo in _photos()])
    served = load_exported(result.paths["tflite_float32"])(photos)["probabilities"]
    np.testing.assert_allclose(served, pair.classify(list(photos), LABELS), atol=1e-4)


# On the next backend: each pair's file read by keras_vit.load_model, its embeddings written
# (one child for the three kinds: a child's start-up is most of its cost).
NEXT_BACKEND = """
import sys
import keras, numpy as np
import keras_vit

photos, texts = np.load(sys.argv[1]), sys.argv[2].split("|")
for folder in sys.argv[3:]:
    pair = keras_vit.load_model(f"{folder}/pair.keras")
    np.save(f"{folder}/texts.npy", keras.ops.convert_to_numpy(pair.encode_texts(texts)))
    np.save(f"{folder}/images.npy", keras.ops.convert_to_numpy(pair.encode_images(photos)))
"""


@pytest.mark.slow  # a child process on the next backend
def test_pairs_saved_as_keras_files_reload_on_the_next_backend_to_the_same_embeddings(loaded, tmp_path):
    photos = tmp_path / "photos.npy"
    np.save(photos, np.stack([np.asarray(skimage.data.chelsea()[:200, :200])] * 2))
    for kind in KINDS:
        (tmp_path / kind).mkdir()
        loaded(kind)[4].save(tmp_path / kind / "pair.keras")
    run_on_next_backend(NEXT_BACKEND, photos, "|".join(LABELS), *(tmp_path / kind for kind in KINDS))
    for kind in KINDS:
        pair = loaded(kind)[4]
        texts, images = np.load(tmp_path / kind / "texts.npy"), np.load(tmp_path / kind / "images.npy")
        np.testing.assert_allclose(texts, to_numpy(pair.encode_texts(LABELS)), atol=1e-6, err_msg=kind)
        np.testing.assert_allclose(images, to_numpy(pair.encode_images(np.load(photos))), atol=1e-6, err_msg=kind)


@once_on("torch", "which tower a source gives is the builder's routing, the same on every backend")
def test_an_image_model_asked_for_its_text_tower_is_one_clear_error(tmp_path):
    path = str(tmp_path / "classifier.keras")
    keras_vit.save_model(keras_vit.create_model("vit_ti16", image_size=16, depth=1, num_classes=2), path)
    assert type(keras_vit.load_model(path)).__name__ == "VisionTransformer"
    with pytest.raises(InvalidModelFileError, match="holds an image model and no text tower"):
        keras_vit.load_model(path, tower="pair")


@pytest.mark.backend_free
@pytest.mark.parametrize("model_type, writer", [("clip_text_model", "CLIPTextModel"), ("siglip_text_model", "Siglip")])
def test_a_text_tower_saved_alone_is_refused_in_one_line(tmp_path, model_type, writer):
    from keras_vit.sources.resolver import resolve

    (tmp_path / "config.json").write_text(json.dumps({"model_type": model_type, "architectures": [writer]}))
    with pytest.raises(ValueError, match=f"holds a text tower alone \\({writer}.*with its image tower"):
        resolve(str(tmp_path))


@pytest.mark.parametrize(
    "labels, templates, expected",
    [
        ([], None, "classify needs labels"),
        (["a cat", " "], None, "every label must be a non-empty string; got ' '"),
        (["a cat", "a dog", "a cat"], None, "each label must be given once (a class each); got 'a cat' twice or more"),
        (
            ["a cat"],
            ["a photo of a cat"],
            "each template must hold one '{}' where the label goes; got 'a photo of a cat'",
        ),
    ],
)
def test_labels_and_templates_that_cannot_be_scored_are_refused(pairs, labels, templates, expected):
    *_, pair, _ = pairs
    with pytest.raises(ValueError, match=re.escape(expected)):
        pair.classify(_photos(), labels, templates)


@once_on("torch", "where a saved file keeps the vocabulary is Keras' saving, the same on every backend")
def test_a_saved_pairs_vocabulary_is_an_asset_not_a_string_in_its_config(pairs, tmp_path):
    import zipfile

    kind, *_, pair, _ = pairs
    path = str(tmp_path / "pair.keras")
    keras_vit.save_model(pair, path)
    with zipfile.ZipFile(path) as saved:
        config = saved.read("config.json").decode()
        assets = [name for name in saved.namelist() if name.startswith("assets/")]
    assert len(config) < 100_000 and "merges" not in config and len(assets) == 1, (len(config), assets)
    np.testing.assert_array_equal(keras_vit.load_model(path).tokenize(LABELS), pair.tokenize(LABELS))


@pytest.fixture
def saved(pairs, tmp_path):
    """``(the pair's .keras file, a photo's PNG file)``."""
    from PIL import Image

    pairs[-2].save(tmp_path / "pair.keras")
    Image.fromarray(skimage.data.chelsea()).save(tmp_path / "cat.png")
    return str(tmp_path / "pair.keras"), str(tmp_path / "cat.png")


def test_the_classify_command_ranks_an_image_text_models_labels(pairs, saved, capsys):
    from keras_vit.commands import main

    *_, pair, _ = pairs
    status = main(["classify", *saved, "--labels", ",".join(LABELS)])
    printed = capsys.readouterr().out.splitlines()
    expected = pair.classify([skimage.data.chelsea()], LABELS)[0]
    best = LABELS[int(np.argmax(expected))]
    assert status == 0 and printed[0].endswith("cat.png") and f"{best} ({int(np.argmax(expected))})" in printed[1]
    assert f"{expected.max():7.2%}" in printed[1] and len(printed) == 1 + len(LABELS)


@pytest.mark.parametrize(
    "flags, expected",
    [
        ([], "is an image-text model: it classifies against --labels"),
        (["--labels", "a cat,"], "every label must be a non-empty string; got ''"),
        (["--labels", "a cat", "--templates", "a photo"], "each template must hold one '{}'"),
    ],
)
def test_the_classify_command_refuses_labels_it_cannot_score_in_one_line(saved, capsys, flags, expected):
    from keras_vit.commands import main

    with pytest.raises(SystemExit) as stop:
        main(["classify", *saved, *flags])
    error = capsys.readouterr().err
    assert stop.value.code == 2 and expected in error and error.count("\n") == 1


def test_labels_for_a_classifier_are_refused_in_one_line(tmp_path, capsys):
    from keras_vit.commands import main
    from keras_vit.layers import ImagePreprocessing

    classifier = keras_vit.create_model(
        "vit_ti16",
        image_size=16,
        patch_size=8,
        hidden_size=16,
        depth=1,
        num_heads=2,
        mlp_dim=32,
        num_classes=2,
        preprocessing=ImagePreprocessing(16),
    )
    keras_vit.save_model(classifier, str(tmp_path / "classifier.keras"))
    write_photo(tmp_path / "cat.jpg")
    with pytest.raises(SystemExit) as stop:
        main(["classify", str(tmp_path / "classifier.keras"), str(tmp_path / "cat.jpg"), "--labels", "a cat,a dog"])
    error = capsys.readouterr().err
    assert stop.value.code == 2 and "--labels and --templates go with an image-text model" in error
