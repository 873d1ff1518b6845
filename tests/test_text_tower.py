"""The text towers at their upstreams' outputs: transformers' CLIP text tower
(``CLIPTextModelWithProjection``) and SigLIP's (``SiglipTextModel``, its keys as
``SiglipModel`` writes them), random weights at unit scale, read by the table's rows
(``table.HF_CLIP_TEXT``, ``HF_SIGLIP_TEXT``) into ``text_encoder``, on every backend: CLIP's
causal attention, its end-of-text rule (the highest id, or the first ``eos_token_id``: an id
set so that the two rules find different positions) and projection without a bias; SigLIP's
attention over every token, its last position and head with a bias, its tanh GELU."""

import numpy as np
import pytest
from helpers import once_on, randomize_torch, to_numpy

from keras_vit.checkpoints.table import HF_CLIP_TEXT, HF_SIGLIP_TEXT
from keras_vit.checkpoints.tower_weights import assign_rows
from keras_vit.models.text_spec import TextSpec
from keras_vit.models.text_tower import text_encoder

SIZES = dict(vocab_size=100, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2)
CONTEXT, PROJECTION = 16, 24
# The same tower as keras-vit's spec names it.
TOWER = dict(vocabulary_size=100, context_length=CONTEXT, hidden_size=32, depth=2, num_heads=2, mlp_dim=64)
# Each kind: transformers' config, keras-vit's spec, the rows, the end-of-text id of the texts.
# transformers' CLIP finds its end of text by eos_token_id: 2 (the configs written before its
# fix) the highest id, as OpenAI's code does; any other id, its first position.
KINDS = {
    "clip, highest id": (
        dict(eos_token_id=2, hidden_act="quick_gelu", layer_norm_eps=1e-5, projection_dim=PROJECTION),
        dict(pooling="highest_id", projection_dim=PROJECTION),
        HF_CLIP_TEXT,
        99,
    ),
    "clip, first end id": (
        dict(eos_token_id=50, hidden_act="quick_gelu", layer_norm_eps=1e-5, projection_dim=PROJECTION),
        dict(pooling="first_id", end_id=50, projection_dim=PROJECTION),
        HF_CLIP_TEXT,
        50,
    ),
    "siglip": (
        dict(hidden_act="gelu_pytorch_tanh", layer_norm_eps=1e-6, projection_size=PROJECTION),
        dict(
            causal=False,
            pooling="last",
            projection_dim=PROJECTION,
            projection_bias=True,
            layer_norm_epsilon=1e-6,
            mlp_activation="gelu",
            gelu_approximate=True,
        ),
        HF_SIGLIP_TEXT,
        1,
    ),
}


def _texts(rng, end):
    """Ids of four texts: a start id, words, the end of text, then padding with the end id
    (as transformers pads CLIP and SigLIP). Words above ``end`` where it is not the highest id."""
    ids = np.full((4, CONTEXT), end, "int32")
    for row, length in zip(ids, (1, 5, 9, CONTEXT - 2)):
        row[0] = 98
        row[1 : 1 + length] = rng.integers(3, 98 if end == 99 else 97, length)
        row[1 + length] = end
    return ids


def _upstream(kind):
    from transformers import CLIPTextConfig, CLIPTextModelWithProjection, SiglipTextConfig, SiglipTextModel

    config, *_ = KINDS[kind]
    if kind == "siglip":
        return SiglipTextModel(SiglipTextConfig(**SIZES, max_position_embeddings=CONTEXT, **config)), "text_model."
    return CLIPTextModelWithProjection(CLIPTextConfig(**SIZES, max_position_embeddings=CONTEXT, **config)), ""


@pytest.fixture(scope="module", params=sorted(KINDS))
def upstream(request):
    """``(kind, the upstream's arrays, its text embeddings of four texts, the texts)``."""
    import torch

    kind = request.param
    model, prefix = _upstream(kind)
    model = randomize_torch(model.eval(), seed=1, informative=True)
    ids = _texts(np.random.default_rng(2), KINDS[kind][3])
    with torch.no_grad():
        output = model(input_ids=torch.from_numpy(ids).long())
    expected = (output.pooler_output if kind == "siglip" else output.text_embeds).numpy()
    arrays = {prefix + key: value.detach().numpy() for key, value in model.state_dict().items()}
    return kind, arrays, expected, ids


def _tower(kind, **changes):
    return text_encoder(TextSpec(**{**TOWER, **KINDS[kind][1], **changes}))


def test_text_towers_give_their_upstreams_text_embeddings(upstream):
    kind, arrays, expected, ids = upstream
    tower = _tower(kind)
    used = assign_rows(tower, KINDS[kind][2], arrays)
    assert not {key for key in set(arrays) - used if not key.endswith("position_ids")}
    assert np.abs(expected).max() > 0.5  # unit scale: a mismatch cannot hide in small numbers
    np.testing.assert_allclose(to_numpy(tower(ids)), expected, atol=2e-5 * np.abs(expected).max())


@pytest.mark.parametrize("change", ["pooling", "causal"])
def test_a_text_tower_that_pools_or_attends_otherwise_is_another_tower(upstream, change):
    kind, arrays, expected, ids = upstream
    if change == "pooling":
        other = {"highest_id": dict(pooling="last"), "first_id": dict(pooling="highest_id", end_id=None)}
        changes = other.get(KINDS[kind][1]["pooling"], dict(pooling="highest_id"))
    else:
        changes = dict(causal=not KINDS[kind][1].get("causal", True))
    tower = _tower(kind, **changes)
    assign_rows(tower, KINDS[kind][2], arrays)
    assert np.abs(to_numpy(tower(ids)) - expected).max() > 1e-2 * np.abs(expected).max()


def test_arrays_that_do_not_fit_are_named_and_nothing_is_loaded(upstream):
    kind, arrays, _, _ = upstream
    tower = _tower(kind, hidden_size=64, num_heads=4, mlp_dim=128)
    before = [to_numpy(w).copy() for w in tower.weights]
    broken = {k: v for k, v in arrays.items() if k != "text_model.final_layer_norm.weight"}
    with pytest.raises(ValueError, match="nothing was loaded") as error:
        assign_rows(tower, KINDS[kind][2], broken)
    assert "text_norm/gamma: missing key 'text_model.final_layer_norm.weight'" in str(error.value)
    assert "text_embedding/token_embedding: 'text_model.embeddings.token_embedding.weight' gives shape" in str(
        error.value
    )
    for old, new in zip(before, tower.weights):
        np.testing.assert_array_equal(to_numpy(new), old)


def test_a_text_tower_saved_as_a_keras_file_reloads_to_the_same_embeddings(upstream, tmp_path):
    import keras

    kind, arrays, _, ids = upstream
    tower = _tower(kind)
    assign_rows(tower, KINDS[kind][2], arrays)
    tower.save(tmp_path / "text.keras")
    reloaded = keras.saving.load_model(tmp_path / "text.keras")
    np.testing.assert_array_equal(to_numpy(reloaded(ids)), to_numpy(tower(ids)))
    attention = type(reloaded.get_layer("text_block_0").attention).__name__
    assert attention == ("MultiHeadSelfAttention" if kind == "siglip" else "CausalAttention")
    assert reloaded.get_layer("text_pooling").get_config()["end_id"] == KINDS[kind][1].get("end_id")


@once_on("torch", "the towers' widths are compared before anything computes")
def test_towers_whose_embeddings_differ_in_width_are_no_pair():
    import keras_vit
    from keras_vit.models import ImageTextModel

    image = keras_vit.create_model("vit_ti16", image_size=16, depth=1, num_classes=PROJECTION + 1)
    text = text_encoder(TextSpec(**TOWER, projection_dim=PROJECTION))
    with pytest.raises(ValueError, match=f"of one width.*got {PROJECTION + 1} for the images and {PROJECTION} for"):
        ImageTextModel(image, text, tokenizer=None)
