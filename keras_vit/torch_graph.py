"""The PyTorch seam: a Keras model captured by ``torch.export`` as one ATen graph.

On the torch backend a Keras model runs op by op: every layer and every ``keras.ops`` call
goes through Keras' Python dispatch. ``torch.export`` traces the whole model once,
non-strict (Keras' Python runs as it is, torch records the ATen ops it reaches), into one
exact graph with a symbolic batch size. From that graph:

- ``compile_for_inference``: the graph under ``torch.compile`` (Inductor fuses the
  element-wise work): ``keras_vit.compile_for_inference``.
- ``export_program``: the ``torch.export.ExportedProgram`` itself (model input -> model
  output), for a compiled train step of your own (``training=True``) or AOTInductor.
- ``keras_vit.export.torch_program`` builds the ``.pt2`` serving format on it.

Everything here needs the torch backend (``KERAS_BACKEND=torch``); torch is imported only
when one of these functions runs, so that importing keras-vit never imports it.
"""

import functools
import math

import keras
import numpy as np

from keras_vit.internals import set_untracked, sublayers

# The example batch the graph is traced with. Not 1: torch.export specialises a dimension
# whose example size is 0 or 1 to that constant, and the batch must stay symbolic.
EXAMPLE_BATCH = 2


def require_torch_backend(what):
    """Raises a ``RuntimeError`` naming ``KERAS_BACKEND=torch`` unless that is the backend."""
    backend = keras.backend.backend()
    if backend != "torch":
        raise RuntimeError(
            f"{what} needs the PyTorch backend (KERAS_BACKEND=torch, set before Keras is imported); "
            f"got KERAS_BACKEND={backend!r}."
        )


@functools.cache
def module_class():
    import torch

    class KerasGraph(torch.nn.Module):
        """A Keras model as a ``torch.nn.Module`` whose parameters are the model's weights.

        Non-strict export swaps the parameters torch knows of (a Keras layer's
        ``_torch_params``) for fake tensors, but Keras layers read their variables' own
        tensors, which export would then lift into the graph as constants: a second copy of
        every weight, none of them the module's parameters. Passing the weights through
        ``stateless_call`` makes them the graph's inputs instead: the program holds each
        once, and its module shares them with the Keras model (they are the same tensors).
        """

        def __init__(self, model, training, preprocessing=None, serving=None):
            super().__init__()
            set_untracked(self, "model", model)  # not a submodule: its weights come below
            self.trainable_weights = torch.nn.ParameterList([v.value for v in model.trainable_variables])
            self.non_trainable_weights = torch.nn.ParameterList([v.value for v in model.non_trainable_variables])
            self.is_training = training
            set_untracked(self, "preprocessing", preprocessing)  # a Keras layer without weights
            self.serving = serving

        def forward(self, images):
            x = images if self.preprocessing is None else self.preprocessing(images)
            outputs, _ = self.model.stateless_call(
                list(self.trainable_weights), list(self.non_trainable_weights), x, training=self.is_training
            )
            return outputs if self.serving is None else _serving_outputs(torch, outputs, **self.serving)

    return KerasGraph


def _serving_outputs(torch, scores, outputs_probabilities, top_k):
    """The ``serving_default`` outputs, as ``serving._scores_to_outputs`` makes them in TensorFlow."""
    scores = scores.float()  # mixed-precision models answer in float32 too
    probabilities = scores if outputs_probabilities else torch.softmax(scores, dim=-1)
    outputs = {"probabilities": probabilities}
    if top_k:
        top = torch.topk(probabilities, k=top_k, dim=-1)
        outputs["top_k_scores"] = top.values
        outputs["top_k_indices"] = top.indices.to(torch.int32)  # TensorFlow's top_k dtype
    return outputs


def _example_shape(model):
    """One example's shape the graph is traced for: an image's ``(height, width, channels)``
    (a dynamic-size model's stored size), or another input's fixed shape (a text tower's
    ``(context_length,)`` ids)."""
    shape = model.input_shape
    spec = getattr(model, "spec", None)
    if not isinstance(shape, list) and len(shape) == 4 and getattr(spec, "dynamic_image_size", False):
        shape = (shape[0], *spec.image_size, shape[3])
    if isinstance(shape, list) or len(shape) < 2 or None in shape[1:]:
        raise ValueError(
            f"Expected a model with one input of fixed shape but the batch (an image's (batch, height, width, "
            f"channels), a text's (batch, length)); got {shape}."
        )
    return tuple(int(s) for s in shape[1:])


def export_graph(module, example):
    import torch

    batch = torch.export.Dim("batch", min=1)
    return torch.export.export(module, (example,), dynamic_shapes=({0: batch},), strict=False)


def weights_device(model):
    return model.variables[0].value.device if model.variables else None


def _random_layers(model):
    """Paths of the layers that draw random numbers in training (dropout, stochastic depth)."""
    return sorted(
        {
            getattr(layer, "path", None) or layer.name
            for layer in sublayers(model)
            if isinstance(getattr(layer, "seed_generator", None), keras.random.SeedGenerator)
            and float(getattr(layer, "rate", 0.0) or 0.0) > 0
        }
    )


def export_program(model, training=False):
    """``model`` as a ``torch.export.ExportedProgram``: its images in, its outputs out.

    The graph takes what the model takes (``(batch, height, width, channels)`` in the
    model's input dtype, any batch size; a ``dynamic_image_size`` model at its stored
    size) and holds the model's weights as parameters: ``program.module()`` shares them
    with the Keras model (the same tensors), so it sees the model's later weight updates
    and trains the model when it trains. The ops are the ones Keras runs eagerly, so its
    outputs equal the model's.

    Args:
        model: a built Keras model with one input (images, or a text tower's ids), on the
            torch backend.
        training: trace ``model(images, training=True)``: a differentiable graph for a
            compiled train step of your own (see the example). Keras' dropout draws its
            mask from a generator seeded by a tensor's value, which ``torch.export``
            cannot trace, so a model with dropout or stochastic depth (``dropout_rate``,
            ``attention_dropout_rate``, ``drop_path_rate`` above 0) is refused.

    Raises:
        RuntimeError: the backend is not torch.
        ValueError: ``training=True`` on a model with dropout or stochastic depth.

    Example (torch backend; a train step compiled from the training graph):
    >>> import keras, keras_vit
    >>> if keras.backend.backend() == "torch":
    ...     import torch
    ...     model = keras_vit.create_model("vit_ti16", image_size=16, patch_size=8, num_classes=3, depth=1)
    ...     graph = export_program(model, training=True).module()   # torch.compile(graph) to fuse it
    ...     optimizer = torch.optim.AdamW([p for p in graph.parameters() if p.requires_grad], lr=1e-3)
    ...     loss = torch.nn.functional.cross_entropy(graph(torch.rand(4, 16, 16, 3)), torch.tensor([0, 1, 2, 0]))
    ...     loss.backward()
    ...     optimizer.step()   # the Keras model's weights are updated: they are the same tensors
    """
    import torch

    require_torch_backend("export_program")
    shape = _example_shape(model)
    if training:
        random = _random_layers(model)
        if random:
            raise ValueError(
                f"Expected a model without dropout or stochastic depth for a training graph (Keras seeds their "
                f"random masks from a tensor's value, which torch.export cannot trace); got random layers "
                f"{', '.join(random)}. Build it with dropout_rate=0, attention_dropout_rate=0, drop_path_rate=0."
            )
    dtype = keras.backend.standardize_dtype(model.inputs[0].dtype)
    example = torch.zeros((EXAMPLE_BATCH, *shape), dtype=getattr(torch, dtype), device=weights_device(model))
    module = module_class()(model, training)
    if training:
        return export_graph(module, example)
    with torch.no_grad():
        return export_graph(module.eval(), example)


# The tanh form of GELU, 0.5 x (1 + tanh(z)) with z = sqrt(2 / pi) (x + 0.044715 x^3), is
# x * sigmoid(2 z): 0.5 (1 + tanh(z)) = sigmoid(2 z) exactly.
_TWICE_SQRT_2_OVER_PI = 2 * math.sqrt(2 / math.pi)
_GELU_CUBIC = 0.044715


def rewrite_tanh_gelu(graph_module):
    """Rewrites every tanh-form GELU node of an ATen graph as ``x * sigmoid(2 z)``, in place.

    The same function (the identity ``0.5 (1 + tanh z) = sigmoid(2 z)``; outputs differ by
    float32 rounding), in another form for Inductor's CPU code generation. It is
    ``compile_for_inference``'s one kernel choice, on by default where the weights are on
    a CPU (where it was measured: the benchmark's ``keras-vit:torch-compiled`` rows beside
    its ``keras-vit:torch-compiled-tanh`` rows, which keep the graph as exported, in
    ``docs/performance.md``). The exact (erf) GELU is left as it is.

    Args:
        graph_module: a ``torch.fx.GraphModule`` of ATen ops (``ExportedProgram.module()``).

    Returns:
        How many GELU nodes were rewritten.
    """
    import torch

    aten = torch.ops.aten
    graph, rewritten = graph_module.graph, 0
    for node in list(graph.nodes):
        if node.op != "call_function" or node.target is not aten.gelu.default:
            continue
        if node.kwargs.get("approximate", "none") != "tanh":
            continue
        (x,) = node.args
        with graph.inserting_before(node):
            cube = graph.call_function(aten.mul.Tensor, (graph.call_function(aten.mul.Tensor, (x, x)), x))
            inner = graph.call_function(aten.add.Tensor, (x, graph.call_function(aten.mul.Tensor, (cube, _GELU_CUBIC))))
            gate = graph.call_function(
                aten.sigmoid.default, (graph.call_function(aten.mul.Tensor, (inner, _TWICE_SQRT_2_OVER_PI)),)
            )
            gelu = graph.call_function(aten.mul.Tensor, (x, gate))
        gelu.meta = dict(node.meta)
        node.replace_all_uses_with(gelu)
        graph.erase_node(node)
        rewritten += 1
    if rewritten:
        graph.lint()
        graph_module.recompile()
    return rewritten


class CompiledInference:
    """``compile_for_inference``'s callable: images -> the model's outputs, compiled.

    Attributes:
        program: the ``torch.export.ExportedProgram`` it compiles (``export_program``'s).
        input_shape: one example's shape it takes (an image's ``(height, width, channels)``,
            a text tower's ``(context_length,)``).
        gelus_rewritten: how many tanh GELUs the compiled graph computes in the sigmoid
            form (``rewrite_tanh_gelu``).
    """

    def __init__(self, model, mode=None, options=None, tanh_gelu_as_sigmoid=None):
        import torch

        self.program = export_program(model)
        self.input_shape = _example_shape(model)
        self._dtype = getattr(torch, keras.backend.standardize_dtype(model.inputs[0].dtype))
        self._device = weights_device(model)
        graph = self.program.module()
        if tanh_gelu_as_sigmoid is None:
            tanh_gelu_as_sigmoid = self._device is None or self._device.type == "cpu"
        self.gelus_rewritten = rewrite_tanh_gelu(graph) if tanh_gelu_as_sigmoid else 0
        self._graph = torch.compile(graph, mode=mode, options=options)

    def __call__(self, inputs):
        import torch

        shape = tuple(inputs.shape)
        if shape[1:] != self.input_shape:
            raise ValueError(
                f"Expected inputs of shape (batch, {', '.join(map(str, self.input_shape))}) (the shape compiled "
                f"for); got shape {shape}."
            )
        if not isinstance(inputs, torch.Tensor):
            inputs = torch.from_numpy(np.asarray(inputs))
        inputs = inputs.to(device=self._device, dtype=self._dtype)
        with torch.no_grad():
            return self._graph(inputs)


def compile_for_inference(model, mode=None, options=None, *, tanh_gelu_as_sigmoid=None):
    """The model's forward pass, exported as one graph and compiled by ``torch.compile``.

    On the torch backend a Keras model pays Keras' per-op Python dispatch and runs GELU,
    softmax and LayerNorm unfused; this captures the model with ``torch.export`` (one
    exact ATen graph, ``export_program``) and compiles that graph with Inductor, which
    fuses the element-wise work around the matrix products (the benchmark's
    ``compiled`` rows set it beside timm).

    The first call compiles (seconds for a small model, longer for a large one). The
    graph has a symbolic batch size, and torch.compile's automatic dynamic shapes make
    at most three compiled graphs of each: one for the first batch size, one for batch 1
    (which torch always specialises), and one that serves every other size.

    The outputs equal the Keras model's within float32 rounding (Inductor's fused
    kernels sum in another order). The weights are shared with the model, not copied,
    so later ``assign``s and training show; rebuilding or reloading the model does not
    (compile the new one).

    Args:
        model: a built Keras model with one input (a keras-vit model or text tower, or any
            Keras model torch.export can trace), on the torch backend.
        mode, options: passed to ``torch.compile`` (default: its defaults).
        tanh_gelu_as_sigmoid: compute the tanh GELU as ``x * sigmoid(2 z)``
            (``rewrite_tanh_gelu``, the same function). None (default): where the
            model's weights are on a CPU; False: the graph exactly as exported (the off
            switch, for debugging and parity checks).

    Returns:
        A ``CompiledInference``: call it with images ``(batch, height, width, channels)``
        (or a text tower's ids, ``(batch, length)``; a numpy array or torch tensor, as the
        model takes them) for a torch tensor of the
        model's outputs, computed without autograd.

    Raises:
        RuntimeError: the backend is not torch (it names ``KERAS_BACKEND=torch``).

    Example (torch backend):
    >>> import keras, numpy as np, keras_vit
    >>> model = keras_vit.create_model("vit_ti16", image_size=16, patch_size=8, num_classes=3, depth=1)
    >>> if keras.backend.backend() == "torch":
    ...     predict = keras_vit.compile_for_inference(model)   # compiles at its first call
    ...     print(tuple(predict(np.zeros((4, 16, 16, 3), "float32")).shape))
    ... else:
    ...     print((4, 3))
    (4, 3)
    """
    require_torch_backend("compile_for_inference")
    return CompiledInference(model, mode=mode, options=options, tanh_gelu_as_sigmoid=tanh_gelu_as_sigmoid)
