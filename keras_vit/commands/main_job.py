"""The README's main job: pre-train on the embedded digits, then fine-tune at 1.5x resolution.

Offline, on any backend (KERAS_BACKEND). Extra arguments apply to both phases, e.g.
``keras-vit main --epochs 2`` for a smoke run; any flag of ``keras-vit pretrain --help``.
"""

import os
import sys

from keras_vit.commands import finetune, pretrain, recipe_flags


def build_parser():
    # The flags are pre-training's, given to both phases.
    return recipe_flags.build_parser("main", "digits_pretrain", __doc__)


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if {"-h", "--help"} & set(argv):
        build_parser().print_help()
        return 0
    import keras  # once a phase runs: --help answers without a backend

    from keras_vit.training.epoch_times import per_epoch

    first = pretrain.main(["--run-name", "main-pretrain", *argv])
    # At 1.5x the pre-training resolution, the paper's move from 224 to 384 in small; an
    # --image-size of the user's (later on the line) sets both phases'.
    size = first.model.input_shape[1] * 3 // 2
    model = os.path.join(first.run_dir, "model.keras")
    second = finetune.main(["--run-name", "main-finetune", "--init-from", model, "--image-size", str(size), *argv])
    print(f"\nbackend {keras.backend.backend()}")
    print(f"{'phase':<12}{'image size':>12}{'test accuracy':>16}{'seconds':>10}{'epochs':>8}  time per epoch")
    for phase, result in (("pretrain", first), ("finetune", second)):
        size, epochs, times = result.model.input_shape[1], len(result.epoch_seconds), per_epoch(result.epoch_seconds)
        print(f"{phase:<12}{size:>12}{result.test_accuracy:>16.4f}{result.seconds:>10.1f}{epochs:>8}  {times}")
    return first, second
