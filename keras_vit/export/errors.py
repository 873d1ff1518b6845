"""The errors an export raises, so that callers can tell bad input from a failed conversion."""


class ExportError(RuntimeError):
    """An export that was started could not be completed; nothing was left behind."""


class InvalidModelFileError(ValueError):
    """The given path is not a model file keras-vit can export (checked before any work)."""


class UnconvertibleModelError(ExportError):
    """A format's converter cannot express some of the model's operations.

    Attributes:
        format: the export format that failed (e.g. ``"tflite_int8"``).
        layers: names of the model's layers whose operations could not be converted
            (empty when the converter's message names none).
        ops: the unsupported operation types the converter reported.
    """

    def __init__(self, message, format=None, layers=(), ops=()):
        super().__init__(message)
        self.format = format
        self.layers = list(layers)
        self.ops = list(ops)


class VerificationError(ExportError):
    """An exported file was written but does not reproduce the Keras model's outputs.

    Attributes:
        format: the export format whose check failed.
        details: the measured numbers (e.g. ``{"max_abs_diff": 0.3, "tolerance": 1e-4}``).
    """

    def __init__(self, message, format=None, details=None):
        super().__init__(message)
        self.format = format
        self.details = dict(details or {})
