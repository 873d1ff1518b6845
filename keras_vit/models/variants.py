"""Model variants as data: one row per size, one ``ViTSpec`` per named model.

The widths, depths, heads and MLP sizes are the paper's Table 1 (and timm's), plus
the Ti and S sizes introduced by DeiT and used by the original repository's later
checkpoints ("How to train your ViT?", Steiner et al. 2021).
"""

from keras_vit.models.spec import ResNetSpec, ViTSpec

SIZES = {
    # name: (hidden_size, depth, num_heads, mlp_dim)
    "ti": (192, 12, 3, 768),
    "s": (384, 12, 6, 1536),
    "b": (768, 12, 12, 3072),
    "l": (1024, 24, 16, 4096),
    "h": (1280, 32, 16, 5120),
}
PATCH_SIZES = (8, 14, 16, 32)

# Hybrids: a BiT ResNet whose feature map is cut into 1x1 patches. The number in
# the upstream name (R50+ViT-B/16) is the total stride, set by the ResNet depth:
# three stages give 16, four give 32.
RESNETS = {
    "r26": (2, 2, 2, 2),
    "r50": (3, 4, 9),  # R50 with stage 4 removed and 9 units in stage 3 (paper, sec. 3.1)
    "r50s32": (3, 4, 6, 3),
}
HYBRIDS = {
    # name: (resnet, vit size)
    "r26_vit_s32": ("r26", "s"),
    "r26_vit_b32": ("r26", "b"),
    "r50_vit_b16": ("r50", "b"),
    "r50_vit_l32": ("r50s32", "l"),
}


def _plain_variants():
    for size, (hidden, depth, heads, mlp) in SIZES.items():
        for patch in PATCH_SIZES:
            yield (
                f"vit_{size}{patch}",
                ViTSpec(patch_size=patch, hidden_size=hidden, depth=depth, num_heads=heads, mlp_dim=mlp),
            )


def _hybrid_variants():
    for name, (resnet, size) in HYBRIDS.items():
        hidden, depth, heads, mlp = SIZES[size]
        yield (
            name,
            ViTSpec(
                patch_size=1,
                hidden_size=hidden,
                depth=depth,
                num_heads=heads,
                mlp_dim=mlp,
                resnet=ResNetSpec(RESNETS[resnet]),
            ),
        )


VARIANTS = dict(list(_plain_variants()) + list(_hybrid_variants()))
