"""keras-hub's columns of the checkpoint table: where each keras-vit weight lives in a
keras-hub preset folder (its ``model.weights.h5``'s variable paths), for its ``ViTBackbone``
(``KERAS_HUB_VIT``), ``DINOV2Backbone`` and ``DINOV3Backbone``, ``SigLIPBackbone`` and
``CLIPBackbone`` vision towers. The rows are as ``keras_vit.checkpoints.table``'s: a regex
over keras-vit's path, then the cell (``keras_vit.checkpoints.cells``); ``layouts.py`` names
the layouts that read them.
"""

from keras_vit.checkpoints.cells import (
    BLOCK,
    TEXT_BLOCK,
    Shifted,
    batched,
    concat,
    heads_in,
    heads_out,
    joined,
    same,
    zero_bias,
)

_B = BLOCK
_QKV = ("query", "key", "value")  # Keras MultiHeadAttention's projections
# What a two-tower backbone's text encoder's weights start with in keras_hub_config.read_weights
# (its paths may be the vision encoder's own).
TEXT_PREFIX = "text/"

# fmt: off
# keras-hub's ViTBackbone and ViTImageClassifier (a preset folder's variables, by path): Keras'
# MultiHeadAttention kernels split per head (as the original .npz), the blocks counted from 1.
_KH = "vit_encoder/transformer_block_{0}/"
KERAS_HUB_VIT = [
    (r"patch_embedding/(kernel|bias)", same("vit_patching_and_embedding/patch_embedding/{0}")),
    (r"class_token/token", same("vit_patching_and_embedding/class_token")),
    (r"position_embedding/embedding", batched("vit_patching_and_embedding/position_embedding/embeddings")),
    (_B + r"norm([12])/(gamma|beta)", Shifted(same(_KH + "ln_{1}/{2}"), count=1)),
    (_B + r"attention/qkv/kernel", Shifted(heads_in(*(_KH + f"mha/{n}/kernel" for n in _QKV)), count=1)),
    (_B + r"attention/qkv/bias", Shifted(concat(*(_KH + f"mha/{n}/bias" for n in _QKV)), count=1)),
    (_B + r"attention/out/kernel", Shifted(heads_out(_KH + "mha/attention_output/kernel"), count=1)),
    (_B + r"attention/out/bias", Shifted(same(_KH + "mha/attention_output/bias"), count=1)),
    (_B + r"mlp/fc([12])/(kernel|bias)", Shifted(same(_KH + "mlp/dense_{1}/{2}"), count=1)),
    (r"encoder_norm/(gamma|beta)", same("vit_encoder/ln/{0}")),
    (r"pre_logits/(kernel|bias)", same("pre_logits/{0}")),
    (r"head/(kernel|bias)", same("predictions/{0}")),
]

# keras-hub's DINOV2Backbone: the blocks counted from 0, Keras' MultiHeadAttention kernels, the
# position table as keras-hub interpolated it to the backbone's image size.
_KD = "encoder/layers_{0}/"
_KD_BLOCKS = [  # what DINOv2's and DINOv3's blocks share
    (_B + r"norm([12])/(gamma|beta)", same(_KD + "norm{1}/{2}")),
    (_B + r"layer_scale([12])/gamma", same(_KD + "layer_scale{1}/lambda1")),
]
_KD_EMBEDDINGS = [
    (r"patch_embedding/(kernel|bias)", same("embeddings/patch_embeddings/projection/{0}")),
    (r"class_token/token", same("embeddings/cls_token")),
    (r"register_tokens/tokens", same("embeddings/register_tokens")),
    (r"encoder_norm/(gamma|beta)", same("layernorm/{0}")),
]
KERAS_HUB_DINOV2 = [
    *_KD_EMBEDDINGS,
    *_KD_BLOCKS,
    (r"position_embedding/embedding", same("embeddings/interpolated_position_embeddings")),
    (_B + r"attention/qkv/kernel", heads_in(*(_KD + f"attention/attention/{n}/kernel" for n in _QKV))),
    (_B + r"attention/qkv/bias", concat(*(_KD + f"attention/attention/{n}/bias" for n in _QKV))),
    (_B + r"attention/out/kernel", heads_out(_KD + "attention/attention/attention_output/kernel")),
    (_B + r"attention/out/bias", same(_KD + "attention/attention/attention_output/bias")),
    (_B + r"mlp/fc([12])/(kernel|bias)", same(_KD + "mlp/fc{1}/{2}")),
]
# keras-hub's DINOV3Backbone: Dense q/k/v (the layout's prepare fills a missing bias with
# zeros, and names the MLP's projections fc1, gate then value, and fc2).
KERAS_HUB_DINOV3 = [
    *_KD_EMBEDDINGS,
    *_KD_BLOCKS,
    (_B + r"attention/qkv/kernel", joined(*(_KD + f"attention/{n}_proj/kernel" for n in "qkv"))),
    (_B + r"attention/qkv/bias", concat(*(_KD + f"attention/{n}_proj/bias" for n in "qkv"))),
    (_B + r"attention/out/(kernel|bias)", same(_KD + "attention/o_proj/{1}")),
    (_B + r"mlp/(fc[12])/(kernel|bias)", same(_KD + "mlp/{1}/{2}")),
]

# keras-hub's SigLIP and CLIP vision towers (SigLIPVisionEncoder, CLIPVisionEncoder, alone or in
# their backbones; read_weights takes the encoder's name off its paths): Keras'
# MultiHeadAttention kernels, the blocks counted from 0.
_KV = "encoder_block_{0}/"


def _keras_hub_attention(attention, block=_B):
    """A block's Keras ``MultiHeadAttention`` at ``attention`` (a path prefix with ``{0}``);
    ``block``: the keras-vit block's path (a text tower's is ``TEXT_BLOCK``)."""
    return [
        (block + r"attention/qkv/kernel", heads_in(*(attention + f"{n}/kernel" for n in _QKV))),
        (block + r"attention/qkv/bias", concat(*(attention + f"{n}/bias" for n in _QKV))),
        (block + r"attention/out/kernel", heads_out(attention + "attention_output/kernel")),
        (block + r"attention/out/bias", same(attention + "attention_output/bias")),
    ]


_KP = "head/attention/"  # SigLIP's attention pooling: its probe is the query, the tokens the keys and values
KERAS_HUB_SIGLIP = [
    (r"patch_embedding/(kernel|bias)", same("embedding/patch_embedding/{0}")),
    (r"position_embedding/embedding", batched("embedding/position_embedding/embeddings")),
    (_B + r"norm([12])/(gamma|beta)", same(_KV + "layer_norm{1}/{2}")),
    *_keras_hub_attention(_KV + "self_attn/"),
    (_B + r"mlp/(fc[12])/(kernel|bias)", same(_KV + "mlp/{1}/{2}")),
    (r"encoder_norm/(gamma|beta)", same("post_layer_norm/{0}")),
    (r"pooling/latent", same("head/probe")),  # an unnamed weight, named by the layout's prepare
    (r"pooling/query/kernel", heads_in(_KP + "query/kernel")),
    (r"pooling/query/bias", concat(_KP + "query/bias")),
    (r"pooling/key_value/kernel", heads_in(_KP + "key/kernel", _KP + "value/kernel")),
    (r"pooling/key_value/bias", concat(_KP + "key/bias", _KP + "value/bias")),
    (r"pooling/out/kernel", heads_out(_KP + "attention_output/kernel")),
    (r"pooling/out/bias", same(_KP + "attention_output/bias")),
    (r"pooling/norm/(gamma|beta)", same("head/layernorm/{0}")),
    (r"pooling/mlp/(fc[12])/(kernel|bias)", same("head/mlp/{0}/{1}")),
]
KERAS_HUB_CLIP = [
    (r"patch_embedding/kernel", same("embedding/patch_embedding/kernel")),
    (r"class_token/token", batched("embedding/class_embedding")),
    (r"position_embedding/embedding", batched("embedding/position_embedding/embeddings")),
    (r"pre_norm/(gamma|beta)", same("pre_layer_norm/{0}")),
    (_B + r"norm([12])/(gamma|beta)", same(_KV + "layer_norm_{1}/{2}")),
    *_keras_hub_attention(_KV + "attention/"),
    (_B + r"mlp/fc([12])/(kernel|bias)", same(_KV + "dense_{1}/{2}")),
    (r"encoder_norm/(gamma|beta)", same("layer_norm/{0}")),
    # The CLIPBackbone's projection (a Dense without a bias, its kernel (in, out)) as the head.
    (r"head/kernel", same("vision_projection/kernel")),
    (r"head/bias", zero_bias("vision_projection/kernel", axis=-1)),
]

# keras-hub's CLIPTextEncoder and SigLIPTextEncoder in their backbones (keras_hub_config.read_weights
# puts their weights under TEXT_PREFIX); the projection is the CLIPBackbone's, SigLIP's the encoder's head.
_T = TEXT_PREFIX
_KT = _T + "encoder_block_{0}/"
_KH_TEXT_EMBEDDING = [
    (r"text_embedding/token_embedding", same(_T + "embedding/token_embedding/embeddings")),
    (r"text_embedding/position_embedding", same(_T + "embedding/position_embedding/embeddings")),
]
KERAS_HUB_CLIP_TEXT = [
    *_KH_TEXT_EMBEDDING,
    (TEXT_BLOCK + r"norm([12])/(gamma|beta)", same(_KT + "layer_norm_{1}/{2}")),
    *_keras_hub_attention(_KT + "attention/", TEXT_BLOCK),
    (TEXT_BLOCK + r"mlp/fc([12])/(kernel|bias)", same(_KT + "dense_{1}/{2}")),
    (r"text_norm/(gamma|beta)", same(_T + "layer_norm/{0}")),
    (r"text_projection/kernel", same("text_projection/kernel")),
]
KERAS_HUB_SIGLIP_TEXT = [
    *_KH_TEXT_EMBEDDING,
    (TEXT_BLOCK + r"norm([12])/(gamma|beta)", same(_KT + "layer_norm{1}/{2}")),
    *_keras_hub_attention(_KT + "self_attn/", TEXT_BLOCK),
    (TEXT_BLOCK + r"mlp/(fc[12])/(kernel|bias)", same(_KT + "mlp/{1}/{2}")),
    (r"text_norm/(gamma|beta)", same(_T + "post_layer_norm/{0}")),
    (r"text_projection/(kernel|bias)", same(_T + "head/{0}")),
]
# fmt: on
