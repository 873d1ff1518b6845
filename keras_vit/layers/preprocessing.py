"""Raw images to a model's input as its checkpoint was evaluated: resize, crop, normalise.

A pretrained ViT comes with its evaluation pre-processing (timm's ``pretrained_cfg``:
``interpolation``, ``crop_pct``, ``crop_mode``, ``mean``, ``std``). ``ImagePreprocessing``
is that recipe as a Keras layer, saved with the model, run by the exports inside their
graphs, and numerically PIL's resize (which timm and torchvision evaluate with) on every
backend.

The resize is separable: one matrix product along the width, then one along the height,
with PIL's filter weights computed in numpy from the input size and the center crop folded
in (only the kept rows and columns are computed). Matrix products are in every runtime the
exports target (LiteRT built-ins, ONNX), where resize ops with antialiasing are not.
"""

import functools
import math
import numbers

import keras
import numpy as np

from keras_vit import checks, internals
from keras_vit.data.preprocessing import IMAGENET_MEAN, IMAGENET_STD, check_normalization
from keras_vit.resampling import FILTERS as INTERPOLATIONS
from keras_vit.resampling import axis_weights
from keras_vit.vocabulary import CROP_MODES

# Keras' base for its own pre-processing layers: inside a tf.data graph its ``self.backend``
# is TensorFlow's, so the layer maps over tf.data on every backend (not public: internals.py).
_DataLayer = internals.data_layer_base()


@functools.lru_cache(maxsize=64)
def _static_axis_weights(size, resized, start, count, interpolation, antialias):
    """``axis_weights`` for known sizes, in float64 then float32; None for the identity."""
    if size == resized == count and start == 0:
        return None
    weights = axis_weights(np, size, resized, start, count, interpolation, antialias, "float64").astype(np.float32)
    weights.setflags(write=False)  # shared by every call with these sizes
    return weights


def _center_offset(excess):
    """``int(round(excess / 2))`` with Python's round half to even (torchvision's
    ``center_crop``), in integer arithmetic: the same for ints and integer tensors."""
    half = excess // 2
    return half + (excess % 2) * (half % 2)


@keras.saving.register_keras_serializable(package="keras_vit")
class ImagePreprocessing(_DataLayer):
    """Raw 0..255 images to a model's input: resize, center crop, normalise.

    The evaluation transform of timm and torchvision (``Resize``, ``CenterCrop``,
    ``Normalize`` on PIL images), as one layer that gives the same numbers on TensorFlow,
    JAX and PyTorch, inside a model, in ``tf.data`` (``dataset.map(layer)``, any backend)
    and in the exported SavedModel, LiteRT and ONNX graphs:

    1. ``crop_mode="center"``: resize keeping the aspect ratio so the image covers
       ``floor(image_size / crop_fraction)`` (for a square size: the shorter side to that,
       the longer to ``int(scaled * long / short)``), then center crop ``image_size``.
       ``crop_mode="squash"``: resize each side to ``floor(image_size / crop_fraction)``
       (straight to ``image_size`` when ``crop_fraction`` is 1), then center crop. Both as
       timm's ``transforms_imagenet_eval``.
    2. The resize is PIL's: per axis, a filter stretched by the downscale factor when
       ``antialias`` (triangle for bilinear, Keys cubic ``a=-0.5`` for bicubic), weights
       normalised to sum 1 at the borders, width first, clipped to 0..255 after each pass.
       PIL rounds to uint8 after each pass and this layer does not, so the result is
       within about one pixel level of PIL's (see ``tests/test_preprocessing.py``). Sides
       already at their size are left alone (no resize at all for images of the output
       size and no crop).
    3. ``(x / 255 - mean) / std`` per channel, in float32.

    When the input's height or width is not known when the graph is built (unbatched
    images of varying sizes in ``tf.data``), the same weights are computed in the graph in
    float32 from the runtime size: they agree with the static path to about 1e-3 pixel
    levels (the float32 rounding of the filter positions).

    Args:
        image_size: the output ``(height, width)``, or one int for a square.
        crop_fraction: the part of the resized image kept by the center crop, in (0, 1]
            (timm's ``crop_pct``, e.g. 0.875 or 0.9); 1 keeps the whole of the shorter side.
        crop_mode: ``"center"`` (keep the aspect ratio, crop the longer side) or
            ``"squash"`` (stretch each side, then crop only what ``crop_fraction`` drops).
        interpolation: ``"bicubic"``, ``"bilinear"`` or ``"nearest"`` (PIL's filters).
        antialias: when downsampling, widen the filter by the downscale factor as PIL
            does (False: the plain filter, as ``tf.image.resize`` without antialiasing).
        mean: per-channel mean in 0..1 units (one number for all channels), e.g.
            ``(0.5, 0.5, 0.5)`` for the original ViT's [-1, 1] or ImageNet's
            ``(0.485, 0.456, 0.406)``.
        std: per-channel standard deviation in 0..1 units (one number for all channels).
        **kwargs: Keras layer arguments (``name``, ...); the dtype defaults to float32.

    Input: a batch ``(N, H, W, C)`` or one image ``(H, W, C)`` of 0..255 values, any
    numeric dtype (uint8 typically). Output: float32 ``(N, height, width, C)`` (or
    ``(height, width, C)``).

    Examples:
        >>> import numpy as np
        >>> layer = ImagePreprocessing(224, crop_fraction=0.875, interpolation="bicubic")
        >>> images = np.full((2, 300, 400, 3), 255, np.uint8)
        >>> out = keras.ops.convert_to_numpy(layer(images))
        >>> out.shape, out.dtype, round(float(out.min()), 4), round(float(out.max()), 4)
        ((2, 224, 224, 3), dtype('float32'), 1.0, 1.0)
        >>> tuple(ImagePreprocessing.from_normalization(None, 32)(np.zeros((48, 64, 3), np.uint8)).shape)
        (32, 32, 3)
    """

    def __init__(
        self,
        image_size,
        crop_fraction=1.0,
        crop_mode="center",
        *,
        interpolation="bicubic",
        antialias=True,
        mean=(0.5, 0.5, 0.5),
        std=(0.5, 0.5, 0.5),
        **kwargs,
    ):
        kwargs.setdefault("dtype", "float32")  # resizing 0..255 pixels wants float32
        super().__init__(**kwargs)
        self.image_size = checks.pair(image_size)
        if (
            isinstance(crop_fraction, bool)
            or not isinstance(crop_fraction, numbers.Real)
            or not 0.0 < crop_fraction <= 1.0
        ):
            raise ValueError(
                f"crop_fraction must be a number in (0, 1] (timm's crop_pct, e.g. 0.875); "
                f"got crop_fraction={crop_fraction!r}."
            )
        self.crop_fraction = float(crop_fraction)
        self.crop_mode = _one_of(crop_mode, CROP_MODES, "crop_mode")
        self.interpolation = _one_of(interpolation, INTERPOLATIONS, "interpolation")
        if not isinstance(antialias, (bool, np.bool_)):
            raise ValueError(f"antialias must be True or False; got antialias={antialias!r}.")
        self.antialias = bool(antialias)
        self.mean = _channel_values(mean, "mean", positive=False)
        self.std = _channel_values(std, "std", positive=True)
        if len(self.mean) != len(self.std) and 1 not in (len(self.mean), len(self.std)):
            raise ValueError(
                f"mean and std must have one value per channel (or one for all); got mean={mean!r}, std={std!r}."
            )
        # x * scale + offset == (x / 255 - mean) / std.
        mean, std = np.asarray(self.mean, np.float64), np.asarray(self.std, np.float64)
        self._scale = (1.0 / (255.0 * std)).astype(np.float32)
        self._offset = (-mean / std).astype(np.float32)
        self.scaled_size = tuple(math.floor(s / self.crop_fraction) for s in self.image_size)

    @classmethod
    def from_normalization(cls, normalization, image_size, **kwargs):
        """The layer for one of the recipes' ``normalization`` names.

        ``"vit"``: mean and std 0.5 ([-1, 1]); ``"imagenet"``: ImageNet's mean and std
        (``keras_vit.data.IMAGENET_MEAN`` / ``IMAGENET_STD``); ``None``: raw 0..255 out
        (mean 0, std 1/255). The resize defaults to the recipes' evaluation transform
        (``keras_vit.data.resize``: bilinear, no crop, no antialiasing); ``kwargs`` override
        it or give any other argument.

        >>> layer = ImagePreprocessing.from_normalization("imagenet", 16, crop_fraction=0.875)
        >>> layer.mean, layer.crop_mode, layer.interpolation
        ((0.485, 0.456, 0.406), 'squash', 'bilinear')
        """
        check_normalization(normalization)
        mean, std = {
            "vit": (0.5, 0.5),
            "imagenet": (IMAGENET_MEAN, IMAGENET_STD),
            None: (0.0, 1.0 / 255.0),
        }[normalization]
        options = dict(crop_mode="squash", interpolation="bilinear", antialias=False, mean=mean, std=std)
        return cls(image_size, **{**options, **kwargs})

    def _resize_plan(self, xp, height, width):
        """``((resized_height, top), (resized_width, left))`` for an input of ``height`` x
        ``width`` (ints, or integer tensors with ``xp`` a backend's numpy)."""
        (out_h, out_w), (scaled_h, scaled_w) = self.image_size, self.scaled_size
        if self.crop_mode == "squash":
            resized_h, resized_w = scaled_h, scaled_w
        else:
            # Scale by whichever side needs more, so the image covers scaled_h x scaled_w;
            # the other side as torchvision's Resize: int(scaled * other / side).
            by_height = scaled_h * width >= scaled_w * height
            resized_h = xp.where(by_height, scaled_h, (scaled_w * height) // width)
            resized_w = xp.where(by_height, (scaled_h * width) // height, scaled_w)
        return (resized_h, _center_offset(resized_h - out_h)), (resized_w, _center_offset(resized_w - out_w))

    def _weights(self, height, width):
        """The height and width resize matrices ``(in, out)`` (None: that axis is kept)."""
        out_h, out_w = self.image_size
        options = dict(interpolation=self.interpolation, antialias=self.antialias)
        if isinstance(height, int) and isinstance(width, int):
            (resized_h, top), (resized_w, left) = self._resize_plan(np, height, width)
            return (
                _static_axis_weights(height, int(resized_h), int(top), out_h, **options),
                _static_axis_weights(width, int(resized_w), int(left), out_w, **options),
            )
        # Sizes known only at run time (tf.data on images of varying sizes): the same
        # weights, computed in the graph in float32 (Keras' TensorFlow ops turn float64
        # into float32 when another backend is the process's).
        xp = self.backend.numpy
        (resized_h, top), (resized_w, left) = self._resize_plan(xp, height, width)
        return (
            axis_weights(xp, height, resized_h, top, out_h, dtype="float32", **options),
            axis_weights(xp, width, resized_w, left, out_w, dtype="float32", **options),
        )

    def call(self, images):
        ops = self.backend  # Keras' backend ops; TensorFlow's inside tf.data (see _DataLayer)
        x = ops.cast(images, "float32")
        if len(x.shape) not in (3, 4):
            raise ValueError(
                f"Expected images of shape (batch, height, width, channels) or (height, width, "
                f"channels); got shape {tuple(x.shape)}."
            )
        channels = x.shape[-1]
        expected = max(len(self.mean), len(self.std))
        if channels is not None and expected > 1 and channels != expected:
            raise ValueError(
                f"Expected images with {expected} channels (one per mean/std value); got shape {tuple(x.shape)}."
            )
        height, width = x.shape[-3], x.shape[-2]
        if height is None or width is None:
            height, width = ops.core.shape(x)[-3:-1]
        weights_h, weights_w = self._weights(height, width)
        # Width first, as PIL; clipped like PIL's 8-bit passes (bicubic overshoots).
        for axis, weights in ((-2, weights_w), (-3, weights_h)):
            if weights is not None:
                x = ops.numpy.moveaxis(ops.numpy.matmul(ops.numpy.moveaxis(x, axis, -1), weights), -1, axis)
                if self.interpolation == "bicubic":
                    x = ops.numpy.clip(x, 0.0, 255.0)
        x = ops.numpy.add(ops.numpy.multiply(x, self._scale), self._offset)
        # Computed in float32 whatever the policy (bfloat16 cannot hold 0..255 to one
        # level); returned in the compute dtype, as every Keras layer does.
        return ops.cast(x, self.compute_dtype)

    def compute_output_shape(self, input_shape):
        return (*input_shape[:-3], *self.image_size, input_shape[-1])

    def get_config(self):
        config = super().get_config()
        config.update(
            image_size=list(self.image_size),
            crop_fraction=self.crop_fraction,
            crop_mode=self.crop_mode,
            interpolation=self.interpolation,
            antialias=self.antialias,
            mean=list(self.mean),
            std=list(self.std),
        )
        return config


def _one_of(value, choices, name):
    if value not in choices:
        raise ValueError(f"{name} must be one of {choices}; got {name}={value!r}.")
    return value


def _channel_values(value, name, positive):
    values = tuple(value) if isinstance(value, (tuple, list, np.ndarray)) else (value,)
    ok = len(values) > 0 and all(isinstance(v, numbers.Real) and not isinstance(v, bool) for v in values)
    ok = ok and all(np.isfinite(v) and (v > 0 or not positive) for v in values)
    if not ok:
        kind = "positive numbers" if positive else "numbers"
        raise ValueError(
            f"{name} must be one or one per channel of {kind} in 0..1 units (e.g. (0.5, 0.5, 0.5)); "
            f"got {name}={value!r}."
        )
    return tuple(float(v) for v in values)
