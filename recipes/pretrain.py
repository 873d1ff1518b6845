"""Pre-train a ViT with the paper's recipe (Adam, weight decay 0.1, warm-up + linear decay).

    python recipes/pretrain.py                                  # embedded digits, small ViT
    python recipes/pretrain.py --preset paper_pretrain --dataset imagenet2012 --model vit_b16
    python recipes/pretrain.py --learning_rate 3e-4 --epochs 5  # any RecipeConfig field

Writes saved_models/<run>/ (model.keras, best.keras, backup/, log.csv, tensorboard/).
"""

import sys

from keras_vit.training import parse_args, pretrain


def main(argv=None):
    config = parse_args(sys.argv[1:] if argv is None else argv, default_preset="digits_pretrain")
    result = pretrain(config)
    print(f"pre-training: test accuracy {result.test_accuracy:.4f} in {result.seconds:.1f} s -> {result.run_dir}")
    return result


if __name__ == "__main__":
    main()
