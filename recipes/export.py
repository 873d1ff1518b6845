"""Export a trained model for serving: TF SavedModel, LiteRT (TFLite), ONNX and .pt2, each verified.

    python recipes/export.py saved_models/main-finetune/model.keras \
        --output saved_models/main-finetune/export --representative-data digits
    python recipes/export.py ViT-B_16.npz --model vit_b16 --formats savedmodel,onnx --output export/

The same as ``keras-vit export``; the code is ``keras_vit/commands/export.py``.
"""

from _command import run

if __name__ == "__main__":
    run("export")
