"""Writes ``keras_vit/checkpoints/timm_architectures.json`` and ``timm_pretrained.json`` (each
architecture's pretrained tags) from an installed timm, and the docs' list of which of them
keras-vit builds (by hand, when timm adds architectures or keras-vit an option;
tests/test_family.py says when any is stale).

Every pretrained architecture of timm's ``vision_transformer``, ``deit``, ``eva`` and ``beit``
modules is a factory function that passes its architecture arguments (``embed_dim``, ``reg_tokens``,
``init_values``, ...) to one constructor. This script calls each factory with that
constructor replaced by one that records the arguments and builds nothing, and writes
them as data (JSON, which the modules of the same names read): one row per architecture,
classes and partials written as names (``"layernorm:1e-05"``, ``"swiglu"``); an ``eva`` or
``beit`` architecture's row says ``'module': 'eva'`` or ``'beit'`` (its constructor, ``Eva`` or
``Beit``, names its arguments its own way).
``keras_vit.checkpoints.timm_config`` turns a row, plus a ``config.json``'s own
``model_args``, into a ``ViTSpec``.

    .venv/bin/python scripts/make_timm_table.py
"""

import functools
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "keras_vit", "checkpoints", "timm_architectures.json")
TAGS_OUT = os.path.join(ROOT, "keras_vit", "checkpoints", "timm_pretrained.json")
DOCS = os.path.join(ROOT, "docs", "guide", "timm-architectures.md")
MODULES = ("vision_transformer", "deit", "eva", "beit")


def _name(value):
    """A JSON-friendly stand-in for a constructor argument that is a class or a partial."""
    if isinstance(value, functools.partial):
        inner = _name(value.func)
        extra = ",".join(f"{k}={_name(v)}" for k, v in sorted(value.keywords.items()))
        return f"{inner}:{extra}" if extra else inner
    if isinstance(value, type):
        return value.__name__.lower()
    if isinstance(value, tuple):
        return list(value)
    return value


def _normalise(kwargs):
    named = {k: _name(v) for k, v in kwargs.items()}
    # "layernorm:eps=1e-05" -> "layernorm:1e-05": the one keyword the norms take here.
    return {k: v.replace(":eps=", ":") if isinstance(v, str) else v for k, v in named.items()}


def collect():
    """``{architecture: its constructor arguments}`` from the installed timm."""
    sys.path.insert(0, os.path.join(ROOT, "tests"))
    import torchvision_stub  # timm imports torchvision; the tests' inert stand-in serves

    torchvision_stub.install()
    import timm
    from timm.models import beit, deit, eva, vision_transformer

    captured = {}

    class _Recorded(Exception):
        pass

    def record(variant, pretrained=False, **kwargs):
        captured[variant] = _normalise(kwargs)
        raise _Recorded

    def recorder(module):
        return lambda variant, pretrained=False, **kwargs: record(variant, **kwargs, module=module)

    saved = vision_transformer._create_vision_transformer, deit._create_deit, eva._create_eva, beit._create_beit
    vision_transformer._create_vision_transformer = deit._create_deit = record
    eva._create_eva, beit._create_beit = recorder("eva"), recorder("beit")
    try:
        for name in sorted({n.split(".")[0] for n in timm.list_models(module=list(MODULES), pretrained=True)}):
            factory = next(getattr(m, name) for m in (vision_transformer, deit, eva, beit) if hasattr(m, name))
            try:
                factory(pretrained=False)
            except _Recorded:
                pass
    finally:
        vision_transformer._create_vision_transformer, deit._create_deit, eva._create_eva, beit._create_beit = saved
    return timm.__version__, captured, pretrained_tags(timm, captured)


def pretrained_tags(timm, architectures):
    """``{architecture: {tag: (hub repository or None, classes, input size)}}``, timm's default
    tag first (its untagged name's, with ``pretrained=True``): what ``timm.create_model`` takes
    from a tag's pretrained config, with or without its weights."""
    from timm.models import get_pretrained_cfg

    tags = {}
    for name in timm.list_models(module=list(MODULES), pretrained=True):
        architecture, tag = name.split(".", 1)
        if architecture in architectures:
            cfg = get_pretrained_cfg(name)
            height, width = cfg.input_size[1:]
            size = height if height == width else [height, width]
            tags.setdefault(architecture, {})[tag] = (cfg.hf_hub_id or None, cfg.num_classes, size)
    for architecture, listed in tags.items():
        default = get_pretrained_cfg(architecture).tag  # the untagged name's
        tags[architecture] = dict(sorted(listed.items(), key=lambda entry: entry[0] != default))
    return tags


def render(version, key, rows):
    """A table's JSON file: timm's version, then ``key``'s rows, one line each, sorted (a new
    timm's changes are a diff of rows)."""
    lines = ",\n".join(f"    {json.dumps(name)}: {json.dumps(row)}" for name, row in sorted(rows.items()))
    return f'{{\n  "timm_version": {json.dumps(version)},\n  "{key}": {{\n{lines}\n  }}\n}}\n'


# The docs page's families: (heading, a part of a timm architecture's name, transformers
# model types). An architecture falls in the first family whose part its name holds, the
# paper's classic ViT last; None: a family only transformers publishes.
FAMILIES = (
    ("AIMv2 (SwiGLU MLP, RMSNorm)", "aimv2", ()),
    ("DeiT III (LayerScale)", "deit3", ()),
    ("DeiT distilled (a distillation token and head)", "distilled", ("deit",)),
    ("DeiT", "deit_", ()),
    ("DINOv3 (rotary embeddings, registers)", "dinov3", ("dinov3_vit",)),
    ("LingBot (DINOv3's architecture)", "lingbot", ()),
    ("DINOv2 with registers", "reg4_dinov2", ("dinov2_with_registers",)),
    ("DINOv2 (LayerScale)", "dinov2", ("dinov2",)),
    ("TIPSv2", "tipsv2", ()),
    ("SigLIP with average pooling", "siglip_gap", ()),
    ("SigLIP (attention pooling)", "siglip", ("siglip", "siglip_vision_model")),
    ("EVA", "eva", ()),
    ("BEiT (relative position bias)", "beit", ("beit", "data2vec-vision")),
    ("CLIP (a norm before the blocks)", "clip", ("clip", "clip_vision_model")),
    ("RADIO", "radio", ()),
    ("FlexiViT", "flexivit", ()),
    ("InternViT", "intern", ()),
    ("Perception Encoder (rotary embeddings; core: attention pooling)", "vit_pe_", ()),
    ("Sapiens2 (grouped key/value heads, query/key norms)", "sapiens2", ()),
    ("Register and average-pooling models (`reg`, `gap`)", "gap", ()),
    ("RoPE-ViT (axial and mixed rotary embeddings)", "_rope_", ()),
    ("Residual post-norm blocks", "_rpn_", ()),
    ("timm's test models", "test_vit", ()),
    ("MAE, MSN and I-JEPA encoders", None, ("vit_mae", "vit_msn", "ijepa")),
    ("The paper's ViT, AugReg and other classic ones", "", ("vit",)),
)


def family(name):
    """The docs page's family of a timm architecture (the first of ``FAMILIES`` its name holds)."""
    return next(heading for heading, part, _ in FAMILIES if part is not None and part in name)


def render_docs():
    """The docs page: one table of the families of both hubs (timm's architectures and
    transformers' model types), then what is not built and why. Reads the table and
    keras-vit (no timm needed)."""
    sys.path.insert(0, ROOT)
    from keras_vit.checkpoints import timm_config, transformers_config
    from keras_vit.checkpoints.timm_architectures import ARCHITECTURES, TIMM_VERSION

    reasons = {name: timm_config.support(name) for name in sorted(ARCHITECTURES)}
    built = [name for name, reason in reasons.items() if reason is None]
    model_types = {name: record.loads_as for name, record in transformers_config.built_model_types().items()}
    placed = {t for _, _, types in FAMILIES for t in types}
    assert placed == set(model_types), f"model types in no family, or not built: {placed ^ set(model_types)}"
    lines = [
        "# The ViT family by hub name",
        "",
        "<!-- Generated by scripts/make_timm_table.py from keras_vit/checkpoints/timm_architectures.json",
        "     and keras_vit/checkpoints/transformers_config.py. -->",
        "",
        f"keras-vit builds {len(built)} of the {len(reasons)} architectures with pretrained weights in",
        f"timm {TIMM_VERSION}'s `vision_transformer`, `deit`, `eva` and `beit` modules, and",
        f"{len(model_types)} model types of HF transformers. Any of their checkpoints loads by its hub name,",
        '`keras_vit.create_model("hf-hub:timm/<architecture>.<tag>")` or',
        '`keras_vit.create_model("hf-hub:<org>/<name>")` for a transformers repository, or from a folder',
        "holding its `config.json` and `model.safetensors`: architecture, weights, pre-processing and",
        "class names (see [Pretrained models by name](presets.md)). `keras_vit.list_models()` names",
        'timm\'s architectures too, and `keras_vit.create_model("<architecture>")` builds one with',
        "random weights, as `timm.create_model` does. Of an image-text repository (CLIP, SigLIP,",
        "SigLIP 2, open_clip's layout), `keras_vit.load_model` gives both towers, their tokenizer and",
        "scores: see [Image and text](image-text.md).",
        "",
        "## What loads",
        "",
        "| family | timm architectures | transformers model types |",
        "|---|---|---|",
    ]
    groups = {heading: [] for heading, _, _ in FAMILIES}
    for name in built:
        groups[family(name)].append(name)
    for heading, _, types in FAMILIES:
        timm_cell = ", ".join(f"`{n}`" for n in groups[heading]) or "-"
        types_cell = ", ".join(f"`{t}` ({model_types[t]})" for t in types) or "-"
        lines.append(f"| {heading} | {timm_cell} | {types_cell} |")
    lines += [
        "",
        "## Not built yet",
        "",
        "| timm architecture or transformers model type | why |",
        "|---|---|",
    ]
    prefix = "keras-vit does not build these timm options yet: "
    lines += [f"| `{n}` | {r.removeprefix(prefix)} |" for n, r in reasons.items() if r is not None]
    not_yet = sorted((t, r.not_yet) for t, r in transformers_config.MODEL_TYPES.items() if r.read is None)
    lines += [f"| `{t}` (transformers) | {why} |" for t, why in not_yet]
    return "\n".join(lines) + "\n"


def _write(path, text):
    with open(path + ".tmp", "w", encoding="utf-8", newline="\n") as f:
        f.write(text)
    os.replace(path + ".tmp", path)


def main():
    version, architectures, tags = collect()
    _write(
        OUT,
        render(version, "architectures", {name: dict(sorted(args.items())) for name, args in architectures.items()}),
    )
    print(f"{OUT}: {len(architectures)} architectures (timm {version})")
    _write(TAGS_OUT, render(version, "pretrained", tags))
    print(f"{TAGS_OUT}: {sum(map(len, tags.values()))} pretrained tags")
    _write(DOCS, render_docs())
    print(f"{DOCS}: written")


if __name__ == "__main__":
    main()
