"""A masked autoencoder's own options, beside its encoder's ``ViTSpec``: the share of patches
hidden, the decoder's shape and the loss's form, as data. ``MaskedAutoencoder`` takes them,
``keras-vit pretrain --objective mae`` has a flag for each, and a checkpoint's reader
(transformers' ``vit_mae``) states them: this dataclass is the one list."""

import dataclasses
import numbers

from keras_vit import checks
from keras_vit.models.frozen_spec import FrozenSpec, option


@dataclasses.dataclass(frozen=True)
class MAESpec(FrozenSpec):
    """What a masked autoencoder adds to its encoder (He et al.'s defaults).

    Args:
        mask_ratio: the share of each image's patches hidden, in (0, 1); MAE's 0.75.
        decoder_width, decoder_depth, decoder_heads: the decoder's width, blocks and
            attention heads (MAE's 512, 8 and 16 for every encoder size); its blocks take
            the encoder's numerics.
        decoder_mlp_dim: its MLP's hidden width; None: 4 times ``decoder_width``.
        norm_pix_loss: reconstruct pixels normalised per patch (MAE's best), else raw.

    >>> MAESpec(decoder_width=64, decoder_heads=4).mlp_dim
    256
    """

    mask_ratio: float = option(0.75, "the share of each image's patches hidden from the encoder, in (0, 1)")
    decoder_width: int = option(512, "the decoder's width")
    decoder_depth: int = option(8, "the decoder's blocks")
    decoder_heads: int = option(16, "the decoder's attention heads")
    decoder_mlp_dim: int | None = option(None, "the decoder MLP's hidden width; none: 4 x --decoder-width")
    norm_pix_loss: bool = option(
        True,
        "reconstruct each patch's pixels less their mean, over their standard deviation (MAE's); false: the pixels "
        "as they are",
    )

    def __post_init__(self):
        ratio = self.mask_ratio
        if isinstance(ratio, bool) or not isinstance(ratio, numbers.Real) or not 0.0 < ratio < 1.0:
            raise ValueError(f"mask_ratio must be a number in (0, 1), the share of patches hidden; got {ratio!r}.")
        self._settle("mask_ratio", float(ratio))
        for name in ("decoder_width", "decoder_depth", "decoder_heads"):
            checks.positive_int(getattr(self, name), name)
        if self.decoder_mlp_dim is not None:
            checks.positive_int(self.decoder_mlp_dim, "decoder_mlp_dim")
        if self.decoder_width % self.decoder_heads or self.decoder_width % 4:
            raise ValueError(
                "decoder_width must be a multiple of decoder_heads (each head's share) and of 4 (the sine-cosine "
                f"table's quarters); got decoder_width={self.decoder_width}, decoder_heads={self.decoder_heads}."
            )
        self._settle("norm_pix_loss", bool(self.norm_pix_loss))

    @classmethod
    def names(cls):
        return tuple(f.name for f in dataclasses.fields(cls))

    @property
    def mlp_dim(self):
        """The decoder MLP's hidden width."""
        return 4 * self.decoder_width if self.decoder_mlp_dim is None else self.decoder_mlp_dim
