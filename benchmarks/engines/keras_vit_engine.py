"""keras-vit on a Keras backend (``keras-vit:<backend>``), and on torch through its compiled
path (``keras-vit:torch-compiled``; ``keras-vit:torch-compiled-tanh`` is the same with
``compile_for_inference``'s GELU rewrite off, its ``tanh_gelu_as_sigmoid=False``).

It honours two settings of the command line: ``numerics`` (its own GELU form and LayerNorm
epsilon, or a checkpoint layout's) and ``fused_attention`` (``keras_vit``'s attention switch:
``auto`` leaves the choice to the layer, ``0`` writes attention out, ``1`` fuses it).
"""

from harness.device import torch_sync

from engines import keras_steps

COMPILED = "keras-vit:torch-compiled"
COMPILED_TANH = "keras-vit:torch-compiled-tanh"
NAMES = tuple(f"keras-vit:{b}" for b in keras_steps.BACKENDS) + (COMPILED, COMPILED_TANH)
FRAMEWORK = "keras"
SETTINGS = ("numerics", "fused_attention")
# --numerics: keras-vit's own defaults, or the numerics of a checkpoint layout
# (keras_vit.checkpoints.layouts; named here so the parent checks it without Keras).
NUMERICS = (
    "default", "original", "timm", "hf", "hf_beit", "hf_dinov3", "hf_dinov2", "hf_dinov2_registers", "keras_hub_vit",
    "keras_hub_dinov2", "keras_hub_dinov3", "keras_hub_siglip", "keras_hub_clip", "open_clip",
)  # fmt: skip
# --fused-attention: the values of keras_vit.layers.fused_attention.set_fused_attention.
FUSED_ATTENTION = {"auto": None, "0": False, "1": True}

backend = keras_steps.backend


def numerics_options(numerics):
    """keras-vit's GELU form and LayerNorm epsilon for ``--numerics``: ``{}`` for its own
    defaults (the original JAX code's tanh GELU), else a checkpoint layout's (``timm``: the
    exact GELU and 1e-6 that timm, HF here and keras-hub compute)."""
    from keras_vit.checkpoints.layouts import LAYOUTS

    return {} if numerics == "default" else dict(LAYOUTS[numerics].numerics)


def model(arch, numerics="default"):
    import keras_vit

    options = numerics_options(numerics)
    return keras_vit.create_model(arch.name, image_size=arch.image_size, depth=arch.depth, **options)


def _switch(fused_attention):
    from keras_vit.layers.fused_attention import set_fused_attention

    set_fused_attention(FUSED_ATTENTION[fused_attention])


def _under_switch(fused_attention, step):
    """``step`` with the attention switch set first: the switch is process-wide, and rows
    of different settings take turns in one process (an eager step reads it every call)."""

    def switched():
        _switch(fused_attention)
        return step()

    return switched


def steps(engine, arch, precision, batch, device, numerics="default", fused_attention="auto"):
    _switch(fused_attention)  # before the model is built and traced
    built = keras_steps.compiled_model(lambda: model(arch, numerics), precision)
    x, y = keras_steps.batch_of(arch, batch)
    if engine in (COMPILED, COMPILED_TANH):
        # The rewrite as compile_for_inference decides it (None), or off.
        infer, train = _compiled_steps(built, x, y, device, None if engine == COMPILED else False)
    else:
        infer, train = keras_steps.steps(built, x, y, device)
    return _under_switch(fused_attention, infer), _under_switch(fused_attention, train), built


def _compiled_steps(model, x, y, device, tanh_gelu_as_sigmoid):
    """keras-vit's compiled torch path: ``compile_for_inference``, and a train step compiled
    from ``export_program(training=True)`` with torch's AdamW, as the timm rows train."""
    import torch

    import keras_vit
    from keras_vit.torch_graph import export_program

    # Only inference rewrites the GELU: the train step compiles the exported training graph.
    # Each is exported and compiled at its first call (a row times one of them).
    x, y = torch.from_numpy(x).to(device), torch.from_numpy(y).to(device)
    made = {}

    def infer():
        if "predict" not in made:
            made["predict"] = keras_vit.compile_for_inference(model, tanh_gelu_as_sigmoid=tanh_gelu_as_sigmoid)
        out = made["predict"](x)
        torch_sync(device)
        return out

    def train():
        if "forward" not in made:
            graph = export_program(model, training=True).module()
            made["forward"] = torch.compile(graph)
            made["optimizer"] = torch.optim.AdamW([p for p in graph.parameters() if p.requires_grad], lr=1e-4)
        # The model ends in float32 under mixed_bfloat16 too (its head's policy).
        loss = torch.nn.functional.cross_entropy(made["forward"](x), y)
        loss.backward()
        made["optimizer"].step()
        made["optimizer"].zero_grad(set_to_none=True)
        return loss.item()

    return infer, train
