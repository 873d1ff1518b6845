"""Fine-tune a pre-trained ViT at a higher resolution with the paper's recipe (SGD with
momentum, cosine decay, position embeddings interpolated, a fresh zero head).

    python recipes/finetune.py --init-from saved_models/main-pretrain/model.keras
    python recipes/finetune.py --recipe paper_finetune --init-from ViT-B_16.npz \
        --init-model vit_b16 --dataset cifar10 --image-size 384

The same as ``keras-vit finetune``; the code is ``keras_vit/commands/finetune.py``.
"""

from _command import run

if __name__ == "__main__":
    run("finetune")
