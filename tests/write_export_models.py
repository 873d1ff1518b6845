"""Writes tests/data/export_models/: the trained tiny ViT and hybrid that tests/test_export.py
exports in every format (``export_models.train_for_export`` trains them on the digits), so
that no backend trains them again in its test run.

    KERAS_BACKEND=tensorflow python tests/write_export_models.py

Committed as written; run again after a change to how they are built or trained (the files
there are replaced).
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def main():
    import export_models

    import keras_vit
    from keras_vit.export import digits_images

    os.makedirs(export_models.TRAINED, exist_ok=True)
    digits = {split: digits_images(export_models.IMAGE_SIZE, split) for split in ("train", "test")}
    for config in (export_models.TINY_VIT, export_models.TINY_HYBRID):
        trained = export_models.train_for_export(config, digits)
        model = type(trained).from_config(trained.get_config())  # without the optimizer's state
        model.set_weights(trained.get_weights())
        path = export_models.trained_path(config["name"])
        keras_vit.save_model(model, path)
        print(config["name"], os.path.getsize(path), "bytes")


if __name__ == "__main__":
    main()
