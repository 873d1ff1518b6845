"""The seam between the layers and PyTorch.

The layers are written in ``keras.ops``. In eager PyTorch Keras runs each op as its own
kernel, and a ``Dense`` is three: matmul, bias add, activation. These reach past that,
and nothing else in the layers imports PyTorch:

- ``is_tracing``: whether ``torch.compile`` or ``torch.export`` is tracing, where the
  layers keep Keras' own ops and name scopes (see ``layers.inline``), except inside
  ``kernels_in_graph()``, where ``linear`` and ``attention`` keep their kernels;
- ``linear``: a ``Dense`` as one PyTorch kernel (see ``layers.Dense``);
- ``order_kernel``: a ``Dense`` kernel kept in the memory order that inference or training reads;
- ``attention``: PyTorch's fused attention on the strided views of the ``qkv`` product,
  with a written-out backward pass in bfloat16 on a CPU.
"""

import contextlib
import functools
import threading

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


def attention(qkv):
    """``keras.ops.dot_product_attention`` of the query, key and value in one ``qkv``
    product ``(batch, tokens, 3, heads, dim)`` as PyTorch's own fused attention, on their
    strided views; ``(batch, tokens, heads, dim)``, or None (tracing outside
    ``kernels_in_graph()``, not a torch tensor) to run Keras' op.

    On a CPU, Keras makes query, key and value contiguous before
    ``scaled_dot_product_attention`` and the result comes back in heads-first order, which
    the output projection then copies again: 4 copies per block, 3% of ViT-B/16's
    inference. PyTorch's CPU kernel reads the strided views as they are and writes its
    result tokens-first, as timm calls it. On a GPU Keras forces flash attention wherever
    it can run; PyTorch's own choice, which timm runs, is cuDNN's on an H100 or H200.

    In bfloat16 training on a CPU (``_explicit_backward_pays``) the forward pass is the
    same flash kernel and the backward pass is ``_attention_backward``'s.

    Example (torch backend):
    >>> import keras
    >>> qkv = keras.random.normal((2, 5, 3, 4, 8))
    >>> if keras.config.backend() == "torch":
    ...     print(tuple(attention(qkv).shape))
    ... else:
    ...     print((2, 5, 4, 8))
    (2, 5, 4, 8)
    """
    torch = _torch()
    if _keras_ops_only() or not isinstance(qkv, torch.Tensor):
        return None
    if _explicit_backward_pays(qkv):
        return _flash_with_explicit_backward().apply(qkv)
    return torch.nn.functional.scaled_dot_product_attention(*_heads_first(qkv)).transpose(1, 2)


def _heads_first(qkv):
    """Query, key and value as ``(batch, heads, tokens, dim)`` views of ``qkv``."""
    return [tensor.transpose(1, 2) for tensor in qkv.unbind(2)]


def _image_score_bytes(heads, tokens):
    """The bytes of one image's float32 ``(heads, tokens, tokens)`` attention scores."""
    return heads * tokens * tokens * 4


# ``_attention_backward`` computes at most this many bytes of float32 scores at once.
_ATTENTION_CHUNK_BYTES = 16 * 2**20


def _explicit_backward_pays(qkv):
    """Where ``_attention_backward`` replaces PyTorch's flash backward: a gradient is
    recorded (not traced) for a bfloat16 ``qkv`` on a CPU, and one image's float32 scores
    fit ``_ATTENTION_CHUNK_BYTES`` (up to 577 tokens, 384 pixels at patch 16, at 12 heads).

    Measured forward and backward of one block's attention on an Intel Xeon with AMX, one
    process taking turns: 1.42-1.48x PyTorch's at ViT-B/16's shapes at batch 32, 1.28x at
    Ti/16's, 1.13-1.34x at S/16's and L/16's, 1.04-1.22x at 401 and 577 tokens; whole
    training steps 1.11x (Ti/16) and 1.15x (B/16). In float32 it was slower (0.73-0.81x),
    and there the flash kernel stays. It makes more passes over memory than flash's tiles:
    on a machine busy with other processes it lost (0.49x at B/16's shapes).
    """
    torch = _torch()
    if not (qkv.requires_grad and torch.is_grad_enabled()) or is_tracing():
        return False
    if qkv.device.type != "cpu" or qkv.dtype != torch.bfloat16:
        return False
    _, tokens, _, heads, _ = qkv.shape
    return _image_score_bytes(heads, tokens) <= _ATTENTION_CHUNK_BYTES


@functools.cache
def _flash_with_explicit_backward():
    """An autograd function: PyTorch's CPU flash attention forward, ``_attention_backward``."""
    torch = _torch()

    class FlashWithExplicitBackward(torch.autograd.Function):
        @staticmethod
        def forward(ctx, qkv):
            out, logsumexp = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(*_heads_first(qkv))
            ctx.save_for_backward(qkv, out, logsumexp)
            return out.transpose(1, 2)

        @staticmethod
        @torch.autograd.function.once_differentiable
        def backward(ctx, grad_out):
            qkv, out, logsumexp = ctx.saved_tensors
            return _attention_backward(qkv, out, logsumexp, grad_out.transpose(1, 2))

    return FlashWithExplicitBackward


def _attention_backward(qkv, out, logsumexp, grad_out):
    """The gradient of softmax attention with respect to ``qkv``, written out in batched
    matmuls over chunks of the batch.

    PyTorch's CPU flash backward recomputes the scores in small tiles; at ViT's 197 or 50
    tokens whole ``(heads, tokens, tokens)`` score matrices are small, and batched matmuls
    on them (bfloat16 on AMX) are faster. The scores and their gradient are float32:
    ``query @ key^T`` from float32 copies, the softmax from the forward's log-sum-exp,
    ``grad_out @ value^T`` likewise; they are rounded to bfloat16 for the three matmuls
    that make the gradients, as flash's tiles are. Max error against a float64 reference
    was 0.78e-3 (flash's 1.02e-3) at ViT-B/16's shapes. The chunk's buffers are kept per
    thread from call to call (``_attention_workspace``).

    ``out`` and ``grad_out`` are ``(batch, heads, tokens, dim)``; ``logsumexp`` is
    ``(batch, heads, tokens)``.
    """
    torch = _torch()
    query, key, value = _heads_first(qkv)
    batch, heads, tokens, dim = query.shape
    scale = dim**-0.5
    grad = torch.empty(qkv.shape, dtype=qkv.dtype, device=qkv.device)
    grad_query, grad_key, grad_value = _heads_first(grad)
    chunk = min(batch, max(1, _ATTENTION_CHUNK_BYTES // _image_score_bytes(heads, tokens)))
    workspace = _attention_workspace(chunk, heads, tokens, dim, qkv.dtype)
    for start in range(0, batch, chunk):
        rows = slice(start, min(start + chunk, batch))
        probs, grad_scores, rounded, left, right = (buffer[: rows.stop - start] for buffer in workspace)
        left.copy_(query[rows])
        right.copy_(key[rows])
        torch.matmul(left, right.transpose(-1, -2), out=probs)
        probs.mul_(scale).sub_(logsumexp[rows].unsqueeze(-1)).exp_()  # the softmax
        rounded.copy_(probs)
        grad_value[rows] = torch.matmul(rounded.transpose(-1, -2), grad_out[rows])
        left.copy_(grad_out[rows])
        right.copy_(value[rows])
        torch.matmul(left, right.transpose(-1, -2), out=grad_scores)
        right.copy_(out[rows])
        # The softmax's gradient: probs * (grad_probs - sum(grad_out * out)), then the scale.
        grad_scores.sub_(left.mul_(right).sum(-1, keepdim=True)).mul_(probs).mul_(scale)
        rounded.copy_(grad_scores)
        grad_query[rows] = torch.matmul(rounded, key[rows])
        grad_key[rows] = torch.matmul(rounded.transpose(-1, -2), query[rows])
    return grad


_WORKSPACE = threading.local()


def _attention_workspace(chunk, heads, tokens, dim, dtype):
    """``_attention_backward``'s buffers for one chunk, kept per thread for the next call
    of the same shape (at ViT-B/16's, 8 images: 47 MB). Fresh tensors of this size are
    fresh pages from the system on every call, and the page faults cost as much as the
    arithmetic (a bfloat16 multiply over 6304 x 3072 values: 20 ms into a new tensor, 3.4
    into pages already touched)."""
    key = (chunk, heads, tokens, dim, dtype)
    if getattr(_WORKSPACE, "key", None) != key:
        torch = _torch()
        scores, rows = (chunk, heads, tokens, tokens), (chunk, heads, tokens, dim)
        _WORKSPACE.key = _WORKSPACE.buffers = None  # the old ones go before the new ones are made
        _WORKSPACE.buffers = (
            torch.empty(scores, dtype=torch.float32, device="cpu"),  # probabilities
            torch.empty(scores, dtype=torch.float32, device="cpu"),  # the scores' gradient
            torch.empty(scores, dtype=dtype, device="cpu"),  # either, rounded for the matmuls
            torch.empty(rows, dtype=torch.float32, device="cpu"),
            torch.empty(rows, dtype=torch.float32, device="cpu"),
        )
        _WORKSPACE.key = key
    return _WORKSPACE.buffers
