"""The fine-tuning techniques on a small pre-trained model: LoRA (trained weights counted,
merged, the adapter reloaded on the other two backends), layer-wise learning-rate decay, the
weights' moving average and the linear probe."""

import os
import textwrap

import keras
import numpy as np
import pytest
from helpers import TINY_ENCODER, assert_close_to_scale, randomize_keras, run_on_next_backend, to_numpy

import keras_vit
from keras_vit.data import load_dataset
from keras_vit.training import finetune, make_config, pretrain
from keras_vit.training.lora import add_lora, merge_lora
from keras_vit.training.optimizers import make_optimizer

BACKEND = keras.backend.backend()
DEPTH = 2
# Three updates from the first (no warm-up): the zero head learns, then the weights below it.
RUN = dict(epochs=1, steps_per_epoch=3, batch_size=16, warmup_steps=0, progress=0, learning_rate=0.05)


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    """A pre-trained stand-in: a random ViT (informative weights) saved at 16 px."""
    model = keras_vit.create_model("vit_ti16", image_size=16, num_classes=3, depth=DEPTH, patch_size=4, **TINY_ENCODER)
    randomize_keras(model)
    path = str(tmp_path_factory.mktemp("base") / "base.keras")
    keras_vit.save_model(model, path)
    return path


def tune(base, tmp_path, **options):
    return finetune(make_config("digits_finetune", init_from=base, output_dir=str(tmp_path), **{**RUN, **options}))


def weights(model):
    return {v.path: to_numpy(v) for v in model.weights}


# The LoRA model and its merge against W + (alpha / rank) A B computed here: at most float32
# sums in another order (measured equal on the three backends: Keras forms the kernel so).
LORA_RTOL = 1e-5


def test_lora_and_its_merge_are_the_base_plus_alpha_over_rank_a_b_computed_apart(base):
    model = keras_vit.load_model(base)
    add_lora(model, rank=2, alpha=6.0)  # a scale of 3, not the default 1: a scale left out shows
    rng = np.random.default_rng(0)
    factors = {}
    for layer in [layer for layer in model._flatten_layers() if getattr(layer, "lora_enabled", False)]:
        a, b = (0.3 * rng.standard_normal(tuple(w.shape)).astype("float32") for w in
                (layer.lora_kernel_a, layer.lora_kernel_b))  # fmt: skip
        layer.lora_kernel_a.assign(a)
        layer.lora_kernel_b.assign(b)
        factors[layer.path + "/kernel"] = (a, b)
    assert sorted(factors) == sorted(f"block_{i}/attention/{p}/kernel" for i in range(DEPTH) for p in ("qkv", "out"))
    # The base's kernels with the adapters folded in by hand, on a model without LoRA.
    reference = keras_vit.load_model(base)
    for variable in reference.weights:
        if variable.path in factors:
            a, b = factors[variable.path]
            variable.assign(to_numpy(variable) + 3.0 * (a @ b))
    x = np.random.default_rng(1).standard_normal((4, 16, 16, 3)).astype("float32")
    expected = to_numpy(reference(x))
    ours, merged = to_numpy(model(x)), to_numpy(merge_lora(model)(x))
    assert_close_to_scale(ours, expected, LORA_RTOL, "the LoRA model")
    assert_close_to_scale(merged, expected, LORA_RTOL, "its merge")
    # The adapters' effect is far past the bound: a merge that left them out would show.
    moved = np.abs(expected - to_numpy(keras_vit.load_model(base)(x))).max()
    assert moved > 100 * LORA_RTOL * np.abs(expected).max(), moved


def test_lora_trains_its_adapters_and_the_head_alone_and_its_merged_model_equals_base_plus_adapter(base, tmp_path):
    result = tune(base, tmp_path, lora_rank=2)
    width, blocks = TINY_ENCODER["hidden_size"], DEPTH
    trained = sorted(v.path for v in result.model.trainable_weights)
    expected = sorted(
        [f"block_{i}/attention/{p}/lora_kernel_{ab}" for i in range(blocks) for p in ("qkv", "out") for ab in "ab"]
        + ["head/bias", "head/kernel"]
    )
    assert trained == expected
    # qkv: width x 2 + 2 x 3 width; out: width x 2 + 2 x width; head: width x 10 + 10.
    count = sum(int(np.prod(v.shape)) for v in result.model.trainable_weights)
    assert count == blocks * (2 * width + 2 * 3 * width + 2 * width + 2 * width) + width * 10 + 10
    total = sum(int(np.prod(v.shape)) for v in result.model.weights)
    assert count < 0.05 * total * 2  # a tiny model: LoRA's share shrinks as the width grows
    # Every weight but the adapters and the head is the pre-trained one, after training.
    before, after = weights(keras_vit.load_model(base)), weights(result.model)
    for path, value in after.items():
        if "lora" not in path and not path.startswith("head/"):
            np.testing.assert_array_equal(value, before[path], err_msg=path)
    assert any(np.abs(after[p]).max() > 0 for p in expected if "lora_kernel_b" in p)  # the adapters learnt
    # The saved model is a plain one with the adapters merged: the same outputs.
    merged = keras_vit.load_model(os.path.join(result.run_dir, "model.keras"))
    assert not [v.path for v in merged.weights if "lora" in v.path]
    images = np.asarray(load_dataset("digits").test.images[:8], np.float32)
    x = to_numpy(result.model.preprocessing(images))
    expected_logits = to_numpy(result.model(x))
    np.testing.assert_allclose(to_numpy(merged(x)), expected_logits, rtol=1e-5, atol=1e-5)
    assert np.abs(expected_logits).max() > 1e-3  # informative: the head learnt

    # The adapter on its base model, on the next backend, gives the same outputs (the three
    # backends' runs load each other's: tensorflow's on jax, jax's on torch, torch's on tensorflow).
    np.save(tmp_path / "x.npy", x)
    code = textwrap.dedent(f"""
        import numpy as np, keras, keras_vit
        from keras_vit.training.lora import load_adapter
        model = keras_vit.create_model({base!r}, num_classes=10)  # the base with the task's head
        load_adapter(model, {os.path.join(result.run_dir, "adapter.npz")!r})
        np.save({str(tmp_path / "y.npy")!r}, keras.ops.convert_to_numpy(model(np.load({str(tmp_path / "x.npy")!r}))))
        assert tuple(model.class_names[:2]) == ("0", "1"), model.class_names  # the digits' names travel with it
    """)
    other = run_on_next_backend(code)
    np.testing.assert_allclose(np.load(tmp_path / "y.npy"), expected_logits, rtol=1e-4, atol=1e-5, err_msg=other)


def test_layer_decay_gives_each_block_its_rate_and_scales_its_steps():
    config = make_config("digits_finetune", layer_decay=0.5, momentum=0.0, learning_rate=0.1, warmup_steps=0,
                         global_clipnorm=None)  # fmt: skip
    plain = make_config("digits_finetune", momentum=0.0, learning_rate=0.1, warmup_steps=0, global_clipnorm=None)
    x = np.random.default_rng(0).standard_normal((4, 16, 16, 3)).astype("float32")
    start, models, steps = None, [], []
    for recipe in (config, plain):
        model = keras_vit.create_model("vit_ti16", image_size=16, num_classes=3, depth=DEPTH, patch_size=4,
                                       head_zero_init=False, **TINY_ENCODER)  # fmt: skip
        if start is None:
            randomize_keras(model)
            start = weights(model)
        model.set_weights([start[v.path] for v in model.weights])  # both from the same weights
        model.compile(make_optimizer(recipe, 10, model), keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        model.train_on_batch(x, np.array([0, 1, 2, 0]))
        models.append(model)
        steps.append({path: value - start[path] for path, value in weights(model).items()})
    rates = models[0].optimizer.layer_rates
    # Read from the optimizer: block i at decay ** (depth - i), embeddings lowest, head highest.
    assert rates["position_embedding/embedding"] == 0.5 ** (DEPTH + 1)
    assert [rates[f"block_{i}/mlp/fc1/kernel"] for i in range(DEPTH)] == [0.5 ** (DEPTH - i) for i in range(DEPTH)]
    assert rates["head/kernel"] == rates["encoder_norm/gamma"] == 1.0
    # And applied: each weight's first SGD step is its rate times the undecayed step.
    for path, rate in rates.items():
        np.testing.assert_allclose(steps[0][path], rate * steps[1][path], rtol=1e-4, atol=1e-7, err_msg=path)
    assert np.abs(steps[1]["block_0/mlp/fc1/kernel"]).max() > 0


def test_layer_decay_adamw_scales_each_weights_step_and_reloads_with_its_rates(tmp_path):
    # Adam's first step is linear in the rate (without weight decay, which stays at the base
    # rate): each weight's is its factor times the undecayed one.
    # A large rate: each step far above the float32 spacing of the weights it moves.
    common = dict(optimizer="adam", weight_decay=0.0, learning_rate=0.1, warmup_steps=0, global_clipnorm=None)
    x = np.random.default_rng(0).standard_normal((4, 16, 16, 3)).astype("float32")
    y = np.array([0, 1, 2, 0])
    start, models, steps = None, [], []
    for recipe in (make_config("digits_finetune", layer_decay=0.5, **common), make_config("digits_finetune", **common)):
        model = keras_vit.create_model("vit_ti16", image_size=16, num_classes=3, depth=DEPTH, patch_size=4,
                                       head_zero_init=False, **TINY_ENCODER)  # fmt: skip
        if start is None:
            randomize_keras(model)
            start = weights(model)
        model.set_weights([start[v.path] for v in model.weights])
        model.compile(make_optimizer(recipe, 10, model), keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        model.train_on_batch(x, y)
        models.append(model)
        steps.append({path: value - start[path] for path, value in weights(model).items()})
    decayed = models[0]
    assert type(decayed.optimizer).__name__ == "LayerDecayAdamW"
    rates = decayed.optimizer.layer_rates
    assert sorted(set(rates.values())) == [0.5**k for k in range(DEPTH + 1, -1, -1)]

    def informative(path, step):
        # The key's bias has no gradient but rounding (the softmax ignores a shift common to
        # a query's logits), which Adam scales up to steps of the rate's size: left out.
        if path.endswith("attention/qkv/bias"):
            third = step.shape[0] // 3
            return np.concatenate([step[:third], step[2 * third :]])
        return step

    for path, rate in rates.items():
        # Relative to the step's scale (Adam divides each gradient by its size: rounding near
        # its epsilon shows, measured up to 5e-4); a missing factor moves it 2 to 8 times as far.
        assert_close_to_scale(informative(path, steps[0][path]), rate * informative(path, steps[1][path]), 2e-3, path)
    # Saved with its optimizer and reloaded, it takes the next step the model it was takes.
    path = str(tmp_path / "decayed.keras")
    decayed.save(path)
    reloaded = keras.saving.load_model(path)
    assert type(reloaded.optimizer).__name__ == "LayerDecayAdamW" and reloaded.optimizer.layer_rates == rates
    before = weights(decayed)
    decayed.train_on_batch(x, y)
    reloaded.train_on_batch(x, y)
    after = weights(decayed)
    for path, value in weights(reloaded).items():
        assert_close_to_scale(informative(path, value - before[path]), informative(path, after[path] - before[path]),
                              2e-3, path)  # fmt: skip


class EpochWeights(keras.callbacks.Callback):
    def __init__(self):
        super().__init__()
        self.seen = []

    def on_epoch_end(self, epoch, logs=None):
        self.seen.append(weights(self.model))


MOMENTUM = 0.75


@pytest.fixture(scope="module")
def probes(base, tmp_path_factory):
    """Two linear probes of two updates (two epochs of one step): one with its weights
    recorded after each, one keeping their moving average."""
    out, record = tmp_path_factory.mktemp("probes"), EpochWeights()
    options = dict(init_from=base, freeze="backbone", **{**RUN, "epochs": 2, "steps_per_epoch": 1})
    raw = finetune(make_config("digits_finetune", output_dir=str(out / "raw"), **options), callbacks=[record])
    average = finetune(make_config("digits_finetune", output_dir=str(out / "ema"), ema=MOMENTUM, **options))
    return raw, record.seen, average


@pytest.mark.slow  # its fixture trains twice
def test_a_linear_probe_changes_no_backbone_weight(base, probes):
    raw, _, _ = probes
    before, after = weights(keras_vit.load_model(base)), weights(raw.model)
    changed = [p for p, v in after.items() if not p.startswith("head/") and not np.array_equal(v, before[p])]
    assert changed == [], changed
    assert sorted(v.path for v in raw.model.trainable_weights) == ["head/bias", "head/kernel"]
    assert np.abs(after["head/kernel"]).max() > 0  # the head (zero at the start) learnt


@pytest.mark.slow
def test_the_saved_model_holds_the_moving_average_of_the_weights(probes):
    _, (first, second), average = probes
    # The same updates as the recorded run; Keras' average starts at the first update's weights.
    saved = weights(keras_vit.load_model(os.path.join(average.run_dir, "model.keras")))
    for path, value in saved.items():
        np.testing.assert_allclose(value, MOMENTUM * first[path] + (1 - MOMENTUM) * second[path], rtol=1e-5,
                                   atol=1e-6, err_msg=path)  # fmt: skip
    assert not np.allclose(saved["head/kernel"], second["head/kernel"])  # the average, not the last weights


def test_add_lora_refuses_a_rank_it_cannot_have():
    model = keras_vit.create_model("vit_ti16", image_size=16, num_classes=3, depth=1, **TINY_ENCODER)
    for rank in (0, TINY_ENCODER["hidden_size"] + 1, 2.5):
        with pytest.raises(ValueError, match=f"LoRA rank must be an int from 1 to {TINY_ENCODER['hidden_size']}"):
            add_lora(model, rank)


# --- fine-tuning that learns: a model pre-trained on the digits, fine-tuned each way ---------

# A small ViT learns the digits in a few epochs at 8 px (2-pixel patches, 16 tokens).
LEARNER = dict(image_size=8, patch_size=2, depth=1, representation_size=None, **TINY_ENCODER)
# Chance is 0.1 on the ten digits. Each way reaches 0.75-0.81 in three epochs on the three
# backends (the pre-trained model itself 0.73-0.77); the bound is six times chance, far above
# what a fine-tuning that does not learn reaches (a head left at zero, labels not the images').
LEARNS = 0.6
WAYS = {
    "full, at 1.5x": dict(image_size=12),
    "LoRA": dict(lora_rank=4),
    "linear probe": dict(freeze="backbone", learning_rate=0.1),
    "layer decay": dict(layer_decay=0.75),
}


@pytest.fixture(scope="module")
def learnt(tmp_path_factory):
    """The digits' pre-training recipe, sixteen epochs of a small ViT: a model that has learnt."""
    out = tmp_path_factory.mktemp("learnt")
    config = make_config("digits_pretrain", output_dir=str(out), run_name="pre", epochs=16, learning_rate=5e-3,
                         warmup_steps=20, progress=0, **LEARNER)  # fmt: skip
    return pretrain(config)


@pytest.mark.slow  # its fixture trains sixteen epochs
@pytest.mark.parametrize("way", WAYS)
def test_fine_tuning_reaches_a_stated_accuracy_on_the_digits(learnt, way, tmp_path):
    assert learnt.test_accuracy >= LEARNS, learnt.test_accuracy
    init = os.path.join(learnt.run_dir, "model.keras")
    config = make_config("digits_finetune", init_from=init, output_dir=str(tmp_path), epochs=3, warmup_steps=5,
                         progress=0, **WAYS[way])  # fmt: skip
    result = finetune(config)
    # A fresh head: the start is chance; three epochs take it past the bound.
    assert result.checks["head_max_abs_output"] == 0.0
    print(f"{BACKEND} {way}: pre-trained {learnt.test_accuracy:.3f}, fine-tuned {result.test_accuracy:.3f}")
    assert result.test_accuracy >= LEARNS, (way, result.test_accuracy)
