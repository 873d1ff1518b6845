"""The pretrained presets as a table (``keras-vit presets [PATTERN]``), and where timm's ViT
family is; one preset's card when the pattern names exactly one: file, numerics,
pre-processing, top-1, licence. ``--timm``: timm's pretrained names keras-vit builds
(``<architecture>.<tag>``, which ``create_model`` takes as timm does) and their hub
repositories."""

import sys

from keras_vit import commands


def build_parser():
    parser = commands.parser("presets", __doc__)
    about = "a glob over preset names, e.g. 'vit_b16.*'; a whole name shows that preset's card"
    parser.add_argument("pattern", nargs="?", default="*", help=about)
    parser.add_argument("--timm", action="store_true", help="list timm's pretrained names keras-vit builds instead")
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


def timm_table(names):
    """timm's pretrained ``names`` (``timm_names.pretrained_names``) as a Markdown table (0
    classes: the pooled features).

    >>> from keras_vit.presets.timm_names import pretrained_names
    >>> print(timm_table(pretrained_names("vit_small_patch14_reg4_dinov2*")))
    | timm name | image size | classes | hub repository |
    | --- | --- | --- | --- |
    | vit_small_patch14_reg4_dinov2.lvd142m | 518 | 0 | timm/vit_small_patch14_reg4_dinov2.lvd142m |
    """
    from keras_vit.checkpoints.timm_pretrained import PRETRAINED

    lines = ["| timm name | image size | classes | hub repository |", "| --- | --- | --- | --- |"]
    for name in names:
        architecture, tag = name.split(".", 1)
        repository, classes, size = PRETRAINED[architecture][tag]
        shown = size if isinstance(size, int) else "x".join(map(str, size))
        lines.append(f"| {name} | {shown} | {classes} | {repository} |")
    return "\n".join(lines)


def family_line():
    """Where timm's ViT family is: its checkpoints load by hub name, not as presets."""
    from keras_vit.checkpoints.timm_config import buildable

    return (
        f"And timm's ViT family, {len(buildable())} architectures by timm's names, <architecture>.<tag> or "
        "hf-hub:timm/<architecture>.<tag> (keras-vit presets --timm lists them; docs/guide/timm-architectures.md)."
    )


def main(argv=None):
    args = build_parser().parse_args(argv)
    pattern = args.pattern
    if args.timm:
        from keras_vit.presets.timm_names import pretrained_names

        names = pretrained_names(pattern)
        if not names:
            print(f"error: no timm name matches {pattern!r}; keras-vit presets --timm lists them all.", file=sys.stderr)
            return 2
        print(timm_table(names))
        return 0
    from keras_vit.presets.catalog import PRESETS, list_presets

    names = list_presets(pattern)
    if not names:
        print(f"error: no preset matches {pattern!r}; keras-vit presets lists them all.", file=sys.stderr)
        return 2
    print(PRESETS[names[0]].card() if len(names) == 1 else table(pattern))
    if len(names) > 1:
        print(family_line())
    return 0
