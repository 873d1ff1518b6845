"""Top-1 agreement of a trained model run in mixed_bfloat16 with the same model in float32.

On the embedded digits test split, on the current backend (KERAS_BACKEND):

    python recipes/main.py                     # writes saved_models/main-finetune/model.keras
    KERAS_BACKEND=torch python benchmarks/bf16_agreement.py saved_models/main-finetune/model.keras

The bfloat16 model is rebuilt from the file's architecture under the mixed_bfloat16 policy
(bfloat16 compute, float32 weights) and given the same weights.
"""

import argparse
import os
import sys

import numpy as np

try:
    import keras_vit
except ImportError:  # run from a checkout without installing
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    import keras_vit

import keras

from keras_vit.data import load_dataset, preprocess_split


def agreement(model_file):
    """Returns (top-1 agreement, float32 accuracy, bfloat16 accuracy) on the digits test split."""
    model = keras.saving.load_model(model_file, compile=False)  # the weights, not the optimizer
    images, labels = preprocess_split(load_dataset("digits").test, model.input_shape[1])
    float32 = model.predict(images, verbose=0).argmax(-1)
    mixed = keras_vit.VisionTransformer(model.spec, dtype="mixed_bfloat16")
    mixed.set_weights(model.get_weights())
    bfloat16 = mixed.predict(images, verbose=0).argmax(-1)
    return float(np.mean(float32 == bfloat16)), float(np.mean(float32 == labels)), float(np.mean(bfloat16 == labels))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model_file")
    args = parser.parse_args(argv)
    same, acc32, acc16 = agreement(args.model_file)
    print(f"{keras.backend.backend()}: top-1 agreement {same:.4f}, accuracy float32 {acc32:.4f}, "
          f"mixed_bfloat16 {acc16:.4f} on the digits test split")
    return same


if __name__ == "__main__":
    main()
