"""The text towers at their upstreams' outputs: transformers' CLIP text tower
(``CLIPTextModelWithProjection``, random weights at unit scale) read by the table's rows
(``table.HF_CLIP_TEXT``) into ``text_encoder``, on every backend: the causal attention, the
end-of-text rule (the highest id, or the first ``eos_token_id``: an id set so that the two
rules find different positions), the final norm and the projection without a bias."""

import numpy as np
import pytest
from helpers import randomize_torch, to_numpy

from keras_vit.checkpoints.table import HF_CLIP_TEXT
from keras_vit.checkpoints.tower_weights import assign_rows
from keras_vit.models.text_encoder import text_encoder
from keras_vit.models.text_spec import TextSpec

SIZES = dict(vocab_size=100, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2)
CONTEXT, PROJECTION = 16, 24
# transformers' rule by eos_token_id: 2 (the configs written before its fix) finds the
# highest id, as OpenAI's code does; any other id, its first position.
RULES = {"highest_id": 2, "first_id": 50}


def _texts(rng, end):
    """Ids of four texts: a start id, words, the end of text, then padding with the end id
    (as transformers pads CLIP). Words above ``end`` where the end is not the highest id."""
    ids = np.full((4, CONTEXT), end, "int32")
    for row, length in zip(ids, (1, 5, 9, CONTEXT - 2)):
        row[0] = 98
        row[1 : 1 + length] = rng.integers(3, 98 if end == 99 else 97, length)
        row[1 + length] = end
    return ids


@pytest.fixture(scope="module", params=sorted(RULES))
def clip_text(request):
    """``(rule, transformers' tower, its arrays, its output on four texts, the texts)``."""
    import torch
    from transformers import CLIPTextConfig, CLIPTextModelWithProjection

    rule = request.param
    config = CLIPTextConfig(
        **SIZES,
        max_position_embeddings=CONTEXT,
        projection_dim=PROJECTION,
        eos_token_id=RULES[rule],
        hidden_act="quick_gelu",
        layer_norm_eps=1e-5,
    )
    model = randomize_torch(CLIPTextModelWithProjection(config).eval(), seed=1, informative=True)
    ids = _texts(np.random.default_rng(2), 99 if rule == "highest_id" else RULES[rule])
    with torch.no_grad():
        expected = model(input_ids=torch.from_numpy(ids).long()).text_embeds.numpy()
    arrays = {key: value.detach().numpy() for key, value in model.state_dict().items()}
    return rule, arrays, expected, ids


# The same tower as keras-vit's spec names it.
TOWER = dict(vocabulary_size=100, context_length=CONTEXT, hidden_size=32, depth=2, num_heads=2, mlp_dim=64)


def _spec(rule, **changes):
    end_id = RULES[rule] if rule == "first_id" else None
    return TextSpec(**{**TOWER, "projection_dim": PROJECTION, "pooling": rule, "end_id": end_id, **changes})


def test_clips_text_tower_gives_transformers_text_embeddings(clip_text):
    rule, arrays, expected, ids = clip_text
    tower = text_encoder(_spec(rule))
    used = assign_rows(tower, HF_CLIP_TEXT, arrays)
    assert set(arrays) - used <= {"text_model.embeddings.position_ids"}
    got = to_numpy(tower(ids))
    assert np.abs(expected).max() > 0.5  # unit scale: a mismatch cannot hide in small numbers
    np.testing.assert_allclose(got, expected, atol=2e-5 * np.abs(expected).max())


def test_a_text_tower_of_the_other_rule_reads_another_position(clip_text):
    rule, arrays, expected, ids = clip_text
    other = "first_id" if rule == "highest_id" else "highest_id"
    tower = text_encoder(_spec(other))
    assign_rows(tower, HF_CLIP_TEXT, arrays)
    assert np.abs(to_numpy(tower(ids)) - expected).max() > 1e-2 * np.abs(expected).max()


def test_arrays_that_do_not_fit_are_named_and_nothing_is_loaded(clip_text):
    rule, arrays, _, _ = clip_text
    tower = text_encoder(_spec(rule, hidden_size=64, num_heads=4, mlp_dim=128))
    before = [to_numpy(w).copy() for w in tower.weights]
    broken = {k: v for k, v in arrays.items() if k != "text_model.final_layer_norm.weight"}
    with pytest.raises(ValueError, match="nothing was loaded") as error:
        assign_rows(tower, HF_CLIP_TEXT, broken)
    assert "text_norm/gamma: missing key 'text_model.final_layer_norm.weight'" in str(error.value)
    assert "text_embedding/token_embedding: 'text_model.embeddings.token_embedding.weight' gives shape" in str(
        error.value
    )
    for old, new in zip(before, tower.weights):
        np.testing.assert_array_equal(to_numpy(new), old)


def test_a_text_tower_saved_as_a_keras_file_reloads_to_the_same_embeddings(clip_text, tmp_path):
    import keras

    rule, arrays, expected, ids = clip_text
    tower = text_encoder(_spec(rule))
    assign_rows(tower, HF_CLIP_TEXT, arrays)
    tower.save(tmp_path / "text.keras")
    reloaded = keras.saving.load_model(tmp_path / "text.keras")
    np.testing.assert_array_equal(to_numpy(reloaded(ids)), to_numpy(tower(ids)))
    block = reloaded.get_layer("text_block_0")
    assert type(block.attention).__name__ == "CausalAttention"
    assert reloaded.get_layer("text_pooling").get_config()["end_id"] == (50 if rule == "first_id" else None)
