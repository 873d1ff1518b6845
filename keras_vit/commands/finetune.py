"""Fine-tune a pre-trained ViT at a higher resolution with the paper's recipe.

SGD with momentum 0.9, cosine decay, gradient clipping at global norm 1, no weight
decay; the position embeddings are interpolated to the new patch grid and a fresh
zero-initialised head is put on for the new classes.

    python recipes/finetune.py --init_from saved_models/pretrain-vit_ti16-digits/model.keras
    python recipes/finetune.py --preset paper_finetune --init_from ViT-B_16.npz \
        --init_model vit_b16 --dataset cifar10 --image_size 384
"""

import sys

from keras_vit.training import finetune, run_command_line


def main(argv=None):
    _, result = run_command_line(finetune, sys.argv[1:] if argv is None else argv, "digits_finetune")
    checks = ", ".join(f"{k} {v:.4f}" for k, v in result.checks.items())
    print(f"fine-tuning start: {checks}")
    print(f"fine-tuning: test accuracy {result.test_accuracy:.4f} in {result.seconds:.1f} s -> {result.run_dir}")
    return result


if __name__ == "__main__":
    main()
