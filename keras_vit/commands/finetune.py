"""Fine-tune a pre-trained ViT at a higher resolution with the paper's recipe.

SGD with momentum 0.9, cosine decay, gradient clipping at global norm 1, no weight
decay; the position embeddings are interpolated to the new patch grid and a fresh
zero-initialised head is put on for the new classes.

    keras-vit finetune --init-from vit_b16.augreg2_in21k_ft_in1k --dataset photos/
    keras-vit finetune --init-from saved_models/pretrain-vit-d4w128p4-digits/model.keras --image-size 24
    keras-vit finetune --recipe paper_finetune --init-from ViT-B_16.npz \
        --init-model vit_b16 --dataset cifar10 --image-size 384
"""

import sys

from keras_vit.commands import recipe_flags


def build_parser():
    return recipe_flags.build_parser("finetune", "digits_finetune", __doc__)


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    _, result = recipe_flags.run_command_line("finetune", argv, "digits_finetune", "finetune", __doc__)
    checks = ", ".join(f"{k} {v:.4f}" for k, v in result.checks.items())
    print(f"fine-tuning start: {checks}")
    print(f"fine-tuning: {result.summary()}")
    return result
