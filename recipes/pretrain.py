"""Pre-train a ViT with the paper's recipe (Adam, weight decay 0.1, warm-up + linear decay).

    python recipes/pretrain.py                                  # embedded digits, small ViT
    python recipes/pretrain.py --recipe paper_pretrain --dataset imagenet2012 --model vit_b16
    python recipes/pretrain.py --learning-rate 3e-4 --epochs 5  # any RecipeConfig field
    python recipes/pretrain.py --objective masked_patch_prediction   # self-supervised
    python recipes/pretrain.py --help                           # every flag and its default

The same as ``keras-vit pretrain``; the code is ``keras_vit/commands/pretrain.py``.
"""

from _command import run

if __name__ == "__main__":
    run("pretrain")
