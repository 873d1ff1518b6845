"""Seeing inside a trained ViT: the paper's section 4.5 figures, as PNGs and CSVs.

    python recipes/inspect_model.py saved_models/main-finetune/model.keras
    python recipes/inspect_model.py vit_b16.augreg2_in21k_ft_in1k --images photos/

The same as ``keras-vit inspect``; the code is ``keras_vit/commands/inspect_model.py``.
(Not ``inspect.py``: a script's folder comes first on ``sys.path``, and that name would
hide Python's own ``inspect`` module.)
"""

from _command import run

if __name__ == "__main__":
    run("inspect")
