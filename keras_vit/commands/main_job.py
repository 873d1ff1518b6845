"""The README's main job: pre-train on the embedded digits, then fine-tune at 1.5x resolution.

Offline, on any backend (KERAS_BACKEND). Extra arguments apply to both phases, e.g.
``python recipes/main.py --epochs 2`` for a smoke run.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import finetune  # noqa: E402
import keras  # noqa: E402
import pretrain  # noqa: E402


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    first = pretrain.main(["--run_name", "main-pretrain", *argv])
    second = finetune.main(
        ["--run_name", "main-finetune", "--init_from", os.path.join(first.run_dir, "model.keras"), *argv]
    )
    print(f"\nbackend {keras.backend.backend()}")
    print(f"{'phase':<12}{'image size':>12}{'test accuracy':>16}{'seconds':>10}")
    for phase, result in (("pretrain", first), ("finetune", second)):
        size = result.model.input_shape[1]
        print(f"{phase:<12}{size:>12}{result.test_accuracy:>16.4f}{result.seconds:>10.1f}")
    return first, second


if __name__ == "__main__":
    main()
