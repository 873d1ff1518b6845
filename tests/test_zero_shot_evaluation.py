"""Zero-shot evaluation of an image-text model (``keras_vit.evaluation.zero_shot``): the
metrics' rules on a stand-in model whose embeddings are chosen by hand (clip_benchmark's
accuracy and retrieval recall), and a transformers CLIP pair on every backend, its folder of
photos and its captions file read and ranked as the pair's own scores rank them. The
``keras-vit evaluate`` command runs in this process: its flags reach the functions (a
stand-in model records what it is asked), its numbers are theirs on the CLIP pair, and bad
input is one line and exit status 2 before any model loads."""

import csv
import json
import os

import numpy as np
import pytest
from helpers import once_on, to_numpy, write_photos
from image_text_pairs import write_transformers_pair

import keras_vit
from keras_vit.evaluation import read_captions, retrieval_recall, template_set, zero_shot_accuracy

RULES = once_on("torch", "the metrics' rules are numpy, the same on every backend")


class _StandIn:
    """What the metrics read of an image-text model, with embeddings chosen by hand: an
    image is its index, a text its own key."""

    def __init__(self, images, texts=None, labels=None):
        self.images, self.texts, self.labels = np.asarray(images, "float32"), texts or {}, labels

    def encode_images(self, batch):
        return self.images[np.asarray(batch)]

    def encode_texts(self, batch):
        return np.asarray([self.texts[t] for t in batch], "float32")

    def label_embeddings(self, names, templates=None):
        return np.asarray(self.labels, "float32")


@RULES
def test_accuracy_counts_the_labels_among_the_best_scored_and_each_class_alike():
    # Image 1 (class 0) scores class 1 first, class 0 second; class 0 has two images.
    model = _StandIn([[1, 0, 0], [0.2, 0.8, 0], [0, 1, 0], [0, 0, 1]], labels=np.eye(3))
    result = zero_shot_accuracy(model, ([0, 1, 2, 3], [0, 0, 1, 2]), class_names=["a", "b", "c"], top_k=(1, 2))
    assert result == pytest.approx({"acc1": 0.75, "acc2": 1.0, "mean_per_class_recall": (0.5 + 1 + 1) / 3})


@RULES
def test_retrieval_recall_ranks_every_image_for_a_caption_and_every_caption_for_an_image():
    # Caption b (image 0's second) scores image 1 first and image 0 last; d (image 2's)
    # scores image 0 before its own; image 1 scores b before its own caption c.
    texts = {"a": [1, 0, 0], "b": [0, 1.1, 0.1], "c": [0, 1, 0], "d": [0.6, 0, 0.5]}
    model = _StandIn(np.eye(3), texts)
    result = retrieval_recall(model, [0, 1, 2], [["a", "b"], "c", ["d"]], ks=(1, 2, 3))
    assert result == pytest.approx({
        "image_retrieval_recall@1": 0.5, "image_retrieval_recall@2": 0.75, "image_retrieval_recall@3": 1.0,
        "text_retrieval_recall@1": 2 / 3, "text_retrieval_recall@2": 1.0, "text_retrieval_recall@3": 1.0,
    })  # fmt: skip


@RULES
def test_open_clips_template_sets_by_name_and_what_cannot_be_evaluated_is_refused(tmp_path):
    import torchvision_stub

    torchvision_stub.install()  # open_clip imports torchvision
    import open_clip

    assert template_set("simple_imagenet") == [t("{}") for t in open_clip.SIMPLE_IMAGENET_TEMPLATES]
    assert len(template_set("openai_imagenet")) == len(open_clip.OPENAI_IMAGENET_TEMPLATES)
    with pytest.raises(ValueError, match=r"one of \['openai_imagenet', 'simple_imagenet'\]; got 'imagenet'"):
        template_set("imagenet")
    model = _StandIn(np.eye(2), {"a": [1, 0]}, labels=np.eye(2))
    with pytest.raises(ValueError, match="one caption or more for each of the 2 images; got 1 entries"):
        retrieval_recall(model, [0, 1], ["a"])
    with pytest.raises(ValueError, match="Expected labels from 0 to 1"):
        zero_shot_accuracy(model, ([0, 1], [0, 2]), class_names=["a", "b"])
    with pytest.raises(ValueError, match="class_names is needed"):
        zero_shot_accuracy(model, ([0, 1], [0, 1]))
    (tmp_path / "captions.csv").write_text("file,text\nx.jpg,a cat\n")
    with pytest.raises(ValueError, match="columns image and caption"):
        read_captions(tmp_path / "captions.csv")


@pytest.fixture(scope="module")
def clip_folder(tmp_path_factory):
    folder = tmp_path_factory.mktemp("clip")
    write_transformers_pair("clip", folder)
    return folder


@pytest.fixture(scope="module")
def clip(clip_folder):
    return keras_vit.load_model(str(clip_folder))


@pytest.mark.slow  # the pair's fixture
def test_a_folders_accuracy_is_what_the_pairs_classify_ranks(clip, tmp_path):
    paths = write_photos(tmp_path / "photos")  # four photos in each of folders a and b
    names = ["a photo of a space scene", "a photo of a grey object"]
    result = zero_shot_accuracy(clip, tmp_path / "photos", class_names=names, templates="simple_imagenet", top_k=(1,))
    probabilities = clip.classify(paths, names, template_set("simple_imagenet"))
    labels = np.array([0] * 4 + [1] * 4)
    correct = probabilities.argmax(axis=-1) == labels
    assert result == pytest.approx({"acc1": correct.mean(), "mean_per_class_recall": correct.mean()})


CAPTIONS = [["a photo", "an image"], ["a cat"], ["a rocket", "a launch", "smoke"], ["coffee"]]


def _write_captions(folder, paths, captions=CAPTIONS):
    with open(folder / "captions.csv", "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["image", "caption"])
        writer.writerows([(path.relative_to(folder), c) for path, per in zip(paths, captions) for c in per])
    return folder / "captions.csv"


@pytest.mark.slow  # the pair's fixture
def test_a_captions_files_recall_is_what_the_pairs_scores_rank(clip, tmp_path):
    paths = write_photos(tmp_path)[:4]
    captions = CAPTIONS
    _write_captions(tmp_path, paths)
    images, read = read_captions(tmp_path / "captions.csv")
    assert images == [str(p) for p in paths] and read == captions
    result = retrieval_recall(clip, images, read, ks=(1, 2))
    # The pair's own scores (its scale and bias on the cosines) rank as the cosines do.
    texts = [c for per in captions for c in per]
    owner = np.repeat(np.arange(4), [len(c) for c in captions])
    scores = to_numpy(clip.logits(clip.encode_images(images), clip.encode_texts(texts)))  # (images, texts)
    for k in (1, 2):
        best_images = np.argsort(-scores.T, axis=-1)[:, :k]
        assert result[f"image_retrieval_recall@{k}"] == pytest.approx((best_images == owner[:, None]).any(-1).mean())
        best_texts = np.argsort(-scores, axis=-1)[:, :k]
        hits = [(owner[best_texts[i]] == i).any() for i in range(4)]
        assert result[f"text_retrieval_recall@{k}"] == pytest.approx(np.mean(hits))


def _evaluate(capsys, *argv):
    """``keras-vit evaluate ARGV`` in this process: its exit status, stdout and stderr."""
    from keras_vit.commands import main

    try:
        status = main(["evaluate", *map(str, argv)])
    except SystemExit as stop:  # bad input: commands.bad_input's exit
        status = stop.code
    out, err = capsys.readouterr()
    return status, out, err


class _Recorder(_StandIn):
    """A stand-in loaded by name: an image's embedding by its file's name, the labels and
    templates it is asked to embed recorded."""

    def __init__(self, images, texts=None):
        super().__init__(np.zeros((0, 2)), texts)
        self.by_name, self.asked = images, []

    def encode_images(self, batch):
        return np.asarray([self.by_name[os.path.basename(str(path))] for path in batch], "float32")

    def label_embeddings(self, names, templates=None):
        self.asked.append((list(names), templates))
        return np.eye(2, dtype="float32")[: len(names)]


@RULES
def test_the_evaluate_commands_flags_reach_the_metrics(tmp_path, capsys, monkeypatch):
    import keras_vit.factory

    paths = write_photos(tmp_path / "photos")  # four photos in each of folders a and b
    # Every photo of folder a scores class 0 ("b"'s text) first but one: acc1 1/8, acc2 1.
    embeddings = {p.name: [0.0, 1.0] if p.parent.name == "b" else [1.0, 0.0] for p in paths}
    embeddings[paths[1].name] = [0.0, 1.0]
    model = _Recorder(embeddings, {c: [1.0, 0.0] for per in CAPTIONS for c in per})
    loaded = []
    monkeypatch.setattr(keras_vit.factory, "load_model", lambda name, **kw: loaded.append((name, kw)) or model)
    (tmp_path / "names.txt").write_text("class a\nclass b\n")
    flags = ["--class-names", tmp_path / "names.txt", "--templates", "simple_imagenet", "--top-k", "1,2"]
    status, out, _ = _evaluate(capsys, "pair", "--images", tmp_path / "photos", *flags, "--json", tmp_path / "acc.json")
    assert status == 0 and loaded == [("pair", {"tower": "pair"})]
    assert model.asked == [(["class a", "class b"], template_set("simple_imagenet"))]
    expected = zero_shot_accuracy(model, tmp_path / "photos", tmp_path / "names.txt", "simple_imagenet", (1, 2))
    assert json.loads((tmp_path / "acc.json").read_text()) == expected and set(expected) == {
        "acc1",
        "acc2",
        "mean_per_class_recall",
    }
    assert out.splitlines() == [f"{k:<28} {v:.4f}" for k, v in expected.items()]
    # Templates as written, and the folders' names as the classes' texts.
    _evaluate(capsys, "pair", "--images", tmp_path / "photos", "--templates", "a {}.", "an {} photo.")
    assert model.asked[-1] == (["a", "b"], ["a {}.", "an {} photo."])
    captions = _write_captions(tmp_path / "photos", paths[:4])
    status, out, _ = _evaluate(
        capsys, "pair", "--captions", captions, "--recall-at", "2", "--json", tmp_path / "r.json"
    )
    expected = retrieval_recall(model, *read_captions(captions), ks=(2,))
    assert status == 0 and json.loads((tmp_path / "r.json").read_text()) == expected
    assert list(expected) == ["image_retrieval_recall@2", "text_retrieval_recall@2"]


@RULES
@pytest.mark.parametrize(
    "flags, expected",
    [
        (["--images", "{tmp}/flat"], "No images found in folder"),
        (["--images", "{tmp}/missing"], "missing"),
        (
            ["--images", "{tmp}/photos", "--class-names", "{tmp}/three.txt"],
            "Expected 2 class names, one per subfolder; got 3",
        ),
        (
            ["--images", "{tmp}/photos", "--templates", "imagenet"],
            "one of ['openai_imagenet', 'simple_imagenet']; got 'imagenet'",
        ),
        (
            ["--captions", "{tmp}/photos/captions.csv", "--templates", "a {}."],
            "--class-names and --templates go with --images",
        ),
        (["--captions", "{tmp}/nothing.csv"], "nothing.csv"),
        (["--captions", "{tmp}/gone.csv"], "gone.csv' names images that are not files beside it: 'photos/b/gone.jpg'."),
        (["--images", "{tmp}/photos", "--json", "{tmp}"], "it is a folder"),
        (["--images", "{tmp}/photos", "--top-k", "0"], "expected comma-separated whole numbers of 1 or more; got '0'"),
        (["--images", "{tmp}/photos", "--captions", "x.csv"], "not allowed with argument"),
        (["--images", "{tmp}/photos", "--batch-size", "0"], "--batch-size must be at least 1; got 0"),
    ],
)
def test_what_the_evaluate_command_cannot_evaluate_is_one_line_before_any_model_loads(
    flags, expected, tmp_path, capsys, monkeypatch
):
    import keras_vit.factory

    monkeypatch.setattr(keras_vit.factory, "load_model", lambda *a, **k: pytest.fail("loaded a model"))
    paths = write_photos(tmp_path / "photos")
    _write_captions(tmp_path / "photos", paths[:4])
    (tmp_path / "flat").mkdir()
    (tmp_path / "three.txt").write_text("x\ny\nz\n")
    (tmp_path / "gone.csv").write_text("image,caption\nphotos/b/astronaut.jpg,a\nphotos/b/gone.jpg,b\n")
    status, _, err = _evaluate(capsys, "pair", *(flag.replace("{tmp}", str(tmp_path)) for flag in flags))
    assert status == 2 and expected in err and len(err.strip().splitlines()) == 1, err


@RULES
def test_the_evaluate_command_refuses_an_image_model_in_one_line(tmp_path, capsys):
    path = tmp_path / "classifier.keras"
    keras_vit.save_model(keras_vit.create_model("vit_ti16", image_size=16, depth=1, num_classes=2), path)
    write_photos(tmp_path / "photos")
    status, _, err = _evaluate(capsys, path, "--images", tmp_path / "photos")
    assert status == 2 and "holds an image model and no text tower" in err and len(err.strip().splitlines()) == 1


@RULES
@pytest.mark.slow  # the pair's fixture
def test_the_evaluate_commands_numbers_are_the_functions_on_a_clip_pair(clip_folder, clip, tmp_path, capsys):
    paths = write_photos(tmp_path / "photos")
    status, _, _ = _evaluate(
        capsys, clip_folder, "--images", tmp_path / "photos", "--top-k", "1", "--json", tmp_path / "a.json"
    )
    assert status == 0 and json.loads((tmp_path / "a.json").read_text()) == pytest.approx(
        zero_shot_accuracy(clip, tmp_path / "photos", top_k=(1,))
    )
    captions = _write_captions(tmp_path / "photos", paths[:4])
    status, _, _ = _evaluate(capsys, clip_folder, "--captions", captions, "--json", tmp_path / "r.json")
    assert status == 0 and json.loads((tmp_path / "r.json").read_text()) == pytest.approx(
        retrieval_recall(clip, *read_captions(captions))
    )


@RULES
@pytest.mark.slow  # the pair's fixture
def test_recall_is_open_clips_on_the_same_embeddings(clip, tmp_path):
    import torch
    import torchvision_stub

    torchvision_stub.install()  # open_clip_train imports torchvision
    from open_clip_train.train import get_clip_metrics

    paths = write_photos(tmp_path)  # eight photos, a caption each (open_clip's metric takes one)
    captions = ["an astronaut", "a cat", "coffee", "a rocket", "stained cells", "colours", "a man", "coins"]
    ours = retrieval_recall(clip, paths, captions, ks=(1, 5, 10))
    images, texts = to_numpy(clip.encode_images(paths)), to_numpy(clip.encode_texts(captions))
    theirs = get_clip_metrics(torch.from_numpy(images), torch.from_numpy(texts), logit_scale=1.0)
    for k in (1, 5, 10):
        assert ours[f"text_retrieval_recall@{k}"] == pytest.approx(theirs[f"image_to_text_R@{k}"])
        assert ours[f"image_retrieval_recall@{k}"] == pytest.approx(theirs[f"text_to_image_R@{k}"])
