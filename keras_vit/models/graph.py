"""The ViT's functional graph from a spec: its layers by role, and how they connect.

``make_layers`` builds each layer the spec asks for, named for its role (the names are the
checkpoints' paths); ``embed``, ``encode`` and ``forward`` wire them, for the model and
for the sub-models that read its intermediate tokens.
"""

import dataclasses

import keras
from keras.dtype_policies import DTypePolicyMap

from keras_vit.layers.attention import differential_lambda_init
from keras_vit.layers.attention_pooling import AttentionPooling
from keras_vit.layers.encoder_block import EncoderBlock
from keras_vit.layers.heads import TokenPooling
from keras_vit.layers.initializers import deferrable
from keras_vit.layers.layer_norm import make_norm
from keras_vit.layers.patch_embedding import PatchEmbedding
from keras_vit.layers.resnet import ResNetBackbone
from keras_vit.layers.rotary import RotaryEmbedding
from keras_vit.layers.tokens import ClassToken, DistillationToken, PositionEmbedding, RegisterTokens
from keras_vit.vocabulary import ATTENTION_POOLING, ROPE_FORMS

# The task's own layers (by weight path prefix): a new task's start fresh, and fine-tuning
# trains them beside adapters or a frozen backbone.
TASK_LAYERS = ("head/", "head_dist/", "pre_logits/")


# The layers that compute the logits: in float32 under a mixed policy, for a stable loss.
_CLASSIFIER = ("head", "head_dist", "distillation_mean")


def layer_dtypes(dtype):
    """The model's policy, and a function giving each top-level layer its dtype.

    ``dtype`` is a policy, or (a reloaded quantized model) a ``DTypePolicyMap`` of the
    layers whose policy differs from the model's, by path. The package's composite layers
    take the map itself and look their parts up in it; other layers take their entry.
    Under a mixed policy the head computes in float32, for a stable loss.
    """
    policy = keras.dtype_policies.get(dtype) if dtype is not None else keras.config.dtype_policy()
    saved = policy if isinstance(policy, DTypePolicyMap) else None
    base = saved.default_policy if saved is not None else policy
    mixed = base.compute_dtype != base.variable_dtype

    def dtype_for(name, composite=False):
        if saved is not None and (composite or name in saved):
            return saved if composite else saved[name]
        return keras.dtype_policies.get("float32") if name in _CLASSIFIER and mixed else base

    return base, dtype_for


def make_layers(spec, dtype_for):
    """The model's layers by role (None where the spec has none), each named for its role."""

    def make(name, layer_class, *args, composite=False, **kwargs):
        return deferrable(layer_class(*args, name=name, dtype=dtype_for(name, composite), **kwargs))

    def block(i):
        return make(
            f"block_{i}", EncoderBlock, spec.num_heads, spec.mlp_dim, composite=True, form=block_form(spec),
            attention_options=attention_options(spec, i), mlp_options=mlp_options(spec), dropout_rate=spec.dropout_rate,
            drop_path_rate=spec.drop_path_rate * i / max(spec.depth - 1, 1),  # rising linearly
            norm_type=spec.norm_type, layer_norm_epsilon=spec.layer_norm_epsilon,
            layer_scale_init=spec.layer_scale_init, layer_scale_mlp=spec.layer_scale_mlp, remat=spec.remat,
        )  # fmt: skip

    def norm(name):
        return make(name, make_norm, spec.norm_type, spec.layer_norm_epsilon)

    def head(name):
        initializer = "zeros" if spec.head_zero_init else "glorot_uniform"
        return make(name, keras.layers.Dense, spec.num_classes, spec.classifier_activation,
                    kernel_initializer=initializer)  # fmt: skip

    distilled = spec.distillation_token and spec.distillation_head  # its second head and the means
    return dict(
        stem=make("resnet", ResNetBackbone, **dataclasses.asdict(spec.resnet)) if spec.resnet else None,
        patch_embedding=make(
            "patch_embedding",
            PatchEmbedding,
            spec.hidden_size,
            spec.patch_size,
            spec.embedding_channels,
            flatten=not spec.dynamic_image_size,  # a dynamic model reads the grid from the map
            use_bias=spec.patch_bias,
        ),
        patch_norm=norm("patch_norm") if spec.patch_norm else None,
        patch_flatten=(
            make("patch_flatten", keras.layers.Reshape, (-1, spec.hidden_size)) if spec.dynamic_image_size else None
        ),
        register_tokens=(
            make("register_tokens", RegisterTokens, spec.num_register_tokens) if spec.num_register_tokens else None
        ),
        class_token=make("class_token", ClassToken) if spec.has_class_token else None,
        distillation_token=make("distillation_token", DistillationToken) if spec.distillation_token else None,
        position_embedding=(
            make(
                "position_embedding",
                PositionEmbedding,
                spec.grid_size,
                spec.position_prefix_rows,
                spec.position_embedding,
            )  # fmt: skip
            if spec.position_embedding != "none"
            else None
        ),
        rotary_embedding=(
            make(
                "rotary_embedding",
                RotaryEmbedding,
                spec.grid_size,
                spec.head_dim,
                spec.num_prefix_tokens,
                **dataclasses.asdict(spec.rope),
                depth=spec.depth,
                num_heads=spec.num_heads,
            )
            if spec.rope
            else None
        ),
        embedding_dropout=make("embedding_dropout", keras.layers.Dropout, spec.dropout_rate),
        pre_norm=norm("pre_norm") if spec.pre_norm else None,
        blocks=[block(i) for i in range(spec.depth)],
        encoder_norm=norm("encoder_norm") if spec.final_norm else None,
        pooling=pooling_layer(spec, make),
        pre_logits=(
            make("pre_logits", keras.layers.Dense, spec.representation_size, activation="tanh")
            if spec.representation_size
            else None
        ),
        embedding=make("embedding", keras.layers.Dense, spec.embedding_size) if spec.embedding_size else None,
        embedding_norm=(
            make("embedding_norm", keras.layers.UnitNormalization, axis=-1) if spec.normalize_embedding else None
        ),
        head=head("head") if spec.include_top else None,
        # DeiT's second head, on the distillation token; the model outputs the two heads'
        # mean (the two tokens' without a top), in the head's dtype.
        distillation_pooling=(
            # The token after the class token, or the first where there is none.
            make("distillation_pooling", TokenPooling, "token", spec.num_prefix_tokens, index=int(spec.has_class_token))
            if distilled
            else None
        ),
        head_dist=head("head_dist") if distilled and spec.include_top else None,
        distillation_mean=(
            # The logits' mean computes as the heads do; the features' as the tokens.
            deferrable(
                keras.layers.Average(
                    name="distillation_mean", dtype=dtype_for("distillation_mean" if spec.include_top else "pooling")
                )
            )
            if distilled
            else None
        ),
    )


def block_form(spec):
    """The spec's block form, a name of ``keras_vit.layers.encoder_block.BLOCK_FORMS``."""
    return "parallel" if spec.parallel_blocks else "post_norm" if spec.residual_post_norm else "pre_norm"


def attention_options(spec, index):
    """Block ``index``'s attention: its kind (``ATTENTION_KINDS``) and that kind's options."""
    norm = spec.norm_type
    options = dict(
        attention_dropout_rate=spec.attention_dropout_rate, qkv_bias=spec.qkv_bias, out_bias=spec.proj_bias,
        output_norm=norm if spec.attention_norm else None,
    )  # fmt: skip
    if spec.differential_attention:
        return dict(options, kind="differential", lambda_init=differential_lambda_init(index))
    options.update(
        num_kv_heads=spec.kv_heads_per_block[index], qk_norm=norm if spec.qk_norm else None,
        rope_interleaved=bool(spec.rope) and ROPE_FORMS[spec.rope.form],
    )  # fmt: skip
    if spec.relative_position_bias:
        return dict(options, kind="relative_position", relative_position_grid=spec.grid_size)
    return options


def mlp_options(spec):
    """The blocks' MLP options (``MlpBlock``'s arguments)."""
    return dict(
        gelu_approximate=spec.gelu_approximate, activation=spec.mlp_activation, gated=spec.gated_mlp,
        use_bias=spec.proj_bias, hidden_norm=spec.norm_type if spec.mlp_norm else None,
    )  # fmt: skip


def pooling_layer(spec, make):
    """The layer that pools the tokens to one vector, None for ``pooling=None``."""
    # The tokens it leaves out: the prefix ones, unless it reads them too.
    skipped = 0 if spec.pool_include_prefix else spec.num_prefix_tokens
    if spec.pooling == ATTENTION_POOLING:
        return make(
            "pooling", AttentionPooling, spec.map_num_heads or spec.num_heads, spec.map_mlp_dim or spec.mlp_dim,
            skipped, composite=True,
            layer_norm_epsilon=spec.layer_norm_epsilon, gelu_approximate=spec.gelu_approximate,
            mlp_activation=spec.mlp_activation, qkv_bias=spec.qkv_bias, norm_type=spec.norm_type,
        )  # fmt: skip
    if spec.pooling == "gap":
        return make("pooling", TokenPooling, "gap", skipped)
    return make("pooling", TokenPooling, spec.pooling, spec.num_prefix_tokens) if spec.pooling else None


def block_indices(blocks, depth):
    """Sorted block indices from None (all), a count of last blocks, or indices (negative from the end)."""
    if blocks is None:
        return list(range(depth))
    if isinstance(blocks, int) and not isinstance(blocks, bool):
        if not 1 <= blocks <= depth:
            raise ValueError(f"blocks={blocks}: expected a count of last blocks in 1..{depth} (the model's depth).")
        return list(range(depth - blocks, depth))
    indices = list(blocks)
    bad = [i for i in indices if not isinstance(i, int) or not -depth <= i < depth]
    if not indices or bad:
        raise ValueError(
            f"blocks={blocks!r}: expected block indices in {-depth}..{depth - 1} (the model has {depth} blocks)."
        )
    return sorted({i % depth for i in indices})


def embed(layers, x):
    """Stem output (or images) -> (the token sequence that enters the first block, the
    ``(batch, rows, cols, width)`` patch map of a dynamic-size model, else None).

    The prefix tokens go before the patches as ``[class, distillation, registers...,
    patches...]``; the
    position table is added after them when it has rows for them, else before."""
    patch_map = None
    x = layers["patch_embedding"](x)
    if layers["patch_norm"] is not None:
        x = layers["patch_norm"](x)
    if layers["patch_flatten"] is not None:
        patch_map, x = x, layers["patch_flatten"](x)
    position = layers["position_embedding"]

    def add_position(tokens):
        if position is None:  # no table (a RoPE model)
            return tokens
        return position(tokens) if patch_map is None else position(tokens, patch_map)

    prefix_rows = 0 if position is None else position.num_prefix_tokens
    if not prefix_rows:
        x = add_position(x)
    for name in ("register_tokens", "distillation_token", "class_token"):  # each prepends: the class token ends first
        if layers[name] is not None:
            x = layers[name](x)
    if prefix_rows:
        x = add_position(x)
    x = layers["embedding_dropout"](x)
    if layers["pre_norm"] is not None:
        x = layers["pre_norm"](x)
    return x, patch_map


def rotary_table(layers, tokens, patch_map):
    """The rotary embeddings' table for these tokens (a dynamic model's from its patch
    map), None for a model without them; each block takes it as ``rope=``."""
    rotary = layers["rotary_embedding"]
    if rotary is None:
        return None
    return rotary(tokens) if patch_map is None else rotary(tokens, patch_map)


def call_block(block, x, rope, index, **kwargs):
    """Encoder block ``index`` on the tokens, with the rotary table where the model has one
    (its own, where each block has one: RoPE-Mixed's)."""
    if rope is None:
        return block(x, **kwargs)
    return block(x, rope=rope[index] if len(rope.shape) == 5 else rope, **kwargs)


def encode(layers, images, return_attention_scores=False):
    """Images -> final tokens before the encoder norm (and the attention weights)."""
    x = images if layers["stem"] is None else layers["stem"](images)
    x, patch_map = embed(layers, x)
    rope = rotary_table(layers, x, patch_map)
    attention = []
    for i, block in enumerate(layers["blocks"]):
        if return_attention_scores:
            x, weights = call_block(block, x, rope, i, return_attention_scores=True)
            attention.append(weights)
        else:
            x = call_block(block, x, rope, i)
    return x, attention


def final_norm(layers, x):
    """The final LayerNorm, where the model has one."""
    return x if layers["encoder_norm"] is None else layers["encoder_norm"](x)


def forward(layers, images, norm_after_pool):
    x, _ = encode(layers, images)
    if layers["pooling"] is None:
        return final_norm(layers, x)
    if not norm_after_pool:
        x = final_norm(layers, x)
    tokens, x = x, layers["pooling"](x)
    if norm_after_pool:
        x = final_norm(layers, x)
    for role in ("pre_logits", "embedding", "embedding_norm"):
        if layers[role] is not None:
            x = layers[role](x)
    if layers["head"] is not None:
        x = layers["head"](x)
    if layers["distillation_pooling"] is not None:
        distilled = layers["distillation_pooling"](tokens)
        if layers["head_dist"] is not None:
            distilled = layers["head_dist"](distilled)
        x = layers["distillation_mean"]([x, distilled])
    return x
