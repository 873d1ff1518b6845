"""Zero-shot evaluation of an image-text model (``keras_vit.evaluation.zero_shot``): the
metrics' rules on a stand-in model whose embeddings are chosen by hand (clip_benchmark's
accuracy and retrieval recall), and a transformers CLIP pair on every backend, its folder of
photos and its captions file read and ranked as the pair's own scores rank them."""

import csv

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
def clip(tmp_path_factory):
    folder = tmp_path_factory.mktemp("clip")
    write_transformers_pair("clip", folder)
    return keras_vit.load_model(str(folder))


@pytest.mark.slow  # the pair's fixture
def test_a_folders_accuracy_is_what_the_pairs_classify_ranks(clip, tmp_path):
    paths = write_photos(tmp_path / "photos")  # four photos in each of folders a and b
    names = ["a photo of a space scene", "a photo of a grey object"]
    result = zero_shot_accuracy(clip, tmp_path / "photos", class_names=names, templates="simple_imagenet", top_k=(1,))
    probabilities = clip.classify(paths, names, template_set("simple_imagenet"))
    labels = np.array([0] * 4 + [1] * 4)
    correct = probabilities.argmax(axis=-1) == labels
    assert result == pytest.approx({"acc1": correct.mean(), "mean_per_class_recall": correct.mean()})


@pytest.mark.slow  # the pair's fixture
def test_a_captions_files_recall_is_what_the_pairs_scores_rank(clip, tmp_path):
    paths = write_photos(tmp_path)[:4]
    captions = [["a photo", "an image"], ["a cat"], ["a rocket", "a launch", "smoke"], ["coffee"]]
    with open(tmp_path / "captions.csv", "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["image", "caption"])
        writer.writerows([(path.relative_to(tmp_path), c) for path, per in zip(paths, captions) for c in per])
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
