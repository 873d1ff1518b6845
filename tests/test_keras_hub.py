"""keras-hub preset folders (``save_to_preset``) by their path: a small random keras-hub ViT,
DINOv2, DINOv3, or SigLIP's or CLIP's vision tower, written by keras-hub itself, loads with
keras-hub's outputs on two images, and the folder's image converter is the model's
pre-processing (``keras_vit/checkpoints/keras_hub_config.py``).
"""

import os

import numpy as np
import pytest
from helpers import assert_close_to_scale, cat_photo, to_numpy

import keras_vit
from keras_vit.checkpoints.keras_hub_config import UnsupportedKerasHubModelError

keras_hub = pytest.importorskip("keras_hub")

RTOL = 2e-5
# keras-hub's converter and the model's layer resize a square photo alike (bilinear, no
# antialiasing), in float32. (On another aspect ratio keras-hub crops the centre, then resizes;
# the layer resizes, then crops: the same region, sampled at places a fraction of a pixel apart.)
PREPROCESSING_ATOL = 1e-4
SIZE = dict(image_shape=(48, 48, 3), patch_size=16, num_layers=2, num_heads=2, hidden_dim=16, mlp_dim=32)


def randomized(model, seed=0):
    """``model`` with every weight drawn at unit scale (LayerNorm scales near one), so that a
    wrong epsilon, GELU form or transposed kernel moves the outputs past the bound."""
    rng = np.random.default_rng(seed)
    for variable in model.weights:
        shape = tuple(variable.shape)
        if "int" in str(variable.dtype):  # SigLIP's and CLIP's position_ids: which rows of the table go where
            value = rng.permutation(shape[-1]).reshape(shape)
        elif "gamma" in variable.path:
            value = 1.0 + 0.1 * rng.normal(size=shape)
        elif len(shape) > 1:
            value = rng.normal(size=shape) / np.sqrt(max(1, np.prod(shape[:-1])))
        else:
            value = 0.05 * rng.normal(size=shape)
        variable.assign(value.astype(variable.dtype))
    return model


def classifier(folder, use_class_token=True, intermediate_dim=None, pooling=None):
    backbone = keras_hub.models.ViTBackbone(**SIZE, use_class_token=use_class_token)
    converter = keras_hub.layers.ViTImageConverter(image_size=(48, 48), scale=1 / 127.5, offset=-1.0)
    task = keras_hub.models.ViTImageClassifier(
        backbone=backbone,
        num_classes=3,
        pooling=pooling or ("token" if use_class_token else "gap"),
        intermediate_dim=intermediate_dim,
        preprocessor=keras_hub.models.ViTImageClassifierPreprocessor(image_converter=converter),
    )
    randomized(task).save_to_preset(folder)
    return task, converter


def images():
    return np.random.default_rng(1).normal(size=(2, 48, 48, 3)).astype("float32")


@pytest.mark.parametrize(
    "use_class_token, intermediate_dim, pooling",
    [(True, None, "token"), (True, 24, "token"), (False, None, "gap"), (True, None, "gap")],
    ids=["token", "pre_logits", "gap", "gap_with_class_token"],
)
def test_a_keras_hub_vit_classifier_folder_loads_at_keras_hubs_outputs(
    tmp_path, use_class_token, intermediate_dim, pooling
):
    task, converter = classifier(str(tmp_path / "preset"), use_class_token, intermediate_dim, pooling)
    model = keras_vit.load_model(str(tmp_path / "preset"))
    assert model.output_shape == (None, 3) and model.spec.representation_size == intermediate_dim
    assert model.spec.pooling == pooling and not model.spec.gelu_approximate
    # keras-hub's average takes the class token in, where there is one.
    assert model.spec.pool_include_prefix == (pooling == "gap" and use_class_token)
    x = images()
    assert_close_to_scale(to_numpy(model(x)), to_numpy(task(x)), RTOL)  # the network, without pre-processing
    # Its converter (x * scale + offset, resized) is the model's pre-processing.
    photo = cat_photo()[None, :, :300].astype("float32")  # 300 x 300
    theirs = to_numpy(converter(photo))
    ours = to_numpy(model.preprocessing(photo))
    np.testing.assert_allclose(ours, theirs, atol=PREPROCESSING_ATOL)


def test_a_keras_hub_backbone_folder_loads_as_the_tokens_keras_hub_outputs(tmp_path):
    backbone = randomized(keras_hub.models.ViTBackbone(**SIZE))
    backbone.save_to_preset(str(tmp_path / "backbone"))
    model = keras_vit.load_model(str(tmp_path / "backbone"))
    assert model.spec.pooling is None and not model.spec.include_top and model.preprocessing is None
    x = images()
    assert_close_to_scale(to_numpy(model(x)), to_numpy(backbone(x)), RTOL)
    # As the backbone of a task of one's own: a head on the class token.
    tuned = keras_vit.create_model(str(tmp_path / "backbone"), pooling="token", include_top=True, num_classes=5)
    assert tuned.output_shape == (None, 5)


DINO = dict(num_layers=2, hidden_dim=16, num_heads=2, intermediate_dim=32)


@pytest.mark.parametrize(
    "backbone, options",
    [
        ("DINOV2Backbone", dict(patch_size=14, image_shape=(42, 42, 3), layer_scale_init_value=0.5)),
        ("DINOV2Backbone", dict(patch_size=14, image_shape=(42, 42, 3), num_register_tokens=4)),
        ("DINOV3Backbone", dict(patch_size=16, image_shape=(48, 48, 3))),
        ("DINOV3Backbone", dict(patch_size=16, image_shape=(48, 48, 3), use_gated_mlp=True, hidden_activation="silu",
                                use_key_bias=False)),
    ],
    ids=["dinov2", "dinov2_registers", "dinov3", "dinov3_swiglu"],
)  # fmt: skip
def test_a_keras_hub_dinov2_or_dinov3_folder_loads_as_the_tokens_keras_hub_outputs(tmp_path, backbone, options):
    randomized(getattr(keras_hub.models, backbone)(**DINO, **options)).save_to_preset(str(tmp_path / "preset"))
    model = keras_vit.load_model(str(tmp_path / "preset"))
    assert model.spec.num_register_tokens == options.get("num_register_tokens", 4 if "V3" in backbone else 0)
    assert model.spec.option("rope") == ("dinov3" if "V3" in backbone else None)
    # What keras-hub computes from the folder (its DINOv2 re-interpolates its position table on load).
    reloaded = keras_hub.models.Backbone.from_preset(str(tmp_path / "preset"))
    x = np.random.default_rng(1).normal(size=(2, *options["image_shape"])).astype("float32")
    assert_close_to_scale(to_numpy(model(x)), to_numpy(reloaded(x)), RTOL)


TOWER = dict(patch_size=16, hidden_dim=16, num_layers=2, num_heads=2, intermediate_dim=32, image_shape=(48, 48, 3))
TEXT = dict(vocabulary_size=10, embedding_dim=16, hidden_dim=16, num_layers=1, num_heads=2, intermediate_dim=32)


def two_towers(family, **vision):
    """A keras-hub ``SigLIPBackbone`` or ``CLIPBackbone`` (``family``) with a small text tower."""
    encoder = getattr(keras_hub.models, f"{family}VisionEncoder")(**TOWER, **vision)
    text = getattr(keras_hub.models, f"{family}TextEncoder")(**TEXT)
    extra = dict(projection_dim=8) if family == "CLIP" else {}
    return getattr(keras_hub.models, f"{family}Backbone")(encoder, text, **extra)


def vision_output(model, x):
    """What keras-hub's model computes of images: a two-tower backbone's image embedding, a
    vision encoder's output."""
    return model.get_vision_embeddings(x) if hasattr(model, "get_vision_embeddings") else model(x)


@pytest.mark.parametrize(
    "family, alone, activation, numerics",
    [
        ("SigLIP", False, None, dict(gelu_approximate=True, mlp_activation="gelu", layer_norm_epsilon=1e-6)),
        ("SigLIP", False, "gelu", dict(gelu_approximate=False, mlp_activation="gelu", layer_norm_epsilon=1e-6)),
        ("SigLIP", True, None, dict(gelu_approximate=True, mlp_activation="gelu", layer_norm_epsilon=1e-6)),
        ("CLIP", False, None, dict(mlp_activation="quick_gelu", layer_norm_epsilon=1e-5)),
        ("CLIP", False, "gelu", dict(gelu_approximate=False, mlp_activation="gelu", layer_norm_epsilon=1e-5)),
        ("CLIP", True, None, dict(mlp_activation="quick_gelu", layer_norm_epsilon=1e-5)),
    ],
    ids=["siglip", "siglip_exact_gelu", "siglip_vision_encoder", "clip", "clip_exact_gelu", "clip_vision_encoder"],
)
def test_a_keras_hub_siglip_or_clip_folder_loads_as_its_vision_towers_output(
    tmp_path, family, alone, activation, numerics
):
    vision = {} if activation is None else dict(intermediate_activation=activation)
    model = (
        getattr(keras_hub.models, f"{family}VisionEncoder")(**TOWER, **vision)
        if alone
        else two_towers(family, **vision)
    )
    randomized(model).save_to_preset(str(tmp_path / "preset"))
    ours = keras_vit.load_model(str(tmp_path / "preset"))
    assert {name: getattr(ours.spec, name) for name in numerics} == numerics
    assert ours.preprocessing is None  # no converter in the folder: keras-vit's defaults, as a backbone's
    # What keras-hub computes from the folder: SigLIP's pooled vector; CLIP's backbone, the
    # class token projected (keras-vit's head), its vision encoder, the tokens.
    reloaded = keras_hub.models.Backbone.from_preset(str(tmp_path / "preset"))
    x = images()
    assert_close_to_scale(to_numpy(ours(x)), to_numpy(vision_output(reloaded, x)), RTOL)


def test_a_keras_hub_clip_folder_without_its_top_is_the_class_token_before_the_projection(tmp_path):
    model = randomized(two_towers("CLIP"))
    model.save_to_preset(str(tmp_path / "clip"))
    with pytest.warns(UserWarning, match="not used by the model: vision_projection/kernel"):
        ours = keras_vit.create_model(str(tmp_path / "clip"), include_top=False)
    assert ours.spec.pooling == "token" and ours.output_shape == (None, 16)
    x = images()
    pooled = model.vision_pooler(model.vision_encoder(x))
    assert_close_to_scale(to_numpy(ours(x)), to_numpy(pooled), RTOL)


def test_a_keras_hub_siglip_or_clip_folders_image_converter_is_the_pre_processing(tmp_path):
    converter = keras_hub.layers.CLIPImageConverter(
        image_size=(48, 48), scale=[1 / (255 * s) for s in (0.27, 0.26, 0.28)],
        offset=[-m / s for m, s in zip((0.48, 0.46, 0.41), (0.27, 0.26, 0.28))],
    )  # fmt: skip
    # CLIP's preprocessor (with its tokenizer) as a preset holds it ...
    tokenizer = keras_hub.models.CLIPTokenizer(
        vocabulary={"<|startoftext|>": 0, "<|endoftext|>": 1, "a": 2, "</w>": 3, "a</w>": 4}, merges=["a </w>"]
    )
    two_towers("CLIP").save_to_preset(str(tmp_path / "clip"))
    keras_hub.models.CLIPPreprocessor(tokenizer, converter).save_to_preset(str(tmp_path / "clip"))
    # ... and a converter saved alone beside SigLIP's encoder.
    keras_hub.models.SigLIPVisionEncoder(**TOWER).save_to_preset(str(tmp_path / "siglip"))
    siglip_converter = keras_hub.layers.SigLIPImageConverter(image_size=(48, 48), scale=1 / 127.5, offset=-1.0)
    siglip_converter.save_to_preset(str(tmp_path / "siglip"))
    photo = cat_photo()[None, :, :300].astype("float32")  # 300 x 300
    for folder, theirs in (("clip", converter), ("siglip", siglip_converter)):
        model = keras_vit.load_model(str(tmp_path / folder))
        assert model.preprocessing is not None, folder
        np.testing.assert_allclose(
            to_numpy(model.preprocessing(photo)), to_numpy(theirs(photo)), atol=PREPROCESSING_ATOL, err_msg=folder
        )


def test_a_keras_hub_siglip_or_clip_tower_keras_vit_does_not_build_is_one_clear_error(tmp_path):
    keras_hub.models.SigLIPVisionEncoder(**TOWER, layer_norm_epsilon=1e-5).save_to_preset(str(tmp_path / "eps"))
    with pytest.raises(UnsupportedKerasHubModelError, match=r"layer_norm_epsilon=1e-05: its final norm's is 1e-6"):
        keras_vit.load_model(str(tmp_path / "eps"))
    two_towers("CLIP", intermediate_activation="silu").save_to_preset(str(tmp_path / "silu"))
    with pytest.raises(
        UnsupportedKerasHubModelError,
        match=r"a CLIPBackbone with intermediate_activation='silu': keras-vit builds 'quick_gelu', 'gelu'",
    ):
        keras_vit.load_model(str(tmp_path / "silu"))


def test_a_keras_hub_model_keras_vit_does_not_build_is_one_clear_error(tmp_path):
    keras_hub.models.ViTBackbone(**dict(SIZE, patch_size=(16, 8))).save_to_preset(str(tmp_path / "strange"))
    with pytest.raises(UnsupportedKerasHubModelError, match=r"patch_size=\[16, 8\].*square patches"):
        keras_vit.load_model(str(tmp_path / "strange"))
    keras_hub.models.ViTBackbone(**SIZE).save_to_preset(str(tmp_path / "renamed"))
    config = os.path.join(tmp_path, "renamed", "config.json")
    with open(config) as f:
        text = f.read().replace("keras_hub>ViTBackbone", "keras_hub>SwinBackbone")
    with open(config, "w") as f:
        f.write(text)
    with pytest.raises(
        UnsupportedKerasHubModelError,
        match="a keras-hub SwinBackbone; keras-vit builds CLIPBackbone, CLIPVisionEncoder",
    ):
        keras_vit.load_model(str(tmp_path / "renamed"))


# A pair folder: the backbone and its preprocessor (tokenizer and image converter), as
# keras-hub's CLIP and SigLIP presets hold them.
TEXT_STREAM_SCALE = 1e-3
TEXTS = ["A photo of a CAT.", "CAFÉ Über", "snake_case &amp; Co.", "café\tau  lait", "a long caption " * 30, ""]


def _clip_tokenizer():
    """keras-hub's CLIPTokenizer of CLIP's real vocabulary (open_clip's merges file, its two
    special tokens as keras-hub names them)."""
    from keras_vit.sources.pair import builtin_vocabulary
    from keras_vit.text import byte_level_bpe

    vocab, merges = byte_level_bpe.open_clip_vocabulary(builtin_vocabulary())
    names = dict(zip(byte_level_bpe.OPEN_CLIP_SPECIALS, byte_level_bpe.HF_SPECIALS))
    vocab = {names.get(token, token): i for token, i in vocab.items()}
    return keras_hub.models.CLIPTokenizer(vocabulary=vocab, merges=[" ".join(m) for m in merges]), len(vocab)


def pair_folder(family, folder):
    """A random keras-hub ``CLIPBackbone`` or ``SigLIPBackbone`` with its preprocessor, saved
    in ``folder``; the reloaded backbone and preprocessor (what keras-hub computes)."""
    from helpers import train_sentencepiece

    folder.mkdir()
    if family == "CLIP":
        tokenizer, vocabulary = _clip_tokenizer()
    else:
        tokenizer, vocabulary = keras_hub.models.SigLIPTokenizer(proto=str(train_sentencepiece(folder, 300))), 300
    encoder = getattr(keras_hub.models, f"{family}VisionEncoder")(**TOWER)
    text = getattr(keras_hub.models, f"{family}TextEncoder")(**dict(TEXT, vocabulary_size=vocabulary))
    extra = dict(projection_dim=8) if family == "CLIP" else {}
    backbone = randomized(getattr(keras_hub.models, f"{family}Backbone")(encoder, text, **extra))
    # The text tower's residual stream small (its embeddings and each block's outputs), so
    # that the final norm's epsilon shows past the bound (keras-hub's CLIP: 1e-6, not 1e-5).
    for variable in text.weights:
        if variable.path.endswith("embeddings") or "attention_output/" in variable.path or "2/" in variable.path:
            variable.assign(variable * TEXT_STREAM_SCALE)
    backbone.save_to_preset(str(folder))
    converter = getattr(keras_hub.layers, f"{family}ImageConverter")(image_size=(48, 48), scale=1 / 127.5, offset=-1.0)
    getattr(keras_hub.models, f"{family}Preprocessor")(tokenizer, converter).save_to_preset(str(folder))
    reloaded = getattr(keras_hub.models, f"{family}Preprocessor").from_preset(str(folder))
    return keras_hub.models.Backbone.from_preset(str(folder)), reloaded


@pytest.mark.parametrize("family", ["CLIP", "SigLIP"])
def test_a_keras_hub_clip_or_siglip_preset_loads_whole_at_keras_hubs_embeddings_and_ids(tmp_path, family):
    theirs, preprocessor = pair_folder(family, tmp_path / "pair")
    pair = keras_vit.load_model(str(tmp_path / "pair"))
    assert type(pair).__name__ == "ImageTextModel"
    assert type(keras_vit.create_model(str(tmp_path / "pair"))).__name__ == "VisionTransformer"  # as before
    photos = np.zeros((len(TEXTS), 48, 48, 3), "float32")
    ids = to_numpy(preprocessor({"prompts": TEXTS, "images": photos})["token_ids"])
    np.testing.assert_array_equal(pair.tokenize(TEXTS), ids)
    assert_close_to_scale(to_numpy(pair.text_encoder(ids)), to_numpy(theirs.get_text_embeddings(ids)), RTOL)
    x = images()
    assert_close_to_scale(to_numpy(pair.image_encoder(x)), to_numpy(theirs.get_vision_embeddings(x)), RTOL)
    head = theirs.clip_head if family == "CLIP" else theirs.siglip_head
    scores = [pair.logit_scale] + ([pair.logit_bias] if family == "SigLIP" else [])
    expected = [head.logit_scale] + ([head.logit_bias] if family == "SigLIP" else [])
    np.testing.assert_array_equal([to_numpy(s) for s in scores], [to_numpy(s) for s in expected])
