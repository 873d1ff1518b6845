"""The pretrained presets as a table (``keras-vit presets [PATTERN]``), and where timm's ViT
family is; one preset's card when the pattern names exactly one: file, numerics,
pre-processing, top-1, licence."""

import sys

from keras_vit import commands


def build_parser():
    parser = commands.parser("presets", __doc__)
    about = "a glob over preset names, e.g. 'vit_b16.*'; a whole name shows that preset's card"
    parser.add_argument("pattern", nargs="?", default="*", help=about)
    return parser


def table(pattern="*"):
    """The presets matching ``pattern`` as a Markdown table.

    >>> print(table("vit_ti16.augreg_in21k_ft_in1k*"))
    | preset | image size | classes | ImageNet top-1 | file layout |
    | --- | --- | --- | --- | --- |
    | vit_ti16.augreg_in21k_ft_in1k | 224 | 1000 | 75.45 | original |
    | vit_ti16.augreg_in21k_ft_in1k_384 | 384 | 1000 | 78.44 | original |
    """
    from keras_vit.presets.catalog import PRESETS, list_presets  # here: presets --help needs no catalog

    lines = ["| preset | image size | classes | ImageNet top-1 | file layout |", "| --- | --- | --- | --- | --- |"]
    for name in list_presets(pattern):
        p = PRESETS[name]
        top1 = f"{p.top1:.2f}" if p.top1 is not None else "-"
        lines.append(f"| {name} | {p.image_size} | {p.num_classes} | {top1} | {p.layout} |")
    return "\n".join(lines)


def family_line():
    """Where timm's ViT family is: its checkpoints load by hub name, not as presets."""
    from keras_vit.checkpoints.timm_config import buildable

    return (
        f"And timm's ViT family, {len(buildable())} architectures by hub name: hf-hub:timm/<architecture>.<tag> "
        "(keras_vit.list_models() names them; docs/guide/timm-architectures.md)."
    )


def main(argv=None):
    pattern = build_parser().parse_args(argv).pattern
    from keras_vit.presets.catalog import PRESETS, list_presets

    names = list_presets(pattern)
    if not names:
        print(f"error: no preset matches {pattern!r}; keras-vit presets lists them all.", file=sys.stderr)
        return 2
    print(PRESETS[names[0]].card() if len(names) == 1 else table(pattern))
    if len(names) > 1:
        print(family_line())
    return 0
