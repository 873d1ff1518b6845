"""Pre-train a ViT with the paper's recipe (Adam, weight decay 0.1, warm-up + linear decay).

    keras-vit pretrain                                  # embedded digits, small ViT
    keras-vit pretrain --recipe paper_pretrain --dataset imagenet2012 --model vit_b16
    keras-vit pretrain --learning-rate 3e-4 --epochs 5  # any RecipeConfig field
    keras-vit pretrain --objective masked_patch_prediction   # self-supervised
    keras-vit pretrain --objective mae --decoder-width 64     # a masked autoencoder

Writes saved_models/<run>/ (model.keras, best.keras, backup/, log.csv, tensorboard/).

--objective classification (the default) trains on the dataset's labels.
--objective masked_patch_prediction is the paper's self-supervised pre-training
(section 4.6): half of the patch embeddings are corrupted (80% [mask], 10% another
patch's, 10% kept) and the model predicts each corrupted patch's 3-bit mean colour (512
classes); the labels are unused, and the accuracy printed is that colour accuracy on the
corrupted patches. ``keras-vit finetune`` fine-tunes its model.keras as any other: the
[mask] embedding and the colour head are dropped, a fresh zero head is put on.
--objective mae pre-trains a masked autoencoder (He et al., 2022): --mask-ratio of each
image's patches (0.75) are hidden, the encoder sees the rest only, and a decoder of its own
(--decoder-width, --decoder-depth, --decoder-heads) reconstructs the hidden patches' pixels;
the loss printed is that reconstruction's on the hidden patches. ``keras-vit finetune``
fine-tunes its model.keras as any other: the decoder is dropped.
"""

import sys

from keras_vit.commands import recipe_flags


def build_parser():
    return recipe_flags.build_parser("pretrain", "digits_pretrain", __doc__)


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    config, result = recipe_flags.run_command_line("pretrain", argv, "digits_pretrain", "pretrain", __doc__)
    print(f"{result.measured or 'pre-training'}: {result.summary()}")
    return result
