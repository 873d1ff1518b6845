"""HF transformers checkpoints by hub id (``keras_vit/checkpoints/transformers_config.py``):
a small random model written by transformers' own ``save_pretrained``, with its image
processor, served by the loopback hub, loads by ``hf-hub:<org>/<name>`` at transformers'
outputs on two real photos, and its pre-processing is the processor's.

Weights at unit scale (``helpers.randomize_torch(informative=True)``) so that a wrong
epsilon or GELU form moves the outputs past the bound.
"""

import json
import os

import numpy as np
import pytest
import skimage.data
from helpers import assert_close_to_scale, pil_processor, randomize_torch, to_numpy, write_photos

import keras_vit
from keras_vit.checkpoints.transformers_config import UnsupportedModelTypeError

RTOL = 2e-5
# The layer's resize keeps floats where PIL rounds each pass to uint8 (test_family.py's bound).
MEAN_PREPROCESSING_DIFFERENCE = 0.02
DINOV2 = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, mlp_ratio=2, image_size=56, patch_size=8)
SMALL = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64, image_size=48,
             patch_size=16)  # fmt: skip


def small_embeddings(peer, scale=1e-3):
    """``peer`` with its patch, class-token and position embeddings scaled down, so that the
    first norm's inputs have a variance near its epsilon: a wrong epsilon (1e-6 for HF's
    1e-12) moves the outputs by far more than the bound."""
    import torch

    with torch.no_grad():
        for name, p in peer.named_parameters():
            if "embeddings" in name:
                p.mul_(scale)
    return peer


def photos():
    return [skimage.data.chelsea(), skimage.data.coffee()]


def serve(mirror, repo, model, processor):
    folder = os.path.join(mirror.root, repo, "resolve", "main")
    model.save_pretrained(folder, safe_serialization=True)
    processor.save_pretrained(folder)
    return f"hf-hub:{repo}"


def processed(processor):
    """The processor's output for the photos, NHWC float32."""
    return processor(images=photos(), return_tensors="np")["pixel_values"].transpose(0, 2, 3, 1).astype("float32")


IMAGENET = dict(image_mean=[0.485, 0.456, 0.406], image_std=[0.229, 0.224, 0.225])
BICUBIC = 3  # PIL's number for it, as the image processors store it


def vit_processor():
    return pil_processor("ViTImageProcessor")(size={"height": 48, "width": 48}, resample=BICUBIC, **IMAGENET)


def bit_processor():
    """DINOv2's: the shorter side to 56, a 48 px centre crop."""
    crop = {"height": 48, "width": 48}
    return pil_processor("BitImageProcessor")(size={"shortest_edge": 56}, crop_size=crop, resample=BICUBIC, **IMAGENET)


def upstream_model(cls, **config):
    """transformers' ``cls`` (a model class name) of its config ``config``, random at unit
    scale with small embeddings (``small_embeddings``)."""
    import transformers

    model_class = getattr(transformers, cls)
    peer = model_class(model_class.config_class(**config)).eval()
    return small_embeddings(randomize_torch(peer, informative=True))


def assert_as_transformers(model, processor, upstream, preprocessing=True):
    """``model`` on the processor's output of the photos against ``upstream`` (transformers'
    call on those pixels, NCHW) within ``RTOL`` of its scale; with ``preprocessing``, the
    model's own pre-processing of the raw photos against the processor's. Returns the pixels."""
    import torch

    x = processed(processor)
    with torch.no_grad():
        expected = upstream(torch.from_numpy(x.transpose(0, 3, 1, 2)))
    expected = getattr(expected, "pooler_output", expected)  # get_image_features' answer in transformers 5
    assert_close_to_scale(to_numpy(model(x)), expected.numpy(), RTOL)
    if preprocessing:
        ours = np.stack([to_numpy(model.preprocessing(photo)) for photo in photos()])
        assert np.abs(ours - x).mean() < MEAN_PREPROCESSING_DIFFERENCE
    return x


def test_a_vit_classifier_loads_by_hub_id_at_transformers_logits(mirror):
    peer = upstream_model("ViTForImageClassification", **SMALL, id2label={0: "cat", 1: "coffee", 2: "other"})
    model = keras_vit.create_model(serve(mirror, "google/vit-small-test", peer, vit_processor()))
    assert model.class_names == ("cat", "coffee", "other") and model.spec.layer_norm_epsilon == 1e-12
    x = assert_as_transformers(model, vit_processor(), lambda pixels: peer(pixel_values=pixels).logits)
    assert model.classify(photos()).shape == (2, 3)
    # The folder save_pretrained wrote loads as its hub id does.
    folder = keras_vit.load_model(os.path.join(mirror.root, "google/vit-small-test", "resolve", "main"))
    np.testing.assert_array_equal(to_numpy(folder(x)), to_numpy(model(x)))


def test_a_vit_backbone_outputs_transformers_pooled_output(mirror):
    peer = upstream_model("ViTModel", **SMALL)
    name = serve(mirror, "google/vit-backbone-test", peer, vit_processor())
    model = keras_vit.load_model(name)
    assert not model.spec.include_top and model.class_names is None
    assert_as_transformers(model, vit_processor(), lambda pixels: peer(pixel_values=pixels).pooler_output)
    # With a head for a task of one's own: the backbone's weights, a fresh classifier.
    with pytest.warns(UserWarning, match="fresh"):
        tuned = keras_vit.create_model(name, include_top=True, num_classes=4)
    assert tuned.output_shape == (None, 4)


def test_an_unknown_model_type_is_one_error_naming_those_built(mirror):
    folder = os.path.join(mirror.root, "org", "swin-test", "resolve", "main")
    os.makedirs(folder)
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump({"model_type": "swin", "architectures": ["SwinModel"]}, f)
    built = ["beit", "clip", "clip_vision_model", "data2vec-vision", "deit", "dinov2", "dinov2_with_registers",
             "dinov3_vit", "ijepa", "siglip", "siglip_vision_model", "vit", "vit_mae", "vit_msn"]  # fmt: skip
    with pytest.raises(UnsupportedModelTypeError, match=f"model_type 'swin': keras-vit builds {', '.join(built)} "):
        keras_vit.create_model("hf-hub:org/swin-test")
    # A ViT keras-vit does not build yet says what it needs.
    folder = os.path.join(mirror.root, "org", "siglip2-test", "resolve", "main")
    os.makedirs(folder)
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump({"model_type": "siglip2_vision_model"}, f)
    with pytest.raises(UnsupportedModelTypeError, match="'siglip2_vision_model', which needs NaFlex's variable patch"):
        keras_vit.create_model("hf-hub:org/siglip2-test")


def test_a_distilled_deit_loads_with_its_two_heads_at_transformers_logits(mirror):
    peer = upstream_model("DeiTForImageClassificationWithTeacher", **SMALL, id2label={0: "cat", 1: "coffee"})
    sizes = dict(size={"height": 56, "width": 56}, crop_size={"height": 48, "width": 48})
    processor = pil_processor("DeiTImageProcessor")(**sizes, resample=BICUBIC, **IMAGENET)
    model = keras_vit.create_model(serve(mirror, "facebook/deit-small-test", peer, processor))
    assert model.spec.distillation_token and model.class_names == ("cat", "coffee")
    assert model.preprocessing.crop_fraction == 48 / 56
    assert_as_transformers(model, processor, lambda pixels: peer(pixel_values=pixels).logits)


@pytest.mark.parametrize("cls", ["DeiTForImageClassification", "DeiTModel"])
def test_a_deit_classifier_or_backbone_reads_the_class_token_alone(mirror, cls):
    # The distillation token is attended to but read by no head: the class token's head
    # (DeiTForImageClassification) or pooler (DeiTModel: pooler_output) alone.
    labels = dict(id2label={0: "cat", 1: "coffee"}) if "Classification" in cls else {}
    peer = upstream_model(cls, **SMALL, **labels)
    model = keras_vit.load_model(serve(mirror, f"facebook/{cls.lower()}-test", peer, vit_processor()))
    assert model.spec.distillation_token and not model.spec.distillation_head
    assert "head_dist" not in [layer.name for layer in model.layers]
    outputs = "logits" if labels else "pooler_output"
    assert_as_transformers(model, vit_processor(), lambda pixels: getattr(peer(pixel_values=pixels), outputs))


def test_a_dinov2_backbone_loads_at_another_size_at_transformers_pooled_output(mirror):
    # Trained at 56 px (a 7x7 grid of 8 px patches), used at 48 (6x6) as DINOv2's processor
    # crops: the position table resampled at load as transformers interpolates it per call.
    peer = upstream_model("Dinov2Model", **DINOV2, layerscale_value=0.5)
    model = keras_vit.load_model(serve(mirror, "facebook/dinov2-small-test", peer, bit_processor()))
    assert model.input_shape == (None, 48, 48, 3) and model.spec.layer_scale_init == 0.5 and not model.spec.include_top
    assert_as_transformers(model, bit_processor(), lambda pixels: peer(pixel_values=pixels).pooler_output)


@pytest.mark.parametrize("cls", ["Dinov2ForImageClassification", "Dinov2WithRegistersForImageClassification"])
def test_a_dinov2_classifier_reads_the_class_token_beside_the_patch_tokens_mean(mirror, cls):
    registers = dict(num_register_tokens=4) if "Registers" in cls else {}
    peer = upstream_model(cls, **DINOV2, **registers, id2label={0: "cat", 1: "coffee", 2: "other"})
    model = keras_vit.load_model(serve(mirror, f"facebook/{cls.lower()}-test", peer, bit_processor()))
    assert model.spec.pooling == "token_gap" and model.class_names == ("cat", "coffee", "other")
    assert model.get_layer("head").kernel.shape == (2 * DINOV2["hidden_size"], 3)
    assert_as_transformers(model, bit_processor(), lambda pixels: peer(pixel_values=pixels).logits)


def test_dinov2_with_registers_loads_its_registers_outside_the_position_table(mirror):
    peer = upstream_model("Dinov2WithRegistersModel", **DINOV2, num_register_tokens=4)
    model = keras_vit.load_model(serve(mirror, "facebook/dinov2-with-registers-small-test", peer, bit_processor()))
    assert model.spec.num_register_tokens == 4 and not model.spec.embed_prefix_tokens
    assert_as_transformers(model, bit_processor(), lambda pixels: peer(pixel_values=pixels).pooler_output, False)


def dinov3_processor():
    """DINOv3's processor settings (each side to 48, bilinear, ImageNet's mean and std), on
    ``ViTImageProcessor``'s PIL backend: transformers' DINOv3 processor runs on torchvision
    alone, and its file holds these same settings (``serve_dinov3`` writes its type name)."""
    return pil_processor("ViTImageProcessor")(size={"height": 48, "width": 48}, resample=2, **IMAGENET)


def serve_dinov3(mirror, repo, model):
    """``serve``, with the processor's file as DINOv3's names itself."""
    name = serve(mirror, repo, model, dinov3_processor())
    path = os.path.join(mirror.root, repo, "resolve", "main", "preprocessor_config.json")
    with open(path) as f:
        settings = json.load(f)
    with open(path, "w") as f:
        json.dump({**settings, "image_processor_type": "DINOv3ViTImageProcessor"}, f)
    return name


@pytest.mark.parametrize("gated", [False, True], ids=["mlp", "swiglu"])
def test_dinov3_loads_with_rotary_embeddings_at_transformers_pooled_output_at_any_size(mirror, gated):
    import torch

    # Registers, LayerScale; the SwiGLU one with SiLU and a key bias too (the others' default none).
    extra = dict(use_gated_mlp=True, hidden_act="silu", key_bias=True) if gated else {}
    peer = upstream_model("DINOv3ViTModel", **SMALL, num_register_tokens=4, layerscale_value=0.5, **extra)
    model = keras_vit.load_model(serve_dinov3(mirror, "facebook/dinov3-vits16-test", peer))
    spec = model.spec
    assert (spec.rope.form, spec.position_embedding, spec.num_register_tokens, spec.gated_mlp) == (
        "dinov3",
        "none",
        4,
        gated,
    )
    assert spec.layer_norm_epsilon == 1e-5 and spec.dynamic_image_size and not spec.include_top
    assert_as_transformers(model, dinov3_processor(), lambda pixels: peer(pixel_values=pixels).pooler_output)
    # Other sizes as they are: the rotary angles computed for each grid, as transformers does.
    images = np.random.default_rng(0).normal(size=(2, 64, 80, 3)).astype("float32")
    with torch.no_grad():
        expected = peer(pixel_values=torch.from_numpy(images.transpose(0, 3, 1, 2))).pooler_output.numpy()
    assert_close_to_scale(to_numpy(model(images)), expected, RTOL)


@pytest.mark.parametrize(
    "cls, mean_pooling",
    [("BeitForImageClassification", True), ("BeitModel", False), ("Data2VecVisionForImageClassification", True)],
)
def test_beit_and_data2vec_load_with_their_relative_position_bias(mirror, cls, mean_pooling):
    # A relative position bias in each block, LayerScale, the key without a bias; mean
    # pooling normed after it, or the class token after the final norm.
    labels = dict(id2label={0: "cat", 1: "coffee", 2: "other"}) if "Classification" in cls else {}
    peer = upstream_model(cls, **SMALL, use_relative_position_bias=True, use_mean_pooling=mean_pooling,
                          layer_scale_init_value=0.1, **labels)  # fmt: skip
    processor = pil_processor("BeitImageProcessor")(
        size={"height": 48, "width": 48}, do_center_crop=False, resample=BICUBIC, **IMAGENET
    )
    model = keras_vit.load_model(serve(mirror, f"microsoft/{cls.lower()}-test", peer, processor))
    spec = model.spec
    assert spec.relative_position_bias and spec.position_embedding == "none" and spec.layer_scale_init == 0.1
    assert spec.pooling == ("gap" if mean_pooling else "token") and spec.norm_after_pool == mean_pooling
    assert model.class_names == (("cat", "coffee", "other") if labels else None)
    outputs = "logits" if labels else "pooler_output"
    assert_as_transformers(model, processor, lambda pixels: getattr(peer(pixel_values=pixels), outputs))


def test_clip_loads_as_its_vision_tower_with_and_without_the_projection(mirror):
    import transformers

    vision = dict(SMALL, intermediate_size=64, hidden_act="quick_gelu")
    text = dict(hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2)
    whole = upstream_model("CLIPModel", vision_config=vision, text_config=text, projection_dim=24)
    crop = {"height": 48, "width": 48}
    mean, std = [0.481, 0.458, 0.408], [0.269, 0.261, 0.276]
    processor = pil_processor("CLIPImageProcessor")(size={"shortest_edge": 48}, crop_size=crop, resample=BICUBIC,
                                                    image_mean=mean, image_std=std)  # fmt: skip
    # The whole CLIPModel: its image embeddings (the projection as a head without a bias).
    model = keras_vit.create_model(serve(mirror, "openai/clip-small-test", whole, processor))
    assert model.spec.pre_norm and model.spec.mlp_activation == "quick_gelu" and model.output_shape == (None, 24)
    assert_as_transformers(model, processor, lambda pixels: whole.get_image_features(pixel_values=pixels))
    # Its vision tower alone: the pooled output, the class token after the final norm.
    tower = transformers.CLIPVisionModel(transformers.CLIPVisionConfig(**vision)).eval()
    tower.load_state_dict({k.removeprefix("vision_model."): v for k, v in whole.state_dict().items()
                           if k.startswith("vision_model.")})  # fmt: skip
    backbone = keras_vit.load_model(serve(mirror, "openai/clip-tower-test", tower, processor))
    assert not backbone.spec.include_top
    assert_as_transformers(backbone, processor, lambda pixels: tower(pixel_values=pixels).pooler_output, False)


def test_siglip_loads_as_its_vision_tower_with_attention_pooling(mirror):
    text = dict(hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2)
    whole = upstream_model("SiglipModel", vision_config=dict(SMALL, intermediate_size=64), text_config=text)
    half = [0.5, 0.5, 0.5]
    processor = pil_processor("SiglipImageProcessor")(size={"height": 48, "width": 48}, resample=BICUBIC,
                                                      image_mean=half, image_std=half)  # fmt: skip
    model = keras_vit.load_model(serve(mirror, "google/siglip-small-test", whole, processor), tower="image")
    assert model.spec.pooling == "map" and not model.spec.class_token and model.spec.gelu_approximate
    assert_as_transformers(model, processor, lambda pixels: whole.get_image_features(pixel_values=pixels))


def test_the_mae_msn_and_ijepa_encoders_load_at_transformers_outputs(mirror):
    def load(repo, peer):
        return keras_vit.load_model(serve(mirror, repo, peer, vit_processor()))

    # MAE's pre-training model (its decoder left unread), masking nothing: the class token is
    # the same whatever order the patches are shuffled in.
    mae = upstream_model("ViTMAEForPreTraining", **SMALL, mask_ratio=0.0)
    model = load("facebook/vit-mae-small-test", mae)
    assert_as_transformers(model, vit_processor(), lambda pixels: mae.vit(pixel_values=pixels).last_hidden_state[:, 0])
    # MSN's classifier, on the class token.
    msn = upstream_model("ViTMSNForImageClassification", **SMALL, id2label={0: "a", 1: "b"})
    model = load("facebook/vit-msn-small-test", msn)
    assert model.class_names == ("a", "b")
    assert_as_transformers(model, vit_processor(), lambda pixels: msn(pixel_values=pixels).logits, False)
    # I-JEPA: no class token; the patch tokens' mean.
    ijepa = upstream_model("IJepaModel", **SMALL)
    model = load("facebook/ijepa-small-test", ijepa)
    assert not model.spec.class_token and model.spec.pooling == "gap"
    upstream = lambda pixels: ijepa(pixel_values=pixels).last_hidden_state.mean(1)
    assert_as_transformers(model, vit_processor(), upstream, False)


def test_finetune_from_a_dinov3_repository_classifies_the_folders_classes_by_name(mirror, tmp_path, capsys):
    from keras_vit.commands import classify, finetune

    write_photos(tmp_path / "photos", mirrored=True)  # classes a and b, eight photos each
    peer = upstream_model("DINOv3ViTModel", **SMALL, num_register_tokens=4)
    name = serve_dinov3(mirror, "facebook/dinov3-vits16-finetune-test", peer)
    result = finetune.main(["--init-from", name, "--dataset", str(tmp_path / "photos"), "--epochs", "1",
                            "--batch-size", "4", "--warmup-steps", "1", "--progress", "0",
                            "--output-dir", str(tmp_path / "runs")])  # fmt: skip
    model = result.model
    assert model.spec.rope.form == "dinov3" and model.class_names == ("a", "b") and model.output_shape == (None, 2)
    # The repository's backbone under the new head: its register tokens as transformers has them.
    saved = os.path.join(result.run_dir, "model.keras")
    registers = {v.path: to_numpy(v) for v in keras_vit.load_model(saved).weights}["register_tokens/tokens"]
    np.testing.assert_array_equal(registers, peer.embeddings.register_tokens.detach().numpy())
    capsys.readouterr()
    classify.main([saved, str(tmp_path / "photos" / "a"), "--top", "1"])
    # Lines "  1.  51.20%  a (0)": rank, probability, the folder's class name, its index.
    named = [line.split()[-2] for line in capsys.readouterr().out.splitlines() if line.strip()[:1].isdigit()]
    assert len(named) == 8 and set(named) <= {"a", "b"}, named
