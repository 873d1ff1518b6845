"""Writes tests/data/saved_models/: small ``.keras`` files of the model variants, each with
the outputs it gave when written (``<name>.npz``: ``images``, ``outputs``), so that a later
version of keras-vit is tested against files an earlier one wrote (test_loading.py).

    KERAS_BACKEND=torch python tests/write_saved_models.py

Committed as written; run again only to add a variant (the files already there stay).
"""

import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

FOLDER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "saved_models")
SMALL = dict(image_size=16, patch_size=4, hidden_size=16, depth=2, num_heads=2, mlp_dim=32, num_classes=3)
# One file per family of layers: the attention kinds, the block forms and the poolings.
VARIANTS = {
    "plain": dict(representation_size=8),
    "rotary_registers_swiglu": dict(
        rope="axial",
        num_register_tokens=2,
        gated_mlp=True,
        mlp_activation="silu",
        layer_scale_init=0.1,
        qk_norm=True,
        mlp_norm=True,
        pooling="gap",
        class_token=False,
        position_embedding="none",
    ),
    "grouped_heads_post_norm": dict(num_heads=4, num_kv_heads=2, residual_post_norm=True),
    "relative_bias": dict(relative_position_bias=True, position_embedding="none", layer_scale_init=0.1),
    "differential_parallel": dict(
        differential_attention=True, parallel_blocks=True, num_register_tokens=1, pooling="gap", class_token=False
    ),
    "attention_pooling": dict(pooling="map", class_token=False),
    "hybrid": dict(resnet_block_units=(1,), resnet_width=8, resnet_num_groups=4, patch_size=1, image_size=16),
}


def main():
    import keras
    from helpers import randomize_keras, to_numpy

    import keras_vit

    os.makedirs(FOLDER, exist_ok=True)
    for name, options in VARIANTS.items():
        path = os.path.join(FOLDER, f"{name}.keras")
        if os.path.exists(path):
            continue
        keras.utils.set_random_seed(0)
        model = keras_vit.VisionTransformer(**{**SMALL, **options}, name=name)
        randomize_keras(model)
        size = model.spec.image_size
        images = np.random.default_rng(0).uniform(-1, 1, (2, *size, 3)).astype("float32")
        outputs = to_numpy(model.predict_on_batch(images))
        keras_vit.save_model(model, path)
        np.savez(os.path.join(FOLDER, f"{name}.npz"), images=images, outputs=outputs)
        print(name, os.path.getsize(path), "bytes")


if __name__ == "__main__":
    main()
