"""The benchmarked architectures: the rows' model names and what every engine needs of them."""

import dataclasses


@dataclasses.dataclass(frozen=True)
class Arch:
    """One benchmarked architecture: a keras-vit name and the fields every peer needs."""

    name: str
    image_size: int
    patch_size: int
    hidden_size: int
    depth: int
    num_heads: int
    mlp_dim: int
    timm_name: str


# Row name -> (keras-vit name, timm name, image size, architecture overrides). Plain data,
# so that the parent process checks --models without importing Keras and a backend.
MODELS = {
    "vit_ti16@224": ("vit_ti16", "vit_tiny_patch16_224", 224, {}),
    "vit_s16@224": ("vit_s16", "vit_small_patch16_224", 224, {}),
    "vit_b16@224": ("vit_b16", "vit_base_patch16_224", 224, {}),
    "vit_b16@384": ("vit_b16", "vit_base_patch16_384", 384, {}),
    # --quick: ViT-Ti's widths, 2 blocks, 32x32 images (4 patches).
    "tiny": ("vit_ti16", "vit_tiny_patch16_224", 32, {"depth": 2}),
}


def _arch(name, timm_name, image_size, **overrides):
    import keras_vit

    spec = keras_vit.get_spec(name).replace(**overrides)
    return Arch(
        name, image_size, spec.patch_size, spec.hidden_size, spec.depth, spec.num_heads, spec.mlp_dim, timm_name
    )


def architectures():
    """``MODELS`` resolved to ``Arch`` rows (imports keras_vit: called in engine processes)."""
    return {
        key: _arch(name, timm_name, size, **overrides) for key, (name, timm_name, size, overrides) in MODELS.items()
    }
