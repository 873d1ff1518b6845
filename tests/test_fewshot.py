"""The paper's few-shot linear evaluation: the closed-form solver against scikit-learn,
the sampling of shots, the callback's logs and the recipe."""

import csv
import os

import keras
import numpy as np
import pytest
from helpers import TINY_ENCODER

import keras_vit
from keras_vit.data import load_dataset
from keras_vit.evaluation import fewshot
from keras_vit.layers import ImagePreprocessing

TINY = dict(image_size=16, patch_size=4, depth=1, num_classes=10, **TINY_ENCODER)


@pytest.fixture(scope="module")
def digits():
    return load_dataset("digits")


def tiny_model(**options):
    return keras_vit.VisionTransformer(preprocessing=ImagePreprocessing.from_normalization("vit", 16),
                                       **{**TINY, **options})  # fmt: skip


def design(features, train):
    """big_vision's design matrix, written out: whitened by the training set, bias column 100."""
    mean, std = train.mean(axis=0), train.std(axis=0) + 1e-5
    x = (features - mean) / std
    return np.concatenate([x, np.full((len(x), 1), 100.0)], axis=1)


@pytest.mark.parametrize("num_images", [40, 6], ids=["more_images_than_features", "fewer"])
@pytest.mark.parametrize("l2", [1.0, 1024.0])
def test_closed_form_solver_equals_sklearn_ridge(digits, num_images, l2):
    from sklearn.linear_model import Ridge

    model = tiny_model()
    features, labels = fewshot.extract_features(model, (digits.train.images[:60], digits.train.labels[:60]))
    assert features.shape == (60, 32)  # the pooled features (no pre-logits layer)
    x, y = features[:num_images], labels[:num_images]
    probe = fewshot.RidgeProbe(x, y, num_classes=10)
    targets = 2.0 * np.eye(10)[y] - 1.0
    reference = Ridge(alpha=l2, fit_intercept=False, solver="svd").fit(design(x, x), targets)
    np.testing.assert_allclose(probe.weights(l2), reference.coef_.T, atol=1e-5, rtol=1e-5)
    test = features[num_images:]
    np.testing.assert_allclose(probe.scores(test, l2), reference.predict(design(test, x)), atol=1e-5, rtol=1e-5)


def test_the_representation_is_the_pre_logits_output(rng):
    model = keras_vit.VisionTransformer(representation_size=24, **TINY)
    represent = fewshot.representation_model(model)
    x = rng.uniform(-1, 1, (2, 16, 16, 3)).astype("float32")
    expected = model.get_layer("pre_logits")(model.feature_model()(x))
    np.testing.assert_allclose(keras.ops.convert_to_numpy(represent(x)), keras.ops.convert_to_numpy(expected),
                               atol=1e-6)  # fmt: skip


def test_shots_are_deterministic_per_seed_nested_and_never_test_images(digits, monkeypatch):
    labels = digits.train.labels
    one, again, other = (fewshot.sample_shots(labels, 5, 10, seed) for seed in (3, 3, 4))
    np.testing.assert_array_equal(one, again)
    assert not np.array_equal(one, other)
    assert np.array_equal(np.bincount(labels[one], minlength=10), np.full(10, 5))
    assert set(fewshot.sample_shots(labels, 1, 10, 3)) <= set(one)  # the 1-shot set is in the 5-shot one
    fitted = []
    init = fewshot.RidgeProbe.__init__
    monkeypatch.setattr(fewshot.RidgeProbe, "__init__", lambda self, x, y, n: fitted.append(x) or init(self, x, y, n))
    model = tiny_model()
    train = (digits.train.images[:200], digits.train.labels[:200])
    test = (digits.test.images[:50], digits.test.labels[:50])
    train_features, _ = fewshot.extract_features(model, train)
    test_features, _ = fewshot.extract_features(model, test)
    fewshot.fewshot_linear_eval(model, train, test, shots=(1, 5), seeds=2)
    assert len(fitted) == 4
    rows = {row.tobytes() for x in fitted for row in x}
    assert rows <= {row.tobytes() for row in train_features}
    assert not rows & {row.tobytes() for row in test_features}


def test_too_many_shots_is_an_error_before_any_image_goes_through(digits, monkeypatch):
    monkeypatch.setattr(fewshot, "extract_features", lambda *a, **k: pytest.fail("features were extracted"))
    train = (digits.train.images[:30], digits.train.labels[:30])
    smallest = np.bincount(train[1], minlength=10).min()
    with pytest.raises(ValueError, match=rf"{smallest + 1}-shot needs .* has {smallest}"):
        fewshot.fewshot_linear_eval(tiny_model(), train, train, shots=(1, smallest + 1))
    with pytest.raises(ValueError, match="needs validation features"):
        fewshot.fewshot_eval((np.zeros((4, 2)), np.array([0, 1, 0, 1])), (np.zeros((1, 2)), [0]), 2, shots=(1,),
                             l2=[1.0, 2.0])  # fmt: skip


def test_l2_is_chosen_on_validation_data():
    rng = np.random.default_rng(0)
    centres = 3 * rng.standard_normal((4, 16))
    labels = np.arange(400) % 4
    features = centres[labels] + rng.standard_normal((400, 16))
    train, validation, test = ((features[s], labels[s]) for s in (slice(0, 200), slice(200, 300), slice(300, 400)))
    result = fewshot.fewshot_eval(train, test, 4, shots=(2,), seeds=3, l2=[1e-3, 1.0, 1e6], validation=validation)
    scores = {c: np.mean([(fewshot.RidgeProbe(train[0][i], train[1][i], 4).predict(validation[0], c) == validation[1])
                          .mean() for i in (fewshot.sample_shots(train[1], 2, 4, s) for s in range(3))])
              for c in (1e-3, 1.0, 1e6)}  # fmt: skip
    assert result.l2[2] == max(scores, key=scores.get)
    assert result.accuracy[2].shape == (3,)


def test_callback_logs_beside_the_loss_to_csv_and_tensorboard(digits, tmp_path, monkeypatch):
    import tensorflow as tf

    model = tiny_model()
    model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    train = (digits.train.images[:100], digits.train.labels[:100])
    validation = (digits.validation.images[:40], digits.validation.labels[:40])
    callback = fewshot.FewShotCallback(train, validation, every=2, shots=(1, 2), seeds=2)
    # One representation model for the run, its predict compiled once: not one per split and epoch.
    made, represent = [], fewshot.representation_model
    monkeypatch.setattr(fewshot, "representation_model", lambda model: made.append(1) or represent(model))
    log = str(tmp_path / "log.csv")
    board = str(tmp_path / "tensorboard")
    x = ImagePreprocessing.from_normalization("vit", 16)(digits.train.images[:64])
    model.fit(x, digits.train.labels[:64], epochs=3, batch_size=32, verbose=0,
              callbacks=[callback, keras.callbacks.CSVLogger(log), keras.callbacks.TensorBoard(board)])  # fmt: skip
    with open(log) as f:
        rows = list(csv.DictReader(f))
    assert [row["epoch"] for row in rows] == ["0", "1", "2"]
    for row in (rows[0], rows[1], rows[2]):  # the first, every second, and the last epoch
        assert set(row) >= {"loss", "fewshot_1shot", "fewshot_2shot"}
    assert 0.0 <= float(rows[0]["fewshot_2shot"]) <= 1.0 and 0.0 <= float(rows[1]["fewshot_2shot"]) <= 1.0
    assert 0.0 <= float(rows[2]["fewshot_2shot"]) <= 1.0
    assert len(made) == 1
    # The last epoch's figure is the trained weights', as a fresh evaluation finds it.
    again = fewshot.fewshot_linear_eval(model, train, validation, shots=(1, 2), seeds=2)
    assert float(rows[2]["fewshot_2shot"]) == pytest.approx(float(again.accuracy[2].mean()), abs=1e-6)
    tags = set()
    for root, _, files in os.walk(board):
        for name in files:
            for event in tf.compat.v1.train.summary_iterator(os.path.join(root, name)):
                tags.update(value.tag for value in event.summary.value)
    assert "epoch_fewshot_1shot" in tags


def test_recipe_prints_the_table_and_writes_the_csv(tmp_path, capsys):
    from keras_vit.commands import fewshot as module

    model = tiny_model()
    path = str(tmp_path / "model.keras")
    model.save(path)
    table = str(tmp_path / "fewshot.csv")
    result = module.main([path, "--shots", "1,5", "--seeds", "2", "--csv", table])
    out = capsys.readouterr().out
    assert "few-shot linear accuracy" in out and "shots" in out
    with open(table) as f:
        rows = list(csv.DictReader(f))
    assert [(r["shots"], r["seed"]) for r in rows] == [("1", "0"), ("1", "1"), ("5", "0"), ("5", "1")]
    assert float(rows[3]["accuracy"]) == pytest.approx(result.accuracy[5][1], abs=1e-6)
    with pytest.raises(SystemExit) as exit_info:
        module.main([path, "--shots", "1,500"])
    assert exit_info.value.code == 2 and "500-shot needs" in capsys.readouterr().err
