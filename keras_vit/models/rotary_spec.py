"""The spec of a ViT's rotary position embeddings (``ViTSpec.rope``): the arguments of
``keras_vit.layers.RotaryEmbedding`` that a checkpoint fixes, as data."""

import dataclasses
import typing

from keras_vit.models import spec_rules
from keras_vit.models.frozen_spec import FrozenSpec, option


@dataclasses.dataclass(frozen=True)
class RotarySpec(FrozenSpec):
    """Rotary position embeddings on every attention's queries and keys.

    ``ViTSpec(rope="axial")`` is ``ViTSpec(rope=RotarySpec("axial"))``; each field is also a
    ``ViTSpec`` option ``rope_<field>`` (``spec.replace(rope_temperature=100.0)``) and a flag
    of the training commands (``--rope-temperature``).

    Args:
        form: ``"dinov3"`` (DINOv3's; timm's ``rope_type="dinov3"``), ``"axial"`` (EVA-02's;
            timm's ``rope_type="cat"``) or ``"mixed"`` (RoPE-Mixed's learned frequencies per
            block and head; timm's ``rope_type="mixed"``). They fit any grid, so a RoPE model
            takes other image sizes as it is.
        temperature: the frequencies' base (timm's ``rope_temperature``, transformers'
            ``rope_theta``); None: the form's own (DINOv3's 100, EVA-02's 10000).
        reference_grid: ``form="axial"``: the ``(rows, cols)`` the patch indices are scaled
            to (timm's ``ref_feat_shape``: the pre-training grid); None: as they are.
        grid_indexing: ``"ij"``: each head's row frequencies first, then the column's;
            ``"xy"``: the column's first (timm's ``rope_grid_indexing``, the RoPE-ViTs').
        grid_offset: added to each patch's coordinates before the angles are made (timm's
            ``rope_grid_offset``: Perception Encoder's 1).

    >>> RotarySpec("axial", reference_grid=16).reference_grid
    (16, 16)
    """

    form: str = option(
        dataclasses.MISSING, "rotary position embeddings on the queries and keys: dinov3, axial or mixed"
    )
    temperature: float | None = option(None, "the rotary frequencies' base; none: the form's (100 or 10000)")
    reference_grid: typing.Any = option(
        None, "axial rotary embeddings: the (rows, cols) grid the patch indices are scaled to; none: as they are"
    )
    grid_indexing: str = option("ij", "the rotary frequencies' order: ij (rows first) or xy (columns first)")
    grid_offset: float = option(0.0, "added to each patch's rotary coordinates (Perception Encoder's 1)")

    def __post_init__(self):
        self._settle("reference_grid", spec_rules.check_rotary(self))
        if self.temperature is not None:
            self._settle("temperature", float(self.temperature))
        self._settle("grid_offset", float(self.grid_offset))
