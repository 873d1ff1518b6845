"""The model spec: every argument that defines a ViT's architecture and numerics, as data.

A ``ViTSpec`` is frozen: a variant is a spec (``keras_vit.models.variants``), another size
or task is ``spec.replace(image_size=384, num_classes=10)``, and ``VisionTransformer(spec)``
builds it. Everything else that needs the architecture (the checkpoint loader, the cost
model, the recipes, the exports) reads it from here, so a new option is one field here
plus the code that uses it.

Each field carries a role in its metadata, so that code can treat groups of fields
without listing them: ``"architecture"`` (what a checkpoint's weights were trained as;
fine-tuning inherits it), ``"task"`` (input size and classifier), ``"regularization"``
(dropouts, set by the training recipe) and ``"training"`` (how training computes, not
what: rematerialisation, set by the recipe).
"""

import dataclasses
import typing

from keras_vit import checks
from keras_vit.models import spec_groups, spec_rules
from keras_vit.models.frozen_spec import FrozenSpec, option
from keras_vit.models.resnet_spec import ResNetSpec
from keras_vit.models.rotary_spec import RotarySpec

ARCHITECTURE, TASK, REGULARIZATION, TRAINING = "architecture", "task", "regularization", "training"
# The nested groups. rope="axial" is RotarySpec(form="axial"); resnet_block_units=None, like
# rope=None, is no group. The ResNet stem's fields are a hybrid variant's, not options of their own.
GROUPS = (
    spec_groups.Group("resnet", ResNetSpec, "block_units"),
    spec_groups.Group("rope", RotarySpec, "form", flat=True),
)


def _field(default, help, role=ARCHITECTURE):
    # help: the field's one line in the training commands' --help (a flag of every option a recipe sets).
    return option(default, help, role=role)


@dataclasses.dataclass(frozen=True)
class ViTSpec(FrozenSpec):
    """Every argument that defines a ViT: size, numerics, pooling, head, hybrid stem.

    Args:
        image_size: input side or ``(height, width)``; divisible by ``stride``.
        patch_size: patch side in pixels (in feature-map cells for hybrids, usually 1).
        hidden_size, depth, num_heads, mlp_dim: the Transformer's width, number of
            blocks, heads and MLP width (the paper's Table 1).
        num_kv_heads: key and value heads, each shared by ``num_heads / num_kv_heads``
            query heads (grouped-query attention; timm's ``num_kv_heads``: Sapiens2): one
            count for every block, or a tuple with one per block; None: ``num_heads``.
        num_channels: input channels.
        pooling: ``"token"`` (the class token, the paper's default), ``"gap"`` (mean of
            the patch tokens), ``"token_gap"`` (the two side by side, twice the width:
            DINOv2's classifiers), ``"map"`` (multi-head attention pooling, SigLIP's head:
            ``keras_vit.layers.AttentionPooling``) or ``None`` (no pooling, only with
            ``include_top=False``).
        class_token: prepend a class token; defaults to ``pooling != "gap"``, as in the
            original code (its "gap" models have none; timm's usually keep one).
        num_register_tokens: learned tokens after the class token that no output reads
            (Darcet et al., "Vision Transformers Need Registers"; timm's ``reg_tokens``).
        distillation_token: DeiT's distillation token after the class token (Touvron et
            al., "Training data-efficient image transformers & distillation through
            attention"; timm's ``distilled``), read by a second classifier ``head_dist``:
            the logits are the mean of the two heads', the pooled features the mean of the
            two tokens, as timm's inference. Needs ``pooling="token"`` (DeiT's) or ``"gap"``
            (the first head then reads the patches' average; the token is the first one
            where there is no class token).
        distillation_head: with ``distillation_token``, the second head and the two means
            (timm's inference); False: the class token's head alone, the distillation token
            only attended to (transformers' ``DeiTForImageClassification``, ``DeiTModel``).
        position_embedding: ``"learned"`` (the paper's), ``"sincos2d"`` (fixed) or
            ``"none"`` (no table: a model with rotary embeddings, ``rope``).
        rope: rotary position embeddings on every attention's queries and keys
            (``keras_vit.layers.RotaryEmbedding``): a ``RotarySpec``, its form's name
            (``"dinov3"``, ``"axial"``, ``"mixed"``) or its fields as a dict; None for none.
            Its fields are options too, ``rope_<field>`` (``rope_temperature=100.0``).
        relative_position_bias: a learned bias on each block's attention logits by the two
            tokens' relative position on the grid (BEiT's; timm's ``use_rel_pos_bias``,
            transformers' ``use_relative_position_bias``). Needs a class token and no other
            prefix token, and a fixed image size (the tables are the grid's).
        embed_prefix_tokens: the learned table has a row for each prefix token (class and
            register tokens), added after they are prepended (the paper's); False: it
            covers the patch grid alone, added before (timm's ``no_embed_class=True``:
            DeiT III, big_vision, the register models).
        pre_norm: a LayerNorm on the tokens before the first block (CLIP's ``ln_pre``;
            timm's ``pre_norm``).
        patch_bias: a bias in the patch embedding (CLIP's has none; timm leaves it out
            with ``pre_norm``).
        patch_norm: a norm on the patch embeddings, before the position embedding (AIMv2).
        norm_type: every norm's kind, ``"layernorm"`` (the paper's) or ``"rmsnorm"``
            (AIMv2's); ``layer_norm_epsilon`` is its epsilon.
        layer_norm_epsilon: 1e-6 (original code, timm); HF transformers uses 1e-12.
        gelu_approximate: True for the tanh GELU of the original JAX code (flax's
            ``nn.gelu``); False for the exact erf GELU of timm and HF.
        mlp_activation: ``"gelu"`` (the form ``gelu_approximate`` picks),
            ``"quick_gelu"`` (``x * sigmoid(1.702 x)``, OpenAI CLIP's) or ``"silu"``.
        gated_mlp: the MLP's first projection gives a gate and a value, and its hidden
            state is ``activation(gate) * value`` (SwiGLU with ``"silu"``: AIMv2);
            ``mlp_dim`` is the hidden state's width.
        proj_bias: biases on the attention's output projection and the MLP's (AIMv2's
            have none; timm's ``proj_bias``).
        layer_scale_init: LayerScale (Touvron et al., CaiT): each block's two residual
            branches scaled per channel by learned weights starting at this value (DeiT
            III, DINOv2; timm's ``init_values``); None for none.
        layer_scale_mlp: with ``layer_scale_init``, the MLP's branch is scaled too; False:
            the attention's alone (Sapiens2's; timm's ``attn_only_layer_scale``).
        qk_norm: a norm (``norm_type``) on each head's queries and keys, before any rotary
            turn (timm's ``qk_norm``: Sapiens2).
        attention_norm: a norm on each attention's heads before its output projection
            (EVA-02 CLIP's and BEiT-3's; timm's ``scale_attn_inner``, ``scale_attn_norm``).
        parallel_blocks: each block's attention and MLP side by side on one norm's output,
            their sum one residual branch with one LayerScale (ViT-22B's, Dehghani et al.
            2023; timm's ``ParallelScalingBlock``).
        differential_attention: each head's queries and keys split in two, two softmax
            maps over the same values, the second subtracted with a learned weight (Ye et
            al., "Differential Transformer", 2024; timm's ``attn_layer="diff"``); always
            written out (``keras_vit.layers.MultiHeadSelfAttention``).
        residual_post_norm: each block's norms on the outputs of its attention and MLP,
            inside the residual (``x + norm(attention(x))``; timm's ``ResPostBlock`` and
            ``EvaBlockPostNorm``: EVA-02 enormous), not on their inputs.
        mlp_norm: a norm on each MLP's hidden state before its second projection (EVA-02's
            and BEiT-3's; timm's ``scale_mlp``, ``scale_mlp_norm``).
        qkv_bias: a bias on the query, key and value projections (every published ViT
            has one; timm's ``qkv_bias=False`` models have none).
        pool_include_prefix: ``"gap"`` and ``"map"`` pooling read the prefix tokens too
            (class, registers), not the patch tokens alone (timm's ``pool_include_prefix``;
            keras-hub's ViT classifier's average).
        map_num_heads: ``pooling="map"``: the attention pooling's heads (timm's
            ``attn_pool_num_heads``: Perception Encoder's 8); None: ``num_heads``.
        map_mlp_dim: ``pooling="map"``: its MLP's hidden width (timm's
            ``attn_pool_mlp_ratio`` times the width); None: ``mlp_dim``.
        norm_after_pool: apply the final LayerNorm to the pooled vector instead of every
            token (timm's ``fc_norm``, its default for average pooling).
        final_norm: the final LayerNorm at all; False: none (timm's ``final_norm=False``:
            RADIO, InternViT).
        resnet: a ``ResNetSpec`` (or its fields as a dict) for a hybrid; None for a plain
            ViT.
        dynamic_image_size: take images of any size divisible by ``stride`` (at least one
            patch) at call time, the position embeddings resampled in the graph from the
            ``image_size`` grid they are stored for (timm's ``dynamic_img_size=True``);
            False: images must be ``image_size``.
        num_classes: classifier outputs (ignored when ``include_top=False``).
        include_top: add the classifier head; if False the model outputs the pooled
            features (or the normalised tokens when ``pooling=None``).
        representation_size: width of the pre-logits layer (Dense + tanh) of the paper's
            pre-training; None for none, as in fine-tuning.
        embedding_size: width of a projection after the pooling (and pre-logits), before
            the head: a two-tower model's image embedding (CLIP's projection); None for none.
        normalize_embedding: L2-normalise the vector the head reads (a zero-shot classifier's
            cosine scores: ``ImageTextModel.zero_shot_classifier``).
        head_zero_init: zero-initialise the classifier (the original code always does;
            fine-tuning needs it so the new head starts at zero).
        classifier_activation: activation of the head (None: logits; ``"softmax"`` or
            ``"sigmoid"``: probabilities, ``outputs_probabilities``).
        dropout_rate: dropout after the embeddings, the attention and in the MLPs.
        attention_dropout_rate: dropout on the attention weights.
        drop_path_rate: stochastic depth, rising linearly from 0 to this at the last block.
        remat: rematerialise the encoder blocks (``keras.remat``): each block's
            activations are recomputed in the backward pass instead of kept from the
            forward one, so training holds about one block's activations at a time, for
            about one more forward pass of time. The function and its gradients are the
            same.

    >>> spec = ViTSpec(patch_size=16, image_size=(48, 80))
    >>> spec.grid_size, spec.num_prefix_tokens
    ((3, 5), 1)
    >>> spec.replace(pooling="gap").has_class_token
    False
    """

    image_size: typing.Any = _field(
        (224, 224), "input side in pixels, or (height, width); divisible by the stride", TASK
    )
    patch_size: int = _field(
        16, "side in pixels of the square patches the image is cut into (feature-map cells for a hybrid)"
    )
    hidden_size: int = _field(768, "the tokens' width, the Transformer's hidden size (divisible by --num-heads)")
    depth: int = _field(12, "number of Transformer blocks")
    num_heads: int = _field(12, "attention heads per block")
    num_kv_heads: typing.Any = _field(
        None, "key and value heads (grouped-query attention): one count, or one per block; none: --num-heads"
    )
    mlp_dim: int = _field(3072, "hidden width of each block's MLP")
    num_channels: int = _field(3, "channels of the input images (3 for RGB)")
    pooling: str | None = _field(
        "token",
        "what the head reads: token (the class token), gap (the patch tokens' mean), token_gap (both side by side) "
        "or map (attention pooling)",
    )
    class_token: bool | None = _field(None, "prepend a class token; none: one unless --pooling gap")
    num_register_tokens: int = _field(0, "learned tokens after the class token that no output reads (register tokens)")
    distillation_token: bool = _field(
        False, "DeiT's distillation token, read by a second head (with --pooling token or gap)"
    )
    distillation_head: bool = _field(
        True, "the distillation token's own head, averaged with the class token's; false: the class token's alone"
    )
    position_embedding: str = _field(
        "learned", "learned position embeddings (the paper's), fixed sincos2d ones, or none (a RoPE model's)"
    )
    rope: RotarySpec | None = _field(
        None, "rotary position embeddings on the queries and keys: dinov3, axial or mixed; none: off"
    )
    relative_position_bias: bool = _field(
        False, "a learned bias on each block's attention logits by the tokens' relative position (BEiT's)"
    )
    embed_prefix_tokens: bool = _field(
        True, "give the class and register tokens position embeddings too (the paper's); false: patches only"
    )
    pre_norm: bool = _field(False, "a LayerNorm on the tokens before the first block (CLIP's)")
    patch_bias: bool = _field(True, "a bias in the patch embedding")
    patch_norm: bool = _field(False, "a norm on the patch embeddings, before the position embedding (AIMv2's)")
    norm_type: str = _field("layernorm", "every norm's kind: layernorm (the paper's) or rmsnorm")
    layer_norm_epsilon: float = _field(1e-6, "the norms' epsilon (1e-6 in the original code and timm)")
    gelu_approximate: bool = _field(
        True, "the tanh approximation of GELU (the original JAX code's); false: the exact GELU (timm's)"
    )
    mlp_activation: str = _field("gelu", "the MLP's activation: gelu, quick_gelu (OpenAI CLIP's) or silu")
    gated_mlp: bool = _field(False, "a gated MLP, activation(gate) * value (SwiGLU with silu)")
    proj_bias: bool = _field(True, "biases on the attention's output projection and the MLP's")
    layer_scale_init: float | None = _field(
        None, "LayerScale: each residual branch scaled per channel, from this value (e.g. 1e-5); none: off"
    )
    layer_scale_mlp: bool = _field(True, "LayerScale on the MLP's branch too; false: on the attention's alone")
    attention_norm: bool = _field(False, "a norm on each attention's heads before its output projection")
    qk_norm: bool = _field(False, "a norm on each head's queries and keys")
    parallel_blocks: bool = _field(
        False, "each block's attention and MLP side by side on one norm's output, their sum one residual (ViT-22B's)"
    )
    differential_attention: bool = _field(
        False, "differential attention: two softmax maps a head, the second subtracted with a learned weight"
    )
    residual_post_norm: bool = _field(
        False, "each block's two norms on its attention's and MLP's outputs, inside the residual, not on their inputs"
    )
    mlp_norm: bool = _field(False, "a norm on each MLP's hidden state before its second projection")
    qkv_bias: bool = _field(True, "a bias on the query, key and value projections")
    pool_include_prefix: bool = _field(False, "gap and map pooling read the prefix tokens too, not the patches alone")
    map_num_heads: int | None = _field(None, "map pooling: its attention heads; none: --num-heads")
    map_mlp_dim: int | None = _field(None, "map pooling: its MLP's hidden width; none: --mlp-dim")
    norm_after_pool: bool = _field(
        False, "apply the final norm to the pooled vector instead of every token (timm's fc_norm)"
    )
    final_norm: bool = _field(True, "a norm after the last block")
    resnet: ResNetSpec | None = _field(None, "the BiT ResNet stem of a hybrid (a ResNetSpec); none: a plain ViT")
    dynamic_image_size: bool = _field(
        False, "take images of any size divisible by the stride, the position embeddings resampled", TASK
    )
    num_classes: int = _field(1000, "classifier outputs", TASK)
    include_top: bool = _field(True, "add the classifier head; false: the model outputs its pooled features", TASK)
    representation_size: int | None = _field(
        None, "width of the pre-logits layer (Dense + tanh) of the paper's pre-training; none: no such layer", TASK
    )
    embedding_size: int | None = _field(
        None, "width of a projection before the head (a two-tower model's image embedding); none: no such layer"
    )
    normalize_embedding: bool = _field(False, "L2-normalise the vector the head reads (a zero-shot classifier's)")
    head_zero_init: bool = _field(True, "start the classifier at zero (as the original code and fine-tuning do)", TASK)
    classifier_activation: str | None = _field(
        None, "the head's activation, e.g. softmax; none: the model outputs logits", TASK
    )
    dropout_rate: float = _field(
        0.0, "dropout rate after the embeddings, the attention and in the MLPs, in [0, 1)", REGULARIZATION
    )
    attention_dropout_rate: float = _field(0.0, "dropout rate of the attention weights, in [0, 1)", REGULARIZATION)
    drop_path_rate: float = _field(
        0.0, "stochastic depth: the rate a block is skipped, rising from 0 to this at the last block", REGULARIZATION
    )
    remat: bool = _field(
        False,
        "recompute each block's activations in the backward pass: a block's memory, for about a forward pass's time",
        TRAINING,
    )

    def __post_init__(self):
        # The forms a field may be given in, made one (a config's lists and dicts, a side for a pair).
        self._settle("image_size", checks.pair(self.image_size, "image_size"))
        for group in GROUPS:  # a config's dict, or the key field's value alone
            self._settle(group.name, spec_groups.settled(group, getattr(self, group.name)))
        if isinstance(self.num_kv_heads, list):
            self._settle("num_kv_heads", tuple(self.num_kv_heads))
        spec_rules.check_vit(self, rates=self.fields_with_role(REGULARIZATION))

    def replace(self, **changes):
        """A copy with ``changes``; ``<group>_<field>`` changes a field of a nested group
        (``resnet_block_units``, ``rope_temperature``), and ``<group>_<key>=None`` or
        ``<group>=None`` removes it.

        >>> ViTSpec().replace(resnet_block_units=(2, 2), patch_size=1).resnet.stride
        8
        >>> ViTSpec(rope="axial").replace(rope_temperature=100).rope.temperature
        100.0
        """
        for group in GROUPS:
            changes = spec_groups.grouped(self, group, changes)
        return super().replace(**changes)

    @classmethod
    def from_config(cls, config):
        """The inverse of ``to_config``; accepts the flat ``<group>_<field>`` keys of older files."""
        return cls().replace(**config)

    @classmethod
    def options(cls):
        """Every option by the name a user gives it (``spec_groups.Option``s): the fields, and
        each field of the rotary group as ``rope_<field>``, its form as ``rope`` itself."""
        return spec_groups.options(cls, GROUPS)

    def option(self, name):
        """The value of option ``name`` (an ``options()`` name): ``spec.option("rope")`` is the
        rotary form's name or None, ``spec.option("rope_temperature")`` its temperature (its
        default without rotary embeddings)."""
        return spec_groups.option(self, name, GROUPS)

    @classmethod
    def fields_with_role(cls, role):
        """Names of the options of one role (``options()``'s): ``"architecture"``, ``"task"``,
        ``"regularization"`` or ``"training"``."""
        return [name for name, o in cls.options().items() if o.metadata["role"] == role]

    @property
    def outputs_probabilities(self):
        """Whether the head's outputs are probabilities (a softmax, or a sigmoid per class, a
        SigLIP zero-shot classifier's) rather than logits; another activation is refused.

        >>> ViTSpec().outputs_probabilities, ViTSpec(classifier_activation="sigmoid").outputs_probabilities
        (False, True)
        """
        if self.classifier_activation in (None, "linear"):
            return False
        if self.classifier_activation in ("softmax", "sigmoid"):
            return True
        raise ValueError(
            "Expected a classifier that outputs logits (classifier_activation=None) or probabilities "
            f"('softmax' or 'sigmoid'); got classifier_activation={self.classifier_activation!r}."
        )

    @property
    def stride(self):
        """Pixels per token side: the patch, times the ResNet's stride for hybrids."""
        return self.patch_size * (self.resnet.stride if self.resnet else 1)

    @property
    def kv_heads_per_block(self):
        """Each block's key/value heads (``num_heads`` where the attention is not grouped).

        >>> ViTSpec(depth=2, num_heads=4, num_kv_heads=2).kv_heads_per_block
        (2, 2)
        """
        heads = self.num_heads if self.num_kv_heads is None else self.num_kv_heads
        return tuple(heads) if isinstance(heads, tuple) else (heads,) * self.depth

    @property
    def head_dim(self):
        """Channels per attention head."""
        return self.hidden_size // self.num_heads

    @property
    def grid_size(self):
        return (self.image_size[0] // self.stride, self.image_size[1] // self.stride)

    @property
    def has_class_token(self):
        return self.pooling != "gap" if self.class_token is None else bool(self.class_token)

    @property
    def num_prefix_tokens(self):
        """Tokens before the patch grid: the class token, the distillation token, then the
        register tokens."""
        return int(self.has_class_token) + int(self.distillation_token) + self.num_register_tokens

    @property
    def position_prefix_rows(self):
        """Rows of the position table before the grid's: the prefix tokens', or none
        (``embed_prefix_tokens=False``)."""
        return self.num_prefix_tokens if self.embed_prefix_tokens else 0

    @property
    def embedding_channels(self):
        """Channels that the patch embedding sees: the image's, or the ResNet's output."""
        return self.resnet.out_channels if self.resnet else self.num_channels
