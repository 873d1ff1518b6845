"""Evaluating a ViT's representation: the paper's few-shot linear evaluation; an image-text
model's zero-shot accuracy and retrieval recall."""

import typing

from keras_vit.lazy import package

if typing.TYPE_CHECKING:  # the names, as type checkers, the API reference and keras_vit.lazy.declared read them
    from keras_vit.evaluation.fewshot import (
        FewShotCallback,
        FewShotResult,
        RidgeProbe,
        extract_features,
        fewshot_eval,
        fewshot_linear_eval,
        representation_model,
        sample_shots,
    )
    from keras_vit.evaluation.zero_shot import (
        TEMPLATE_SETS,
        read_captions,
        retrieval_recall,
        template_set,
        zero_shot_accuracy,
    )

# Imported on first use (``keras_vit.lazy``): ``keras-vit fewshot --help`` reads the probe's
# defaults alone (``keras_vit.evaluation.fewshot_defaults``), with no backend.
__all__, __getattr__, __dir__ = package(__name__, __file__)
