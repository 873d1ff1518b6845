"""Where every keras-vit weight lives in each upstream checkpoint layout: the tables.

One table, ``VIT``, has a row per Keras weight (a regex over its variable path) and a
column per layout; each cell is a source (``keras_vit.checkpoints.cells``) that names the
upstream key(s) (``{0}`` is the block index from the regex) and how to turn them into the
Keras shape. The hybrids'
ResNet adds a few rows per layout. What else a layout means (how its files are
recognised, how its peer resamples, the numerics it was trained with) is its record in
``layouts.py``. The columns:

- ``"original"``: google-research/vision_transformer ``.npz`` (flax names, HWIO kernels,
  attention kernels split per head; hybrids add the BiT ResNet's ``conv_root``,
  ``gn_root`` and ``block{i}/unit{j}/...`` at the top level, counted from 1).
- ``"timm"``: timm ``VisionTransformer`` state dicts (torch ``(out, in)`` Linear
  weights, OIHW convs, fused ``qkv``; hybrids keep the ResNet under
  ``patch_embed.backbone.``, its stages and blocks numbered from 0).
- ``"hf"``: HF transformers ``ViTModel`` / ``ViTForImageClassification`` files as the hub
  has them (``vit.`` prefix optional), and DeiT's (``deit.``; its teacher model's two heads);
  ``"hf_beit"``: BEiT's and data2vec-vision's, the same names plus LayerScale (``HF_BEIT``).
- ``"hf_dinov2"``, ``"hf_dinov2_registers"``: HF transformers ``Dinov2Model`` and
  ``Dinov2WithRegistersModel`` files (``HF_DINOV2``, rows of their own); ``"hf_dinov3"``:
  its ``DINOv3ViTModel`` (``HF_DINOV3``; rotary embeddings, no position table); ``"hf_clip"``:
  its CLIP vision tower (``HF_CLIP``); ``"hf_siglip"``: its SigLIP vision tower (``HF_SIGLIP``).
- ``"open_clip"``: open_clip's own ViT in its ``CLIP`` files, rows of their own in
  ``keras_vit.checkpoints.open_clip_table`` (its timm image towers are the ``"timm"``
  column's keys under ``visual.trunk.``).
- ``"keras_hub_vit"`` and keras-hub's DINOv2, DINOv3, SigLIP and CLIP: a keras-hub preset
  folder's variable paths, rows of their own in ``keras_vit.checkpoints.keras_hub_table``.
- ``"keras"``: keras-vit's own variable paths (a ``.keras`` file), identity.
"""

from keras_vit.checkpoints.cells import (
    BLOCK,
    TEXT_BLOCK,
    Shifted,
    batched,
    concat,
    conv,
    conv_rows,
    heads_in,
    heads_out,
    in_projection,
    linear,
    linear_rows,
    norm_rows,
    renamed,
    same,
    zero_bias,
)

# --- the tables ------------------------------------------------------------------------

_B = BLOCK
# The hybrids' ResNet (keras_vit.layers.resnet): stage {0} and unit {1}, 0-based.
_U = r"resnet/stage_(\d+)/unit_(\d+)/"

_ENC = "Transformer/encoderblock_{0}/"  # original
_MHA = _ENC + "MultiHeadDotProductAttention_1/"
_QKV = ("query", "key", "value")
_HF = "encoder.layer.{0}."
_HF_ATTN = _HF + "attention."


def _named_blocks(block, norms, qkv, out, layer_scale=None, keras_block=_B):
    """The block rows of a layout that names each norm and projection apart (transformers'
    DINOv2, DINOv3, CLIP and SigLIP): ``block`` the block's key prefix (``{0}`` its index),
    ``norms`` the two norms' name (``{1}`` their number), ``qkv`` the query, key and value
    projections' three names, ``out`` the attention's output projection, ``layer_scale`` its
    LayerScale's name (``{1}`` the branch), if any. The MLP's two layers are ``mlp.fc1`` and
    ``mlp.fc2``. ``keras_block``: the Keras block prefix (a text tower's is ``TEXT_BLOCK``)."""
    rows = [
        *norm_rows(keras_block + r"norm([12])", block + norms),
        (keras_block + r"attention/qkv/kernel", linear(*(block + name + ".weight" for name in qkv))),
        (keras_block + r"attention/qkv/bias", concat(*(block + name + ".bias" for name in qkv))),
        *linear_rows(keras_block + r"attention/out", block + out),
        *linear_rows(keras_block + r"mlp/(fc[12])", block + "mlp.{1}"),
    ]
    if layer_scale:
        rows.append((keras_block + r"layer_scale([12])/gamma", same(block + layer_scale)))
    return rows


# One row per weight of the plain ViT, one column per layout (None: the layout has none).
# fmt: off
VIT = [
    # Keras path
    #   original .npz
    #   timm
    #   HF transformers
    (r"patch_embedding/kernel",
        same("embedding/kernel"),
        conv("patch_embed.proj.weight"),
        conv("embeddings.patch_embeddings.projection.weight")),
    (r"patch_embedding/bias",
        same("embedding/bias"), same("patch_embed.proj.bias"), same("embeddings.patch_embeddings.projection.bias")),
    (r"class_token/token", same("cls"), same("cls_token"), same("embeddings.cls_token")),
    (r"distillation_token/token", None, same("dist_token"), same("embeddings.distillation_token")),
    # The descendants' options (distillation and registers, a norm before the blocks,
    # LayerScale): timm's.
    (r"register_tokens/tokens", None, same("reg_token"), None),
    (r"pre_norm/gamma", None, same("norm_pre.weight"), None),
    (r"pre_norm/beta", None, same("norm_pre.bias"), None),
    (r"patch_norm/gamma", None, same("patch_embed.norm.weight"), None),
    (r"patch_norm/beta", None, same("patch_embed.norm.bias"), None),
    (_B + r"layer_scale([12])/gamma", None, same("blocks.{0}.ls{1}.gamma"), None),
    # Norms inside the attention (before its projection) and the MLP (before fc2).
    (_B + r"attention/norm/(gamma|scale)", None, same("blocks.{0}.attn.norm.weight"), None),
    (_B + r"attention/norm/beta", None, same("blocks.{0}.attn.norm.bias"), None),
    (_B + r"mlp/norm/(gamma|scale)", None, same("blocks.{0}.mlp.norm.weight"), None),
    # Differential attention's weights (timm's DiffAttention).
    (_B + r"attention/(lambda_[qk][12])", None, same("blocks.{0}.attn.{1}"), None),
    (_B + r"attention/sub_norm/scale", None, same("blocks.{0}.attn.sub_norm.weight"), None),
    # Norms on each head's queries and keys (qk_norm).
    (_B + r"attention/([qk])_norm/(gamma|scale)", None, same("blocks.{0}.attn.{1}_norm.weight"), None),
    (_B + r"attention/([qk])_norm/beta", None, same("blocks.{0}.attn.{1}_norm.bias"), None),
    (_B + r"mlp/norm/beta", None, same("blocks.{0}.mlp.norm.bias"), None),
    # RMSNorm (norm_type="rmsnorm") has a scale alone.
    (r"pre_norm/scale", None, same("norm_pre.weight"), None),
    (r"patch_norm/scale", None, same("patch_embed.norm.weight"), None),
    (r"encoder_norm/scale", None, same("norm.weight"), None),
    (_B + r"norm([12])/scale", None, same("blocks.{0}.norm{1}.weight"), None),
    # RoPE-Mixed's learned frequencies (timm's RotaryEmbeddingMixed).
    (r"rotary_embedding/frequencies", None, same("rope.freqs"), None),
    (r"position_embedding/embedding",
        same("Transformer/posembed_input/pos_embedding"), same("pos_embed"), same("embeddings.position_embeddings")),
    (_B + r"norm1/gamma",
        same(_ENC + "LayerNorm_0/scale"), same("blocks.{0}.norm1.weight"), same(_HF + "layernorm_before.weight")),
    (_B + r"norm1/beta",
        same(_ENC + "LayerNorm_0/bias"), same("blocks.{0}.norm1.bias"), same(_HF + "layernorm_before.bias")),
    (_B + r"attention/qkv/kernel",
        heads_in(*(_MHA + f"{n}/kernel" for n in _QKV)),
        linear("blocks.{0}.attn.qkv.weight"),
        linear(*(_HF_ATTN + f"attention.{n}.weight" for n in _QKV))),
    (_B + r"attention/qkv/bias",
        concat(*(_MHA + f"{n}/bias" for n in _QKV)),
        same("blocks.{0}.attn.qkv.bias"),
        concat(*(_HF_ATTN + f"attention.{n}.bias" for n in _QKV))),
    # BEiT's relative position bias (timm's Beit, transformers' BeitModel).
    (_B + r"attention/relative_position_bias",
        None, same("blocks.{0}.attn.relative_position_bias_table"),
        same(_HF_ATTN + "attention.relative_position_bias.relative_position_bias_table")),
    (_B + r"attention/out/kernel",
        heads_out(_MHA + "out/kernel"), linear("blocks.{0}.attn.proj.weight"),
        linear(_HF_ATTN + "output.dense.weight")),
    (_B + r"attention/out/bias",
        same(_MHA + "out/bias"), same("blocks.{0}.attn.proj.bias"), same(_HF_ATTN + "output.dense.bias")),
    (_B + r"norm2/gamma",
        same(_ENC + "LayerNorm_2/scale"), same("blocks.{0}.norm2.weight"), same(_HF + "layernorm_after.weight")),
    (_B + r"norm2/beta",
        same(_ENC + "LayerNorm_2/bias"), same("blocks.{0}.norm2.bias"), same(_HF + "layernorm_after.bias")),
    (_B + r"mlp/fc1/kernel",
        same(_ENC + "MlpBlock_3/Dense_0/kernel"), linear("blocks.{0}.mlp.fc1.weight"),
        linear(_HF + "intermediate.dense.weight")),
    (_B + r"mlp/fc1/bias",
        same(_ENC + "MlpBlock_3/Dense_0/bias"), same("blocks.{0}.mlp.fc1.bias"), same(_HF + "intermediate.dense.bias")),
    (_B + r"mlp/fc2/kernel",
        same(_ENC + "MlpBlock_3/Dense_1/kernel"), linear("blocks.{0}.mlp.fc2.weight"),
        linear(_HF + "output.dense.weight")),
    (_B + r"mlp/fc2/bias",
        same(_ENC + "MlpBlock_3/Dense_1/bias"), same("blocks.{0}.mlp.fc2.bias"), same(_HF + "output.dense.bias")),
    # (timm names the final norm `fc_norm` when it follows the pooling; the loader
    # renames it after checking that the model pools the same way.)
    (r"encoder_norm/gamma", same("Transformer/encoder_norm/scale"), same("norm.weight"), same("layernorm.weight")),
    (r"encoder_norm/beta", same("Transformer/encoder_norm/bias"), same("norm.bias"), same("layernorm.bias")),
    # Attention pooling (pooling="map"): timm's AttentionPoolLatent.
    (r"pooling/latent", None, same("attn_pool.latent"), None),
    (r"pooling/query/kernel", None, linear("attn_pool.q.weight"), None),
    (r"pooling/query/bias", None, same("attn_pool.q.bias"), None),
    (r"pooling/key_value/kernel", None, linear("attn_pool.kv.weight"), None),
    (r"pooling/key_value/bias", None, same("attn_pool.kv.bias"), None),
    (r"pooling/out/kernel", None, linear("attn_pool.proj.weight"), None),
    (r"pooling/out/bias", None, same("attn_pool.proj.bias"), None),
    (r"pooling/norm/gamma", None, same("attn_pool.norm.weight"), None),
    (r"pooling/norm/beta", None, same("attn_pool.norm.bias"), None),
    (r"pooling/mlp/(fc[12])/kernel", None, linear("attn_pool.mlp.{0}.weight"), None),
    (r"pooling/mlp/(fc[12])/bias", None, same("attn_pool.mlp.{0}.bias"), None),
    # The paper's pre-logits layer; timm dropped it; HF's ViTModel "pooler" is one.
    (r"pre_logits/kernel", same("pre_logits/kernel"), None, linear("pooler.dense.weight")),
    (r"pre_logits/bias", same("pre_logits/bias"), None, same("pooler.dense.bias")),
    (r"head/kernel", same("head/kernel"), linear("head.weight"), linear("classifier.weight")),
    (r"head/bias", same("head/bias"), same("head.bias"), same("classifier.bias")),
    # DeiT's second head (HF's DeiTForImageClassificationWithTeacher: distillation_classifier).
    (r"head_dist/kernel", None, linear("head_dist.weight"), linear("distillation_classifier.weight")),
    (r"head_dist/bias", None, same("head_dist.bias"), same("distillation_classifier.bias")),
]


# A masked autoencoder's decoder (keras_vit.models.masked_autoencoder) beside the encoder:
# in the timm column the MAE authors' own files (their models are timm's blocks), in the HF
# column transformers' ViTMAEForPreTraining. Its blocks are the encoder's rows, renamed.
_DECODER_BLOCKS = {1: ("blocks.{0}.", "decoder_blocks.{0}."), 2: ("encoder.layer.{0}.", "decoder.decoder_layers.{0}.")}
_DECODER_BLOCK_WEIGHTS = ("norm1/", "norm2/", "attention/qkv/", "attention/out/", "mlp/fc1/", "mlp/fc2/")


def _decoder_rows():
    rows = []
    for pattern, _, *columns in VIT:
        if pattern.startswith(_B) and pattern[len(_B) :].startswith(_DECODER_BLOCK_WEIGHTS):
            sources = [renamed(source, *_DECODER_BLOCKS[i]) for i, source in enumerate(columns, 1)]
            rows.append(("decoder_" + pattern, None, *sources))
    return rows


VIT += [
    (r"decoder_embed/kernel", None, linear("decoder_embed.weight"), linear("decoder.decoder_embed.weight")),
    (r"decoder_embed/bias", None, same("decoder_embed.bias"), same("decoder.decoder_embed.bias")),
    (r"mask_token/token", None, same("mask_token"), same("decoder.mask_token")),
    (r"decoder_position_embedding/embedding", None, same("decoder_pos_embed"), same("decoder.decoder_pos_embed")),
    *_decoder_rows(),
    (r"decoder_norm/gamma", None, same("decoder_norm.weight"), same("decoder.decoder_norm.weight")),
    (r"decoder_norm/beta", None, same("decoder_norm.bias"), same("decoder.decoder_norm.bias")),
    (r"decoder_pred/kernel", None, linear("decoder_pred.weight"), linear("decoder.decoder_pred.weight")),
    (r"decoder_pred/bias", None, same("decoder_pred.bias"), same("decoder.decoder_pred.bias")),
]

# HF transformers' DINOv2 (Dinov2Model): its own names for the blocks' norms, MLP and LayerScale.
_D = "encoder.layer.{0}."
HF_DINOV2 = [
    *conv_rows(r"patch_embedding", "embeddings.patch_embeddings.projection"),
    (r"class_token/token", same("embeddings.cls_token")),
    (r"position_embedding/embedding", same("embeddings.position_embeddings")),
    *_named_blocks(_D, "norm{1}", [f"attention.attention.{n}" for n in _QKV], "attention.output.dense",
                   layer_scale="layer_scale{1}.lambda1"),  # fmt: skip
    *norm_rows(r"encoder_norm", "layernorm"),
    # Dinov2ForImageClassification's linear head, on the class token beside the patches' mean.
    *linear_rows(r"head", "classifier"),
]

# HF transformers' BEiT and data2vec-vision beyond the ViT's names: LayerScale.
HF_BEIT = [(_B + r"layer_scale([12])/gamma", same(_HF + "lambda_{1}"))]

# HF transformers' DINOv3 (DINOv3ViTModel): no position table (rotary embeddings), separate
# q/k/v (the layout's prepare fills the biases it leaves out with zeros and names the MLP's
# projections fc1 and fc2, a gated one's gate and value in one fc1).
_V = "layer.{0}."  # as the files name them (the module nests them under model.)
HF_DINOV3 = [
    *conv_rows(r"patch_embedding", "embeddings.patch_embeddings"),
    (r"class_token/token", same("embeddings.cls_token")),
    (r"register_tokens/tokens", same("embeddings.register_tokens")),
    *_named_blocks(_V, "norm{1}", [f"attention.{n}_proj" for n in "qkv"], "attention.o_proj",
                   layer_scale="layer_scale{1}.lambda1"),  # fmt: skip
    *norm_rows(r"encoder_norm", "norm"),
]

# HF transformers' CLIP vision tower (CLIPVisionModel[WithProjection], CLIPModel's
# vision_model): a norm before the blocks, separate q/k/v, the projection without a bias.
_C = "encoder.layers.{0}."
# SigLIP's blocks are named as CLIP's.
_CLIP_BLOCKS = _named_blocks(_C, "layer_norm{1}", [f"self_attn.{n}_proj" for n in "qkv"], "self_attn.out_proj")
HF_CLIP = [
    (r"patch_embedding/kernel", conv("embeddings.patch_embedding.weight")),
    (r"class_token/token", batched("embeddings.class_embedding")),
    (r"position_embedding/embedding", batched("embeddings.position_embedding.weight")),
    *norm_rows(r"pre_norm", "pre_layrnorm"),
    *_CLIP_BLOCKS,
    *norm_rows(r"encoder_norm", "post_layernorm"),
    (r"head/kernel", linear("visual_projection.weight")),
    (r"head/bias", zero_bias("visual_projection.weight")),
]

# HF transformers' text towers as their pairs (CLIPModel, SiglipModel) and CLIP's
# CLIPTextModelWithProjection write them: the blocks named as the vision towers'; CLIP's
# projection without a bias beside text_model, SigLIP's head with one inside it.
_T = "text_model."
_TEXT_TOWER = [
    (r"text_embedding/token_embedding", same(_T + "embeddings.token_embedding.weight")),
    (r"text_embedding/position_embedding", same(_T + "embeddings.position_embedding.weight")),
    *_named_blocks(
        _T + _C, "layer_norm{1}", [f"self_attn.{n}_proj" for n in "qkv"], "self_attn.out_proj", keras_block=TEXT_BLOCK
    ),
    *norm_rows(r"text_norm", _T + "final_layer_norm"),
]
HF_CLIP_TEXT = [*_TEXT_TOWER, (r"text_projection/kernel", linear("text_projection.weight"))]
HF_SIGLIP_TEXT = [*_TEXT_TOWER, *linear_rows(r"text_projection", _T + "head")]

# HF transformers' SigLIP vision tower (SiglipVisionModel, SiglipModel's vision_model): no
# class token, attention pooling (its head: a probe, torch's MultiheadAttention, a norm, an MLP).
_H = "head."
HF_SIGLIP = [
    *conv_rows(r"patch_embedding", "embeddings.patch_embedding"),
    (r"position_embedding/embedding", batched("embeddings.position_embedding.weight")),
    *_CLIP_BLOCKS,
    *norm_rows(r"encoder_norm", "post_layernorm"),
    (r"pooling/latent", same(_H + "probe")),
    (r"pooling/query/kernel", in_projection(_H + "attention.in_proj_weight", "query")),
    (r"pooling/query/bias", in_projection(_H + "attention.in_proj_bias", "query")),
    (r"pooling/key_value/kernel", in_projection(_H + "attention.in_proj_weight", "key_value")),
    (r"pooling/key_value/bias", in_projection(_H + "attention.in_proj_bias", "key_value")),
    *linear_rows(r"pooling/out", _H + "attention.out_proj"),
    *norm_rows(r"pooling/norm", _H + "layernorm"),
    *linear_rows(r"pooling/mlp/(fc[12])", _H + "mlp.{0}"),
]

# The hybrids' BiT ResNet: the npz keeps the ResNet's own names (GroupNorm scale/bias =
# our gamma/beta), numbered from 1; timm nests it under the patch embedding, from 0.
RESNET_ORIGINAL = [
    (r"resnet/conv_root/kernel", same("conv_root/kernel")),
    (r"resnet/gn_root/gamma", same("gn_root/scale")),
    (r"resnet/gn_root/beta", same("gn_root/bias")),
    (_U + r"(conv[123]|conv_proj)/kernel", Shifted(same("block{0}/unit{1}/{2}/kernel"))),
    (_U + r"(gn[123]|gn_proj)/gamma", Shifted(same("block{0}/unit{1}/{2}/scale"))),
    (_U + r"(gn[123]|gn_proj)/beta", Shifted(same("block{0}/unit{1}/{2}/bias"))),
]
_R = "patch_embed.backbone."  # timm's hybrid ResNetV2
_RU = _R + "stages.{0}.blocks.{1}."
RESNET_TIMM = [
    (r"resnet/conv_root/kernel", conv(_R + "stem.conv.weight")),
    *norm_rows(r"resnet/gn_root", _R + "stem.norm"),
    (_U + r"conv([123])/kernel", conv(_RU + "conv{2}.weight")),
    *norm_rows(_U + r"gn([123])", _RU + "norm{2}"),
    (_U + r"conv_proj/kernel", conv(_RU + "downsample.conv.weight")),
    *norm_rows(_U + r"gn_proj", _RU + "downsample.norm"),
]
# fmt: on
