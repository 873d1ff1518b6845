"""Writes tests/data/export_models/: the trained tiny ViT and hybrid that tests/test_export.py
exports in every format (``train_for_export`` trains them on the digits), so that no backend
trains them again in its test run.

    KERAS_BACKEND=tensorflow python tests/write_export_models.py

Committed as written; run again after a change to how they are built or trained (the files
there are replaced).
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def main():
    import test_export

    import keras_vit

    os.makedirs(test_export.TRAINED, exist_ok=True)
    digits = {split: test_export.digits_images(test_export.IMAGE_SIZE, split) for split in ("train", "test")}
    for param in test_export.MODELS:
        config = param.values[0]
        trained = test_export.train_for_export(config, digits)
        model = type(trained).from_config(trained.get_config())  # without the optimizer's state
        model.set_weights(trained.get_weights())
        path = test_export.trained_path(config["name"])
        keras_vit.save_model(model, path)
        print(config["name"], os.path.getsize(path), "bytes")


if __name__ == "__main__":
    main()
