"""Which attention kernel a row's step ran: the ``attention`` column."""

# The attention kernels a step ran, by the name of the op (PyTorch).
_TORCH_ATTENTION = {
    "aten::_scaled_dot_product_flash_attention": "flash",
    "aten::_scaled_dot_product_flash_attention_for_cpu": "flash (cpu)",
    "aten::_scaled_dot_product_efficient_attention": "memory-efficient",
    "aten::_scaled_dot_product_cudnn_attention": "cudnn",
    "aten::_scaled_dot_product_attention_math": "math",
}


def attention_kernels(backend, step, model, kind, input_shape):
    """Which attention a row's step runs: a fused kernel's name, or ``"written-out"`` (a
    softmax between two matmuls); ``"-"`` where it is not read (TensorFlow).

    PyTorch: the ops one more ``step()`` dispatches, from the profiler (compiled graphs
    too: Inductor calls the fused attention as an ATen op). JAX (a Keras model): the custom
    calls of the model's lowered forward pass (inference) or its gradient (training), where
    ``keras.ops.dot_product_attention`` becomes cuDNN's fused attention on a GPU (a
    ``__cudnn$fmha`` call) and a Pallas kernel on a TPU.
    """
    if backend == "torch":
        import torch

        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as profile:
            step()
        names = {event.name for event in profile.events()}
        found = sorted({label for op, label in _TORCH_ATTENTION.items() if op in names})
        return "+".join(found) or ("written-out" if names & {"aten::softmax", "aten::_softmax"} else "?")
    if backend != "jax" or not hasattr(model, "stateless_call"):
        return "-"
    import jax

    trainable = [v.value for v in model.trainable_variables]
    others = [v.value for v in model.non_trainable_variables]
    x = jax.ShapeDtypeStruct(input_shape, "float32")

    def forward(trainable, x):
        return model.stateless_call(trainable, others, x, training=kind == "train")[0]

    if kind == "train":
        text = jax.jit(jax.grad(lambda t, x: forward(t, x).astype("float32").sum())).lower(trainable, x).as_text()
    else:
        text = jax.jit(forward).lower(trainable, x).as_text()
    if "__cudnn$fmha" in text:
        return "cudnn flash" + (" (+backward)" if "Backward" in text else "")
    return "pallas (tpu)" if "tpu_custom_call" in text else "written-out"  # TPU: Keras' splash attention
