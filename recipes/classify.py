"""Classify image files with a model file or a pretrained preset: the top classes of each.

    python recipes/classify.py vit_b16.augreg2_in21k_ft_in1k photo.jpg   # downloads once
    python recipes/classify.py saved_models/main-finetune/model.keras digits/ --top 3

The same as ``keras-vit classify``; the code is ``keras_vit/commands/classify.py``.
"""

from _command import run

if __name__ == "__main__":
    run("classify")
