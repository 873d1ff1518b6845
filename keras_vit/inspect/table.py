"""A Markdown table of every named model's parameters and forward GFLOPs.

python -m keras_vit.inspect.table              # at 224x224, 1000 classes
python -m keras_vit.inspect.table --image_size 384
"""

import argparse

from keras_vit.inspect.cost import count_flops, count_parameters
from keras_vit.models.variants import VARIANTS


def variants_table(image_size=224, num_classes=1000, names=None):
    """Markdown rows: name, architecture, parameters (M), GFLOPs per image (see ``count_flops``).

    ``names`` picks variants (default: every one). Variants whose total stride does not
    divide ``image_size`` are named below the table.

    >>> print(variants_table(names=["vit_ti16"]).splitlines()[2])
    | `vit_ti16` | 192 x 12, 3 | 16x16 patches | 197 | 5.7 | 2.5 |
    """
    lines = [
        "| model | width x depth, heads | stem | tokens | parameters (M) | GFLOPs |",
        "| --- | --- | ---: | ---: | ---: | ---: |",
    ]
    unknown = sorted(set(names or ()) - set(VARIANTS))
    if unknown:
        raise ValueError(f"Unknown model names {unknown}: expected names of keras_vit.list_models().")
    variants = {name: spec for name, spec in VARIANTS.items() if names is None or name in names}
    skipped = [name for name, spec in variants.items() if image_size % spec.stride]
    for name, spec in variants.items():  # sizes Ti..H, patches 8..32, then the hybrids
        if name in skipped:
            continue
        spec = spec.replace(image_size=image_size)
        tokens = spec.grid_size[0] * spec.grid_size[1] + spec.num_prefix_tokens
        stem = (
            f"ResNet {spec.resnet.block_units}, stride {spec.stride}"
            if spec.resnet
            else (f"{spec.stride}x{spec.stride} patches")
        )
        params = count_parameters(name, image_size=image_size, num_classes=num_classes)
        flops = count_flops(name, image_size=image_size, num_classes=num_classes)
        lines.append(
            f"| `{name}` | {spec.hidden_size} x {spec.depth}, {spec.num_heads} | {stem} | "
            f"{tokens} | {params / 1e6:.1f} | {flops / 1e9:.1f} |"
        )
    if skipped:  # e.g. patch 14 at 384: not a whole number of patches
        lines.append(f"\n(Not at {image_size}, which their stride does not divide: {', '.join(skipped)}.)")
    return "\n".join(lines)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--image_size", "--image-size", type=int, default=224)
    parser.add_argument("--num_classes", "--num-classes", type=int, default=1000)
    args = parser.parse_args()
    print(variants_table(args.image_size, args.num_classes))
