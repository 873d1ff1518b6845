"""HF transformers' ViTForImageClassification in PyTorch, with SDPA attention (``hf``)."""

import dataclasses

from engines import torch_steps

NAMES = ("hf",)
FRAMEWORK = torch_steps.FRAMEWORK
SETTINGS = ()  # transformers computes its own numerics and attention

backend = torch_steps.backend


def model(arch):
    import transformers

    if arch.family != "vit":
        raise NotImplementedError(f"this engine builds transformers' ViT, not {arch.family}")

    from keras_vit.checkpoints.layouts import HF_CONFIG_NAMES

    fields = dict(dataclasses.asdict(arch), layer_norm_epsilon=1e-6)
    names = {name: fields[field] for field, name in HF_CONFIG_NAMES.items() if field in fields}
    config = transformers.ViTConfig(**names, num_labels=1000, attn_implementation="sdpa")
    return transformers.ViTForImageClassification(config)


def steps(engine, arch, precision, batch, device):
    del engine  # one engine
    module = model(arch).to(device)
    return (*torch_steps.steps(module, module, arch, precision, batch, device), module)
