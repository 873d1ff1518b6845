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
    # "vit": the paper's ViT, which every engine builds; "dinov3": DINOv3 (rotary embeddings,
    # registers, LayerScale, no position table), which keras-vit, timm and keras-hub build.
    family: str = "vit"
    num_register_tokens: int = 0
    qkv_bias: bool = True


# Row name -> (keras-vit name, timm name, image size, architecture overrides). Plain data,
# so that the parent process checks --models without importing Keras and a backend.
MODELS = {
    "vit_ti16@224": ("vit_ti16", "vit_tiny_patch16_224", 224, {}),
    "vit_s16@224": ("vit_s16", "vit_small_patch16_224", 224, {}),
    "vit_b16@224": ("vit_b16", "vit_base_patch16_224", 224, {}),
    "vit_b16@384": ("vit_b16", "vit_base_patch16_384", 384, {}),
    # DINOv3 ViT-S/16 (timm's eva module: keras-vit builds it by timm's name), rotary embeddings.
    "dinov3_s16@224": ("vit_small_patch16_dinov3", "vit_small_patch16_dinov3", 224, {}),
    # --quick: ViT-Ti's widths, 2 blocks, 32x32 images (4 patches).
    "tiny": ("vit_ti16", "vit_tiny_patch16_224", 32, {"depth": 2}),
}


def spec(name, image_size, **overrides):
    """The ``ViTSpec`` a row builds: a keras-vit variant's, or a timm architecture's."""
    import keras_vit
    from keras_vit.checkpoints import timm_config
    from keras_vit.models.spec import ViTSpec

    if name in timm_config.buildable():
        base = ViTSpec.from_config(timm_config.spec_options(timm_config.architecture_args(name)))
    else:
        base = keras_vit.get_spec(name)
    return base.replace(image_size=image_size, **overrides)


def _arch(name, timm_name, image_size, **overrides):
    built = spec(name, image_size, **overrides)
    return Arch(
        name, image_size, built.patch_size, built.hidden_size, built.depth, built.num_heads, built.mlp_dim, timm_name,
        family="dinov3" if built.option("rope") == "dinov3" else "vit", num_register_tokens=built.num_register_tokens,
        qkv_bias=built.qkv_bias,
    )  # fmt: skip


def architectures():
    """``MODELS`` resolved to ``Arch`` rows (imports keras_vit: called in engine processes)."""
    return {
        key: _arch(name, timm_name, size, **overrides) for key, (name, timm_name, size, overrides) in MODELS.items()
    }
