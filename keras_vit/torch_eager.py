"""The seam between the layers and PyTorch.

The layers are written in ``keras.ops``. In eager PyTorch Keras runs each op as its own
kernel, and a ``Dense`` is three: matmul, bias add, activation. These reach past that,
and nothing else in the layers imports PyTorch:

- ``is_tracing``: whether ``torch.compile`` or ``torch.export`` is tracing, where the
  layers keep Keras' own ops and name scopes (see ``layers.inline``), except inside
  ``kernels_in_graph()``, where ``linear`` and ``attention`` keep their kernels;
- ``linear``: a ``Dense`` as one PyTorch kernel (see ``layers.Dense``);
- ``order_kernel``: a ``Dense`` kernel kept in the memory order that inference or training reads;
- ``attention``: PyTorch's fused attention on the strided views of the ``qkv`` product.
"""

import contextlib
import functools

import keras

from keras_vit.scoped_flag import ScopedFlag

_KERNELS_IN_GRAPH = ScopedFlag()


@functools.cache
def _torch():
    import torch

    return torch


def is_tracing():
    """True while ``torch.compile`` or ``torch.export`` traces: ``torch.compiler.is_compiling()``
    is true in both (and constant while tracing), and costs about 0.1 us eagerly."""
    return _torch().compiler.is_compiling()


@contextlib.contextmanager
def kernels_in_graph():
    """While active, traced graphs keep ``linear``'s kernels (oneDNN's on a CPU) and
    ``attention``'s (PyTorch's fused attention on the strided views).

    Outside it a traced graph holds Keras' portable ops, as a saved ``.pt2`` file must,
    to run on any PyTorch build and device. A graph compiled in this process for this
    CPU (``compile_for_inference``) gains from them: Inductor fuses element-wise work
    but runs each matmul as ``addmm`` (its oneDNN lowering wants frozen weights), then
    the activation as its own pass; ViT-B/16's fc1 with the tanh GELU takes 130 ms as
    one oneDNN kernel against 134 + 30 as two. The fused linear enters the graph as the
    opaque op ``keras_vit::fused_linear`` (``_fused_linear_op``), so such a graph needs
    keras-vit imported to run.
    """
    _onednn_dtypes()  # computed now, not recorded into the graph being traced
    with _KERNELS_IN_GRAPH.on():
        yield


def _keras_ops_only():
    """True while tracing outside ``kernels_in_graph()``: run Keras' portable ops."""
    return is_tracing() and not _KERNELS_IN_GRAPH


@functools.cache
def _fused_linear_op():
    """oneDNN's fused linear as a custom op that Inductor calls as it is."""
    torch = _torch()

    @torch.library.custom_op("keras_vit::fused_linear", mutates_args=())
    def fused_linear(
        inputs: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, attr: str, algorithm: str
    ) -> torch.Tensor:
        return torch.ops.mkldnn._linear_pointwise(inputs, weight, bias, attr, [], algorithm)

    @fused_linear.register_fake
    def _(inputs, weight, bias, attr, algorithm):
        return inputs.new_empty((*inputs.shape[:-1], weight.shape[0]))

    return fused_linear


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


def _onednn_runs(inputs, activation):
    """Whether oneDNN's fused linear is the faster kernel for this product.

    Not with a gradient (it has none) or on a GPU (cuBLAS runs ``F.linear``). On an Intel
    Xeon with AMX, in float32 without an activation, MKL's ``addmm`` (bias included) is
    5-7% faster at ViT-B/16's shapes; with an activation, or in bfloat16, the fused
    kernel is (fc1 with the exact GELU 121 ms against 134 at batch 32; bfloat16 qkv 9.5
    against 10.8).
    """
    if _torch().is_grad_enabled() or inputs.device.type != "cpu":
        return False
    if inputs.dtype == _torch().float32 and activation is keras.activations.linear:
        return False
    return inputs.dtype in _onednn_dtypes()


# Kernels of at least this many weights are kept column-major at inference (``order_kernel``).
_COLUMN_MAJOR_MIN_WEIGHTS = 2**19


def order_kernel(variable, inference=True):
    """Keeps a large 2-D ``(in, out)`` kernel column-major for inference, row-major for
    training, in place (a copy, only when the order changes).

    oneDNN's fused linear (inference) reads the ``(out, in)`` weight ``kernel.t()``. Given
    the view of a row-major kernel it takes a much slower path at some shapes: on an Intel
    Xeon with AMX at batch 32, ViT-B/16's fc1 (768 x 3072, tanh GELU) took 206 ms instead
    of 121, ViT-L/16's fc2 259 instead of 135. Column-major, ``kernel.t()`` is the
    row-major matrix (the layout of ``nn.Linear``) and that path is not taken. Training
    wants row-major: the optimizer's slots are row-major, and PyTorch's element-wise
    updates over tensors of two orders run a strided path (ViT-B/16 bfloat16 training
    16% slower). Below ``_COLUMN_MAJOR_MIN_WEIGHTS`` the kernel stays row-major, which
    MKL's small products prefer (ViT-Ti/16's compiled batch-1 graph ran 4% slower
    column-major). Shape, values and checkpoints are the same in either order
    (``assign`` copies into the current one). A quantized (integer) kernel is Keras' to
    read as it is, and stays.

    Example (torch backend):
    >>> import keras
    >>> large, small = keras.Variable(keras.ops.ones((1024, 512))), keras.Variable(keras.ops.ones((2, 3)))
    >>> if keras.config.backend() == "torch":
    ...     order_kernel(large)
    ...     order_kernel(small)
    ...     print(large.value.t().is_contiguous(), small.value.is_contiguous())
    ...     order_kernel(large, inference=False)
    ...     print(large.value.is_contiguous())
    ... else:
    ...     print(True, True)
    ...     print(True)
    True True
    True
    """
    if not keras.backend.is_float_dtype(variable.dtype):
        return
    # The stored tensor: inside a mixed-precision layer ``variable.value`` is a cast copy.
    parameter = variable._value
    rows, columns = parameter.shape
    if rows * columns < _COLUMN_MAJOR_MIN_WEIGHTS or parameter.t().is_contiguous() == inference:
        return
    with _torch().no_grad():
        parameter.data = parameter.data.t().contiguous().t() if inference else parameter.data.contiguous()


def order_kernels(model):
    """``order_kernel`` for inference on every keras-vit ``Dense`` of ``model`` (before tracing)."""
    from keras_vit.layers.dense import Dense

    for layer in model._flatten_layers(include_self=True, recursive=True):
        if isinstance(layer, Dense) and not layer.quantization_mode:
            order_kernel(layer._kernel)


def linear(inputs, kernel, bias, activation):
    """``activation(inputs @ kernel + bias)`` in one or two PyTorch kernels, or None to run
    Keras' ops.

    Where no gradient is recorded on a CPU (``predict``, ``torch.no_grad()``), the matmul,
    its bias and the activation run as oneDNN's fused linear where that is faster
    (``_onednn_runs``): the bias and the activation are applied to the float32
    accumulator, so in bfloat16 the result rounds once, not three times. Elsewhere
    ``torch.nn.functional.linear`` adds the bias inside the matmul, then the activation
    runs. ``kernel`` and ``bias`` are the layer's, read in its autocast scope: None
    (Keras' ops, with their type promotion) where their dtype differs from the inputs'.
    None too while tracing (outside ``kernels_in_graph()``), so that traced and exported
    graphs hold Keras' portable ops.
    """
    torch = _torch()
    tracing = is_tracing()
    if (tracing and not _KERNELS_IN_GRAPH) or not isinstance(inputs, torch.Tensor):
        return None
    if not tracing and isinstance(kernel, keras.Variable):
        order_kernel(kernel, inference=not torch.is_grad_enabled())
    kernel = keras.ops.convert_to_tensor(kernel)
    bias = None if bias is None else keras.ops.convert_to_tensor(bias)
    if kernel.dtype != inputs.dtype or (bias is not None and bias.dtype != inputs.dtype):
        return None
    weight = kernel.t()
    post_op = _onednn_post_ops().get(activation)
    if post_op is not None and _onednn_runs(inputs, activation):
        if tracing:
            return _fused_linear_op()(inputs, weight, bias, *post_op)
        return torch.ops.mkldnn._linear_pointwise(inputs, weight, bias, post_op[0], [], post_op[1])
    outputs = torch.nn.functional.linear(inputs, weight, bias)
    return outputs if activation is keras.activations.linear else activation(outputs)


def attention(query, key, value):
    """``keras.ops.dot_product_attention(query, key, value)`` as PyTorch's own fused
    attention on the strided views; None (tracing outside ``kernels_in_graph()``, not
    torch tensors) to run Keras' op.

    Inputs are ``(batch, tokens, heads, dim)`` views into one ``qkv`` product. On a CPU,
    Keras makes each of them contiguous before ``scaled_dot_product_attention`` and the
    result comes back in heads-first order, which the output projection then copies
    again: 4 copies per block, 3% of ViT-B/16's inference. PyTorch's CPU kernel reads
    the strided views as they are and writes its result tokens-first, as timm calls it.
    On a GPU Keras forces flash attention wherever it can run; PyTorch's own choice, which
    timm runs, is cuDNN's on an H100 or H200.
    """
    torch = _torch()
    if _keras_ops_only() or not isinstance(query, torch.Tensor):
        return None
    heads_first = [tensor.transpose(1, 2) for tensor in (query, key, value)]
    return torch.nn.functional.scaled_dot_product_attention(*heads_first).transpose(1, 2)
