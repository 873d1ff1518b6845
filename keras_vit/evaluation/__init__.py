"""Evaluating a ViT's representation: the paper's few-shot linear evaluation."""

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

__all__ = [
    "FewShotCallback",
    "FewShotResult",
    "RidgeProbe",
    "extract_features",
    "fewshot_eval",
    "fewshot_linear_eval",
    "representation_model",
    "sample_shots",
]
