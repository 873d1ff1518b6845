"""The seam between the layers and PyTorch, for eager PyTorch only.

The layers are written in ``keras.ops``. In eager PyTorch Keras runs each op as its own
kernel, and a ``Dense`` is three: matmul, bias add, activation. Two things here reach
past that, and nothing else in the layers imports PyTorch:

- ``is_tracing``: whether ``torch.compile`` or ``torch.export`` is tracing, where the
  layers keep Keras' own ops and name scopes (see ``layers.inline``);
- ``linear``: a ``Dense`` as one PyTorch kernel (see ``layers.Dense``).
"""

import functools

import keras


@functools.cache
def _torch():
    import torch

    return torch


def is_tracing():
    """True while ``torch.compile`` or ``torch.export`` traces: ``torch.compiler.is_compiling()``
    is true in both (and constant while tracing), and costs about 0.1 us eagerly."""
    return _torch().compiler.is_compiling()


@functools.cache
def _onednn_post_ops():
    """activation -> ``(post-op, algorithm)`` of oneDNN's fused linear."""
    from keras_vit.layers.activations import gelu_erf, gelu_tanh

    return {
        keras.activations.linear: ("none", ""),
        keras.activations.relu: ("relu", ""),
        keras.activations.tanh: ("tanh", ""),
        keras.activations.gelu: ("gelu", "none"),  # Keras' default: the exact (erf) form
        gelu_erf: ("gelu", "none"),
        gelu_tanh: ("gelu", "tanh"),
    }


@functools.cache
def _onednn_dtypes():
    """The dtypes oneDNN's fused linear runs here: none without it, bfloat16 where the CPU has it."""
    torch = _torch()
    if not (torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_linear_pointwise")):
        return frozenset()
    bf16 = bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    return frozenset({torch.float32, torch.bfloat16} if bf16 else {torch.float32})


def _onednn_runs(inputs):
    if _torch().is_grad_enabled() or inputs.device.type != "cpu":
        return False  # oneDNN's fused linear has no gradient; on GPUs cuBLAS runs F.linear
    return inputs.dtype in _onednn_dtypes()


def linear(inputs, kernel, bias, activation):
    """``activation(inputs @ kernel + bias)`` in one PyTorch kernel, or None to run Keras' ops.

    Where no gradient is recorded on a CPU (``predict``, ``torch.no_grad()``), the matmul,
    its bias and the activation run as oneDNN's fused linear: the bias and the
    activation are applied to the float32 accumulator, so in bfloat16 the result rounds
    once, not three times. ViT-B/16's fc1 (6304 x 768 x 3072) takes 166 ms instead of
    Keras' 247 in float32 and 95 instead of 138 in bfloat16; with the tanh GELU, whose
    PyTorch kernel is slow on CPUs, the gain is largest. Elsewhere (a gradient recorded,
    a GPU), ``torch.nn.functional.linear`` adds the bias inside the matmul (4-6% faster
    per layer in float32 training here). ``kernel`` and ``bias`` are the layer's, read
    in its autocast scope: None (Keras' ops, with their type promotion) where their dtype
    differs from the inputs'. None too while tracing, so that traced and exported graphs
    hold Keras' portable ops.
    """
    torch = _torch()
    if is_tracing() or not isinstance(inputs, torch.Tensor):
        return None
    kernel = keras.ops.convert_to_tensor(kernel)
    bias = None if bias is None else keras.ops.convert_to_tensor(bias)
    if kernel.dtype != inputs.dtype or (bias is not None and bias.dtype != inputs.dtype):
        return None
    post_op = _onednn_post_ops().get(activation)
    if post_op is not None and _onednn_runs(inputs):
        return torch.ops.mkldnn._linear_pointwise(inputs, kernel.t(), bias, post_op[0], [], post_op[1])
    outputs = torch.nn.functional.linear(inputs, kernel.t(), bias)
    return outputs if activation is keras.activations.linear else activation(outputs)
