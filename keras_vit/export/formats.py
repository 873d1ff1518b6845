"""The export formats as data: name -> file name in the output folder and what it is."""

import dataclasses
import difflib


@dataclasses.dataclass(frozen=True)
class ExportFormat:
    """One export format.

    Attributes:
        name: the name given to ``export_model(formats=...)`` and ``--formats``.
        filename: what it is called inside the output folder (a folder for SavedModel).
        kind: ``"savedmodel"``, ``"tflite"``, ``"onnx"`` or ``"torch_export"``.
        quantization: for TFLite: ``"float32"``, ``"float16"``, ``"dynamic_int8"`` or
            ``"int8"`` (full integer, needs representative data); None otherwise.
        description: one line for help texts.
    """

    name: str
    filename: str
    kind: str
    quantization: str = None
    description: str = ""

    @property
    def needs_representative_data(self):
        return self.quantization == "int8"

    @property
    def needs(self):
        """The modules that write and verify it: ``(extra, modules)``, the extra installing them."""
        if self.kind == "torch_export":
            return "torch", ("torch",)
        verify = {"savedmodel": (), "tflite": ("ai_edge_litert",), "onnx": ("tf2onnx", "onnx", "onnxruntime")}
        return "export", ("tensorflow", *verify[self.kind])

    @property
    def backend(self):
        """The Keras backend that writes it: ``"torch"`` for ``torch.export``, else ``"tensorflow"``."""
        return "torch" if self.kind == "torch_export" else "tensorflow"


FORMATS = {
    f.name: f
    for f in (
        ExportFormat(
            "savedmodel",
            "savedmodel",
            "savedmodel",
            description="TF SavedModel for TF Serving: serving_default (uint8 images), serving_bytes "
            "(encoded JPEG/PNG of any size) and serving_preprocessed (float32 images, already pre-processed)",
        ),
        ExportFormat(
            "tflite_float32",
            "model_float32.tflite",
            "tflite",
            "float32",
            "LiteRT flat buffer, float32 weights and arithmetic",
        ),
        ExportFormat(
            "tflite_float16",
            "model_float16.tflite",
            "tflite",
            "float16",
            "LiteRT, float16 weights (half the size), float32 arithmetic on CPU",
        ),
        ExportFormat(
            "tflite_dynamic_int8",
            "model_dynamic_int8.tflite",
            "tflite",
            "dynamic_int8",
            "LiteRT, int8 weights, activations quantised on the fly",
        ),
        ExportFormat(
            "tflite_int8",
            "model_int8.tflite",
            "tflite",
            "int8",
            "LiteRT, full-integer int8 (calibrated on representative data)",
        ),
        ExportFormat("onnx", "model.onnx", "onnx", description="ONNX (opset 17), dynamic batch, for onnxruntime"),
        ExportFormat(
            "torch_export",
            "model.pt2",
            "torch_export",
            description="torch.export program: torch.export.load(path).module() runs it without Keras; dynamic batch",
        ),
    )
}
DEFAULT_FORMATS = tuple(FORMATS)


def parse_formats(formats):
    """Format names (a comma-separated string or a list; ``"all"`` for every one) as a tuple.

    Unknown names are an error that lists the known ones; duplicates are dropped.

    >>> parse_formats("savedmodel, tflite_float32")
    ('savedmodel', 'tflite_float32')
    >>> len(parse_formats("all")) == len(FORMATS)
    True
    """
    if formats is None:
        return DEFAULT_FORMATS
    names = formats.split(",") if isinstance(formats, str) else list(formats)
    names = [str(n).strip() for n in names if str(n).strip()]
    if not names:
        raise ValueError(f"Expected at least one export format out of {', '.join(FORMATS)}; got {formats!r}.")
    result = []
    for name in names:
        expanded = DEFAULT_FORMATS if name == "all" else (name,)
        for n in expanded:
            if n not in FORMATS:
                close = difflib.get_close_matches(n, FORMATS, n=2, cutoff=0.6)
                hint = f" Did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
                raise ValueError(f"Unknown export format {n!r}.{hint} Known formats: {', '.join(FORMATS)} (or 'all').")
            if n not in result:
                result.append(n)
    return tuple(result)
