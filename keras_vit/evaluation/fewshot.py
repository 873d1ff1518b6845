"""The paper's few-shot linear evaluation: a closed-form regularised least-squares probe.

Section 4 of the paper: the frozen representation of ``k`` training images per class is
mapped to ``{-1, 1}^K`` targets by a regularised least-squares regression, solved in
closed form, and the test images are classified by the largest output. As big_vision's
``fewshot_lsr`` evaluator (the paper's code): the features are whitened with the k-shot
set's mean and standard deviation, a constant feature of 100 stands in for an (almost
unregularised) bias, the regulariser is ``2 ** 10`` and the representation is the
pre-logits output. Features are extracted once; every shot count and seed reuses them.

The solve runs on the host in float64: the bias feature makes the Gram matrix badly
conditioned for float32, and JAX computes in float32 unless told otherwise.
"""

import dataclasses

import keras
import numpy as np

from keras_vit.dependencies import require
from keras_vit.evaluation.fewshot_defaults import DEFAULT_L2, DEFAULT_SHOTS

BIAS_CONSTANT = 100.0


def representation_model(model):
    """A model sharing ``model``'s weights whose output is what its classifier head sees:
    the pre-logits layer's output when it has one, else the pooled (normalised) features;
    a model without a head is its own representation."""
    from keras_vit.inspect.attention import check_vit

    check_vit(model, "few-shot evaluation")
    if model.layers_by_role["head"] is None:
        return model
    last = "pre_logits" if model.layers_by_role["pre_logits"] is not None else None
    if last is None:
        return model.feature_model()
    return keras.Model(model.input, model.get_layer(last).output, name=f"{model.name}_representation")


def extract_features(model, data, batch_size=256, predict=None):
    """``(features, labels)`` of every image of ``data`` through ``representation_model``.

    Args:
        model: a ``keras_vit.VisionTransformer``.
        data: a ``keras_vit.data`` ``Split``, or ``(images, labels)`` arrays of raw 0..255
            images (uint8 ``(N, H, W, 3)``). The images go through the model's own
            ``model.preprocessing`` (else the recipes' ``"vit"`` scaling at its size).
        batch_size: images per forward pass.
        predict: ``predict(model, images)``, a batch's outputs as numpy; default
            ``model.predict_on_batch`` (a run of several processes passes its own).

    Returns:
        float32 ``(N, width)`` features and int64 ``(N,)`` labels, in the data's order.
    """
    return _features(model, representation_model(model), data, batch_size, predict)


def _features(model, represent, data, batch_size, predict):
    """``extract_features`` through ``represent``, ``model``'s representation model: one for
    every split and epoch, whose compiled predict function is made once."""
    tf = require("tensorflow", "data")

    from keras_vit.data.splits import Split
    from keras_vit.layers.preprocessing import ImagePreprocessing

    preprocessing = model.preprocessing or ImagePreprocessing.from_normalization("vit", model.spec.image_size)
    if isinstance(data, Split):
        dataset = data.as_dataset()
    else:
        images, labels = data
        dataset = tf.data.Dataset.from_tensor_slices((np.asarray(images), np.asarray(labels)))
    dataset = dataset.map(lambda image, label: (preprocessing(image), label)).batch(batch_size)
    predict = predict or (lambda model, images: model.predict_on_batch(images))
    features, labels = [], []
    for images, batch_labels in dataset.as_numpy_iterator():
        features.append(np.asarray(predict(represent, images), dtype="float32"))
        labels.append(batch_labels)
    return np.concatenate(features), np.concatenate(labels).astype("int64")


class RidgeProbe:
    """The closed-form regularised least-squares classifier on whitened features.

    Fitted once per training set; ``weights(l2)`` and ``predict(x, l2)`` then cost one
    matrix product for any regularisation strength (the eigendecomposition is cached, as
    in big_vision, for choosing ``l2``).

    >>> x = np.array([[0.0, 1.0], [1.0, 0.0], [0.1, 0.9], [0.9, 0.2]])
    >>> RidgeProbe(x, np.array([0, 1, 0, 1]), num_classes=2).predict(x, l2=1.0).tolist()
    [0, 1, 0, 1]
    """

    def __init__(self, features, labels, num_classes):
        x = np.asarray(features, dtype="float64")
        self.mean = x.mean(axis=0, keepdims=True)
        self.std = x.std(axis=0, keepdims=True) + 1e-5
        x = self._design(x)
        y = 2.0 * np.eye(num_classes)[np.asarray(labels)] - 1.0  # {-1, 1} one-hot targets
        # (x^T x + l2 I)^-1 x^T y, or in the dual x^T (x x^T + l2 I)^-1 y when there are
        # fewer images than features; either Gram matrix eigendecomposed once.
        if x.shape[0] >= x.shape[1]:
            self.eigenvalues, q = np.linalg.eigh(x.T @ x)
            self.left, self.right = q, q.T @ (x.T @ y)
        else:
            self.eigenvalues, q = np.linalg.eigh(x @ x.T)
            self.left, self.right = x.T @ q, q.T @ y

    def _design(self, x):
        x = (np.asarray(x, dtype="float64") - self.mean) / self.std
        return np.pad(x, ((0, 0), (0, 1)), constant_values=BIAS_CONSTANT)

    def weights(self, l2):
        """``(features + 1, classes)``: the regression weights, the bias row last."""
        return (self.left / (self.eigenvalues + l2)) @ self.right

    def scores(self, features, l2):
        return self._design(features) @ self.weights(l2)

    def predict(self, features, l2):
        return self.scores(features, l2).argmax(axis=1)


def sample_shots(labels, shots, num_classes, seed):
    """Indices of ``shots`` training images per class, the same for the same seed.

    Each class's images are permuted once per seed and the first ``shots`` taken, so a
    seed's 1-shot set is inside its 5-shot set (as big_vision samples).

    >>> sample_shots(np.array([0, 1, 0, 1, 0, 1]), 2, 2, seed=0).shape
    (4,)
    """
    rng = np.random.default_rng(seed)
    labels = np.asarray(labels)
    return np.concatenate([rng.permutation(np.flatnonzero(labels == c))[:shots] for c in range(num_classes)])


def check_shots(labels, shots, num_classes):
    """The shot counts as ints, or a clear error if one exceeds the smallest class."""
    counts = np.bincount(np.asarray(labels), minlength=num_classes)
    shots = [int(k) for k in shots]
    if not shots or min(shots) < 1:
        raise ValueError(f"Expected shot counts of at least 1; got {shots}.")
    if max(shots) > counts.min():
        smallest = int(counts.argmin())
        raise ValueError(
            f"{max(shots)}-shot needs {max(shots)} training images of every class, but class {smallest} has "
            f"{counts.min()}: use shots of at most {counts.min()}."
        )
    return shots


@dataclasses.dataclass
class FewShotResult:
    """Few-shot accuracies: ``accuracy[shots]`` holds one test accuracy per seed.

    Attributes:
        accuracy: ``{shots: (num_seeds,) array}``.
        l2: ``{shots: the regularisation used}`` (chosen on validation data, or fixed).
        num_test: how many test images each accuracy is measured on.
    """

    accuracy: dict
    l2: dict
    num_test: int

    def summary(self):
        """``{shots: (mean, standard deviation over seeds)}``."""
        return {k: (float(v.mean()), float(v.std())) for k, v in self.accuracy.items()}

    def table(self):
        lines = [f"{'shots':>6} {'accuracy':>9} {'± std':>7} {'seeds':>6} {'l2':>8}"]
        for shots, (mean, std) in self.summary().items():
            lines.append(f"{shots:>6} {mean:>9.4f} {std:>7.4f} {len(self.accuracy[shots]):>6} {self.l2[shots]:>8.4g}")
        return "\n".join(lines)


def fewshot_eval(
    train,
    test,
    num_classes,
    shots=DEFAULT_SHOTS,
    seeds=5,
    l2=DEFAULT_L2,
    validation=None,
):
    """Few-shot linear accuracy from features: ``k`` training images per class, then test.

    Args:
        train: ``(features, labels)`` the shots are drawn from (never the test data).
        test: ``(features, labels)`` the accuracy is measured on.
        num_classes: labels are in ``0..num_classes - 1``.
        shots: shot counts, each at most the smallest class's training images.
        seeds: how many seeds (``0..seeds - 1``) each shot count is drawn with.
        l2: the regularisation strength; a sequence of them to choose from, by mean
            accuracy over the seeds on ``validation`` (then required), per shot count.
        validation: ``(features, labels)`` for choosing ``l2``.

    Returns:
        A ``FewShotResult``.

    Examples:
        >>> rng = np.random.default_rng(0)
        >>> centres = 4 * rng.standard_normal((3, 8))
        >>> labels = np.arange(300) % 3
        >>> features = centres[labels] + rng.standard_normal((300, 8))
        >>> result = fewshot_eval((features[:150], labels[:150]), (features[150:], labels[150:]), 3, shots=(1, 5))
        >>> result.summary()[5][0] > 0.9
        True
    """
    train_x, train_y = np.asarray(train[0]), np.asarray(train[1])
    shots = check_shots(train_y, shots, num_classes)
    candidates = np.atleast_1d(np.asarray(l2, dtype="float64"))
    if len(candidates) > 1 and validation is None:
        raise ValueError(f"Choosing l2 among {candidates.tolist()} needs validation features; got none.")
    test_x, test_y = np.asarray(test[0]), np.asarray(test[1])
    accuracy, chosen = {}, {}
    for k in shots:
        probes = [RidgeProbe(train_x[i], train_y[i], num_classes) for i in
                  (sample_shots(train_y, k, num_classes, seed) for seed in range(int(seeds)))]  # fmt: skip
        best = candidates[0]
        if len(candidates) > 1:
            val_x, val_y = np.asarray(validation[0]), np.asarray(validation[1])
            scores = [np.mean([(p.predict(val_x, c) == val_y).mean() for p in probes]) for c in candidates]
            best = candidates[int(np.argmax(scores))]
        chosen[k] = float(best)
        accuracy[k] = np.array([(p.predict(test_x, best) == test_y).mean() for p in probes])
    return FewShotResult(accuracy, chosen, len(test_y))


def fewshot_linear_eval(model, train, test, shots=DEFAULT_SHOTS, seeds=5, l2=DEFAULT_L2, validation=None,
                        batch_size=256, predict=None):  # fmt: skip
    """The paper's few-shot linear evaluation of ``model`` on a dataset's splits.

    Extracts the representation (``representation_model``) of every image of ``train``,
    ``test`` (and ``validation``) once, then runs ``fewshot_eval``. The shot counts are
    checked against the training labels before any image goes through the model.

    Args:
        model: a ``keras_vit.VisionTransformer`` (any backend).
        train, test, validation: ``Split``s (``keras_vit.data.load_dataset(...).train``)
            or ``(images, labels)`` arrays of raw 0..255 images.
        shots, seeds, l2: as ``fewshot_eval``.
        batch_size, predict: as ``extract_features``'.

    Returns:
        A ``FewShotResult``.

    Examples:
        >>> import keras_vit
        >>> from keras_vit.data import load_dataset
        >>> splits = load_dataset("digits")
        >>> model = keras_vit.create_model("vit_ti16", image_size=16, patch_size=4, depth=1, num_classes=10)
        >>> result = fewshot_linear_eval(model, splits.train, splits.test, shots=(1, 5), seeds=2)
        >>> sorted(result.accuracy), result.accuracy[5].shape
        ([1, 5], (2,))
    """
    return _linear_eval(model, None, train, test, shots, seeds, l2, validation, batch_size, predict)


def _linear_eval(model, represent, train, test, shots, seeds, l2, validation, batch_size, predict):
    """``fewshot_linear_eval`` through ``represent`` (None: ``model``'s, made here after the
    shots are checked)."""
    num_classes = _num_classes(train)
    check_shots(_labels(train), shots, num_classes)
    represent = representation_model(model) if represent is None else represent
    features = {name: _features(model, represent, data, batch_size, predict) for name, data in
                (("train", train), ("test", test), ("validation", validation)) if data is not None}  # fmt: skip
    return fewshot_eval(features["train"], features["test"], num_classes, shots, seeds, l2, features.get("validation"))


def _labels(data):
    from keras_vit.data.splits import Split

    if isinstance(data, Split):
        if data.labels is not None:
            return data.labels
        return np.array([label for _, label in data.as_dataset().as_numpy_iterator()])
    return np.asarray(data[1])


def _num_classes(data):
    from keras_vit.data.splits import Split

    return data.info.num_classes if isinstance(data, Split) else int(np.max(_labels(data))) + 1


class FewShotCallback(keras.callbacks.Callback):
    """Few-shot linear accuracy during training, logged beside the loss, as big_vision does.

    At the end of the first epoch, every ``every``-th and the last, runs
    ``fewshot_linear_eval`` on the model being trained and writes the mean accuracy over
    the seeds into the epoch's logs as ``fewshot_<k>shot``, so that ``CSVLogger`` and
    ``TensorBoard`` placed after it in the callback list record it (NaN at the epochs in
    between, so that every CSV row has the column). Evaluate on a validation split: the
    test split stays unseen during training.

    Args:
        train: where the shots come from (a ``Split`` or ``(images, labels)``).
        test: what the accuracy is measured on (the validation split during training).
        every: run every this many epochs.
        shots, seeds, l2: as ``fewshot_eval``; checked when the callback is made.
        batch_size, predict: as ``extract_features``'.
    """

    def __init__(self, train, test, every=1, shots=(1, 5, 10), seeds=3, l2=DEFAULT_L2, batch_size=256,
                 predict=None):  # fmt: skip
        super().__init__()
        if int(every) < 1:
            raise ValueError(f"every must be at least 1 epoch; got {every}.")
        self.every = int(every)
        self.train, self.test = train, test
        self.shots = check_shots(_labels(train), shots, _num_classes(train))
        self.seeds, self.l2, self.batch_size, self.predict = int(seeds), l2, batch_size, predict
        self._represented = self._represent = None  # the model evaluated, and its representation

    def keys(self):
        return [f"fewshot_{k}shot" for k in self.shots]

    def on_epoch_end(self, epoch, logs=None):
        if logs is None:
            return
        last = self.params.get("epochs") if self.params else None
        if epoch == 0 or (epoch + 1) % self.every == 0 or epoch + 1 == last:
            model = getattr(self.model, "backbone", self.model)  # a pre-training wrapper's ViT
            if self._represented is not model:  # one for the run: its predict compiled once
                self._represented, self._represent = model, representation_model(model)
            result = _linear_eval(
                model,
                self._represent,
                self.train,
                self.test,
                self.shots,
                self.seeds,
                self.l2,
                validation=None,
                batch_size=self.batch_size,
                predict=self.predict,
            )
            logs.update({key: mean for key, (mean, _) in zip(self.keys(), result.summary().values())})
        else:
            logs.update(dict.fromkeys(self.keys(), float("nan")))
