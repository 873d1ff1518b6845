"""Each upstream layout's special cases: its keys said in the names its column of
``table.py`` reads, before any row is read, and the checks its keys allow.

Each ``*_prepare(spec, arrays)`` is one layout's (its record in ``layouts.py`` names it):
it returns the arrays renamed, joined or completed, and raises where the file's keys show
a model other than ``spec`` (None: the layout is only being detected). The pieces they
share are the small functions before them.
"""

import re

import numpy as np


def no_special_cases(spec, arrays):
    return arrays


# --- what several layouts do, each in its own names -------------------------------------------


def _renamed(arrays, old, new):
    """``arrays`` with ``old`` replaced by ``new`` in every key that holds it."""
    return {(k.replace(old, new) if old in k else k): v for k, v in arrays.items()}


def _final_norm_after_pool(spec, arrays, after, before, who):
    """A file whose final norm follows the pooling names it ``after`` (a key prefix), else
    ``before``: it must be the model's ``norm_after_pool``, and reads as ``before``."""
    found = any(k.startswith(after) for k in arrays)
    if spec is not None and found != spec.norm_after_pool:
        raise ValueError(
            f"The {who} checkpoint applies its final LayerNorm "
            + (f"after pooling (`{after[:-1]}`)" if found else f"before pooling (`{before[:-1]}`)")
            + f" but the model has norm_after_pool={spec.norm_after_pool}: build it with norm_after_pool={found}."
        )
    return {(before + k[len(after) :] if k.startswith(after) else k): v for k, v in arrays.items()}


def _fold_class_position(arrays, token, table):
    """DINOv2 with registers (transformers', keras-hub's) adds the class token's position
    embedding before it inserts the registers, which get none: the same sum as the class
    token plus that row, and a table of the patches' rows alone (``embed_prefix_tokens=False``)."""
    arrays = dict(arrays)
    rows = np.asarray(arrays[table])
    arrays[token] = np.asarray(arrays[token]) + rows[:, :1]
    arrays[table] = rows[:, 1:]
    return arrays


def _joined_gate(arrays, gate, value, fc1, axis=0):
    """A gated MLP's gate and value projections apart (keys holding ``gate`` and ``value``)
    as keras-vit's one ``fc1``, gate first (as timm's ``GluMlp`` with ``gate_last=False``),
    joined on the outputs' ``axis`` (torch's 0, a Keras kernel's -1); a value without a gate
    (an ungated MLP's first projection) is ``fc1`` as it is."""
    arrays = dict(arrays)
    for key in [k for k in arrays if value in k]:
        projection = np.asarray(arrays.pop(key))
        gate_key = key.replace(value, gate)
        if gate_key in arrays:
            projection = np.concatenate([np.asarray(arrays.pop(gate_key)), projection], axis=axis)
        arrays[key.replace(value, fc1)] = projection
    return arrays


def _zero_biases(arrays, names, separator=".", weight="weight", out_axis=0):
    """Where some of an attention's query, key and value projections have a bias and others
    none (BEiT's and DINOv3's key), the missing ones as zeros. ``names``: the three
    projections' names (``("query", "key", "value")``), each followed by ``separator`` and
    ``weight``, whose axis ``out_axis`` is the outputs' (torch's 0, a Keras kernel's -1)."""
    arrays = dict(arrays)
    sep = re.escape(separator)
    pattern = re.compile(rf"(.*{sep})({'|'.join(names)}){sep}{weight}$")
    for key in list(arrays):
        match = pattern.match(key)
        if not match:
            continue
        biases = [f"{match.group(1)}{name}{separator}bias" for name in names]
        mine = f"{match.group(1)}{match.group(2)}{separator}bias"
        if mine not in arrays and any(b in arrays for b in biases):
            arrays[mine] = np.zeros(np.shape(arrays[key])[out_axis], np.asarray(arrays[key]).dtype)
    return arrays


# --- timm ----------------------------------------------------------------------------------------


def _timm_structure(spec, arrays):
    """The options a timm file's keys show (the distillation token, registers, the norms and their kind, the
    biases, LayerScale, a SwiGLU MLP) must be the model's: else it would load without
    error and compute another function, or leave weights unused."""
    if spec is None:
        return
    found = {
        "num_register_tokens": int(arrays["reg_token"].shape[1]) if "reg_token" in arrays else 0,
        "distillation_token": "dist_token" in arrays,
        "pre_norm": "norm_pre.weight" in arrays,
        "patch_bias": "patch_embed.proj.bias" in arrays,
        "layer_scale_init": "blocks.0.ls1.gamma" in arrays,
        "final_norm": "norm.weight" in arrays or "fc_norm.weight" in arrays,
        "patch_norm": "patch_embed.norm.weight" in arrays,
        "proj_bias": "blocks.0.attn.proj.bias" in arrays,
        "norm_type": "rmsnorm"
        if "blocks.0.norm1.weight" in arrays and "blocks.0.norm1.bias" not in arrays
        else "layernorm",
        "gated_mlp": "blocks.0.mlp.fc1_g.weight" in arrays or None,  # GluMlp's fused fc1: not told by its keys
        "qkv_bias": "blocks.0.attn.qkv.bias" in arrays,
        "attention_norm": "blocks.0.attn.norm.weight" in arrays,
        "mlp_norm": "blocks.0.mlp.norm.weight" in arrays,
        # A learned table, or none: a RoPE model's (a sincos2d one saves none either).
        "position_embedding": "learned"
        if "pos_embed" in arrays
        else ("none" if spec.position_embedding == "learned" else None),
    }
    has = {
        "num_register_tokens": spec.num_register_tokens,
        "distillation_token": spec.distillation_token,
        "pre_norm": spec.pre_norm,
        "patch_bias": spec.patch_bias,
        "layer_scale_init": spec.layer_scale_init is not None,
        "final_norm": spec.final_norm,
        "patch_norm": spec.patch_norm,
        "proj_bias": spec.proj_bias,
        "norm_type": spec.norm_type,
        "gated_mlp": spec.gated_mlp,
        "qkv_bias": spec.qkv_bias,
        "attention_norm": spec.attention_norm,
        "mlp_norm": spec.mlp_norm,
        "position_embedding": spec.position_embedding,
    }
    differ = [name for name in found if found[name] is not None and found[name] != has[name]]
    if differ:
        wanted = ", ".join(
            f"layer_scale_init={'a number' if found[n] else None}" if n == "layer_scale_init" else f"{n}={found[n]}"
            for n in differ
        )
        now = ", ".join(f"{n}={getattr(spec, n)!r}" for n in differ)
        raise ValueError(f"The timm checkpoint needs a model built with {wanted}; this one has {now}.")


_EVA_NAMES = re.compile(r"blocks\.(\d+)\.(gamma_[12]|attn\.[qv]_bias|attn\.q_proj\.weight)$")


def _timm_eva_names(arrays):
    """timm's ``Eva`` (DINOv3, EVA) and ``Beit`` name LayerScale ``gamma_1``/``gamma_2`` and
    keep the query and value biases apart (``q_bias``, ``v_bias``; the key has none, a zero
    buffer they do not save), or the three projections (EVA-02's ``q_proj``, ``k_proj``,
    ``v_proj``, the key's without a bias; ``AttentionRope``'s with one, its key and value
    narrower where they are grouped): said in ``VisionTransformer``'s names,
    ``ls1.gamma`` and one ``qkv`` with zeros for the key's bias."""
    if not any(_EVA_NAMES.match(k) for k in arrays):
        return arrays
    arrays = dict(arrays)
    for key in [k for k in arrays if _EVA_NAMES.match(k)]:
        block, what = _EVA_NAMES.match(key).groups()
        if what.startswith("gamma_"):
            arrays[f"blocks.{block}.ls{what[-1]}.gamma"] = arrays.pop(key)
        elif what == "attn.q_bias":
            query = np.asarray(arrays.pop(key))
            value = np.asarray(arrays.pop(f"blocks.{block}.attn.v_bias"))
            arrays[f"blocks.{block}.attn.qkv.bias"] = np.concatenate([query, np.zeros_like(query), value])
        elif what == "attn.q_proj.weight":  # separate projections (a v_bias went with its q_bias)
            attn = f"blocks.{block}.attn."
            weights = [np.asarray(arrays.pop(f"{attn}{n}_proj.weight")) for n in "qkv"]
            arrays[attn + "qkv.weight"] = np.concatenate(weights)
            if attn + "q_proj.bias" in arrays:  # the key's bias: its own (AttentionRope's), or zeros (EvaAttention's)
                query, value = (np.asarray(arrays.pop(f"{attn}{n}_proj.bias")) for n in "qv")
                key = arrays.pop(attn + "k_proj.bias", np.zeros(len(weights[1]), query.dtype))
                arrays[attn + "qkv.bias"] = np.concatenate([query, np.asarray(key), value])
    return arrays


_PARALLEL_NAMES = re.compile(r"blocks\.(\d+)\.in_proj\.weight$")
# A parallel block's weights by their names in it: their names in a Block (Block's own, left).
_PARALLEL_RENAMES = {"in_norm.": "norm1.", "attn_out_proj.": "attn.proj.", "mlp_out_proj.": "mlp.fc2.", "ls.": "ls1.",
                     "lambda_": "attn.lambda_", "sub_norm.": "attn.sub_norm."}  # fmt: skip


def _timm_parallel_names(arrays):
    """timm's parallel blocks (``ParallelScalingBlock``, ``DiffParallelScalingBlock``) said
    in ``Block``'s names: ``in_norm`` is ``norm1``; ``in_proj`` computes fc1 (its first
    rows, or with ``mlp_bias`` beside it) then the query, key and value; the two outputs'
    projections are ``attn.proj`` and ``mlp.fc2``, or one ``out_proj`` over the two side by
    side (its columns split, its bias the attention's); ``ls`` is ``ls1``; differential
    attention's weights (``lambda_*``, ``sub_norm``) the attention's."""
    blocks = sorted({int(_PARALLEL_NAMES.match(k)[1]) for k in arrays if _PARALLEL_NAMES.match(k)})
    if not blocks:
        return arrays
    arrays = dict(arrays)
    for i in blocks:
        b = f"blocks.{i}."
        in_proj = np.asarray(arrays.pop(b + "in_proj.weight"))
        width = in_proj.shape[1]
        hidden = in_proj.shape[0] - 3 * width
        arrays[b + "mlp.fc1.weight"], arrays[b + "attn.qkv.weight"] = in_proj[:hidden], in_proj[hidden:]
        if b + "in_proj.bias" in arrays:
            bias = np.asarray(arrays.pop(b + "in_proj.bias"))
            arrays[b + "mlp.fc1.bias"], arrays[b + "attn.qkv.bias"] = bias[:hidden], bias[hidden:]
        if b + "mlp_bias" in arrays:
            arrays[b + "mlp.fc1.bias"] = arrays.pop(b + "mlp_bias")
        if b + "out_proj.weight" in arrays:
            out = np.asarray(arrays.pop(b + "out_proj.weight"))
            arrays[b + "attn.proj.weight"], arrays[b + "mlp.fc2.weight"] = out[:, :width], out[:, width:]
            if b + "out_proj.bias" in arrays:
                arrays[b + "attn.proj.bias"] = arrays.pop(b + "out_proj.bias")
                arrays[b + "mlp.fc2.bias"] = np.zeros_like(arrays[b + "attn.proj.bias"])
        for key in [k for k in arrays if k.startswith(b)]:
            rest = key[len(b) :]
            for old, new in _PARALLEL_RENAMES.items():
                if rest.startswith(old):
                    arrays[b + new + rest[len(old) :]] = arrays.pop(key)
                    break
    return arrays


def timm_prepare(spec, arrays):
    """timm's ``Eva``/``Beit`` names as ``VisionTransformer``'s, the structure checked, its
    SwiGLU's ``fc1_g``/``fc1_x`` as one ``fc1``, and ``fc_norm`` (the final norm after the
    pooling) read as ``norm`` once the model is known to pool the same way."""
    arrays = _timm_parallel_names(_timm_eva_names(arrays))
    _timm_structure(spec, arrays)
    arrays = _joined_gate(arrays, ".fc1_g.", ".fc1_x.", ".fc1.")
    return _final_norm_after_pool(spec, arrays, "fc_norm.", "norm.", "timm")


# --- HF transformers -----------------------------------------------------------------------------


# Key prefixes some files have in place of the table's (HF): DeiT's teacher model names its
# class-token head ``cls_classifier``, the ``classifier`` of the others; transformers 5's
# ``save_pretrained`` writes ViTMAEForPreTraining's ``decoder.decoder_layers.`` (the hub's
# files) as ``decoder.decoder_encoder.layer.``, its renaming of ``layers.`` reversed.
_HF_RENAMED = {"cls_classifier.": "classifier.", "decoder.decoder_encoder.layer.": "decoder.decoder_layers."}


def hf_prepare(spec, arrays):
    """The table's names for the keys some files name otherwise (``_HF_RENAMED``)."""

    def renamed(key):
        for old, new in _HF_RENAMED.items():
            if key.startswith(old):
                return new + key[len(old) :]
        return key

    return {renamed(k): v for k, v in arrays.items()}


def hf_registers_prepare(spec, arrays):
    """DINOv2 with registers: the class token's position row folded into it (``_fold_class_position``)."""
    if spec is not None and spec.embed_prefix_tokens:
        raise ValueError(
            "A DINOv2-with-registers checkpoint gives its registers no position embedding: build the model "
            "with embed_prefix_tokens=False."
        )
    return _fold_class_position(arrays, "embeddings.cls_token", "embeddings.position_embeddings")


def hf_beit_prepare(spec, arrays):
    """BEiT's key has no bias (zeros), and with mean pooling its final norm follows the
    pooling (``pooler.layernorm``, timm's ``fc_norm``)."""
    arrays = _zero_biases(hf_prepare(spec, arrays), ("query", "key", "value"))
    return _final_norm_after_pool(spec, arrays, "pooler.layernorm.", "layernorm.", "BEiT")


def hf_dinov3_prepare(spec, arrays):
    """DINOv3's attention has a bias on the query and value alone (by default): the key's is
    zeros. Its MLP is ``up_proj`` then ``down_proj``, or gated, ``gate_proj`` beside
    ``up_proj``: keras-vit's ``fc1`` (gate first) and ``fc2``."""
    arrays = _zero_biases(arrays, ("q_proj", "k_proj", "v_proj"))
    arrays = _joined_gate(arrays, ".mlp.gate_proj.", ".mlp.up_proj.", ".mlp.fc1.")
    return _renamed(arrays, ".mlp.down_proj.", ".mlp.fc2.")


# --- keras-hub -----------------------------------------------------------------------------------


def keras_hub_registers_prepare(spec, arrays):
    """keras-hub's DINOv2 with registers: as transformers' (``hf_registers_prepare``)."""
    if "embeddings/register_tokens" not in arrays:
        return arrays
    return _fold_class_position(arrays, "embeddings/cls_token", "embeddings/interpolated_position_embeddings")


def keras_hub_dinov3_prepare(spec, arrays):
    """keras-hub's DINOv3: a missing query, key or value bias as zeros; the MLP as
    transformers' (``hf_dinov3_prepare``), in Keras kernels (outputs on the last axis)."""
    arrays = _zero_biases(arrays, ("q_proj", "k_proj", "v_proj"), "/", "kernel", -1)
    arrays = _joined_gate(arrays, "/mlp/gate_proj/", "/mlp/up_proj/", "/mlp/fc1/", axis=-1)
    return _renamed(arrays, "/mlp/down_proj/", "/mlp/fc2/")


def keras_hub_positions_prepare(spec, arrays):
    """keras-hub's SigLIP and CLIP add to the tokens the rows of their position table that a
    weight of the file picks (``position_ids``; CLIP's layer leaves it as built, zeros: each
    token gets row 0, where a converted preset's counts the rows in order): the table as added."""
    if "embedding/position_ids" not in arrays:
        return arrays
    arrays = dict(arrays)
    table = np.asarray(arrays["embedding/position_embedding/embeddings"])
    arrays["embedding/position_embedding/embeddings"] = table[np.asarray(arrays["embedding/position_ids"])[0]]
    return arrays


_PROBE = re.compile(r"head/variable(_\d+)?$")


def keras_hub_siglip_prepare(spec, arrays):
    """keras-hub's SigLIP makes its attention pooling's probe without a name: Keras calls it
    ``variable`` with a number that counts the unnamed weights made before it. Named
    ``head/probe``; the position table as its ``position_ids`` pick (``keras_hub_positions_prepare``)."""
    arrays = {("head/probe" if _PROBE.match(k) else k): v for k, v in arrays.items()}
    return keras_hub_positions_prepare(spec, arrays)
