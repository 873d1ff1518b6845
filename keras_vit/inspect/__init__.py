"""Looking into models: what they cost (parameters, FLOPs)."""

from keras_vit.inspect.cost import count_flops, count_parameters

__all__ = ["count_flops", "count_parameters"]
