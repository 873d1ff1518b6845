"""Few-shot linear evaluation of a model's frozen representation (the paper's section 4).

    python recipes/fewshot.py saved_models/main-pretrain/model.keras          # embedded digits
    python recipes/fewshot.py vit_b16.augreg_in21k --dataset cifar100 --shots 1,5,10,25

The same as ``keras-vit fewshot``; the code is ``keras_vit/commands/fewshot.py``.
"""

from _command import run

if __name__ == "__main__":
    run("fewshot")
