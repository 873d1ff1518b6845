"""Top-1 agreement of a trained model in reduced precision with the same model in float32.

On the embedded digits test split, on the current backend (KERAS_BACKEND), one row per
precision: ``mixed_bfloat16`` (the model rebuilt from its spec under that policy with the
same weights) and Keras' own quantization (``model.quantize(mode)``: int8, float8, int4).

    python recipes/main.py                     # writes saved_models/main-finetune/model.keras
    KERAS_BACKEND=torch python benchmarks/precision_agreement.py saved_models/main-finetune/model.keras
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

PRECISIONS = ("mixed_bfloat16", "int8", "float8", "int4")


def reduced(model, precision):
    """The same weights in ``precision``: a mixed policy, or a Keras quantization mode."""
    if precision.startswith("mixed_"):
        copy = keras_vit.VisionTransformer(model.spec, dtype=precision, name=model.name)
        copy.set_weights(model.get_weights())
        return copy
    copy = keras_vit.VisionTransformer.from_config(model.get_config())
    copy.set_weights(model.get_weights())
    copy.quantize(precision)
    return copy


def agreement(model_file, precisions=PRECISIONS):
    """Rows ``(precision, top-1 agreement with float32, accuracy, max |logit difference|)``."""
    model = keras_vit.load_model(model_file)  # the weights, not the optimizer
    images, labels = preprocess_split(load_dataset("digits").test, model.input_shape[1])
    reference = model.predict(images, verbose=0)
    float32 = reference.argmax(-1)
    rows = [("float32", 1.0, float(np.mean(float32 == labels)), 0.0)]
    for precision in precisions:
        logits = np.asarray(reduced(model, precision).predict(images, verbose=0), "float32")
        predicted = logits.argmax(-1)
        difference = float(np.abs(logits - reference).max())
        rows.append((precision, float(np.mean(predicted == float32)), float(np.mean(predicted == labels)), difference))
    return rows


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model_file")
    parser.add_argument("--precisions", default=",".join(PRECISIONS))
    args = parser.parse_args(argv)
    rows = agreement(args.model_file, args.precisions.split(","))
    print(f"backend {keras.backend.backend()}, digits test split")
    print(f"{'precision':<16}{'top-1 agreement':>18}{'accuracy':>10}{'max |logit diff|':>18}")
    for precision, same, accuracy, difference in rows:
        print(f"{precision:<16}{same:>18.4f}{accuracy:>10.4f}{difference:>18.4f}")
    return rows


if __name__ == "__main__":
    main()
