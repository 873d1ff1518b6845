"""timm's VisionTransformer in PyTorch, eager (``timm``) and under torch.compile (``timm-compile``)."""

import os
import sys

from engines import torch_steps

NAMES = ("timm", "timm-compile")
FRAMEWORK = torch_steps.FRAMEWORK
SETTINGS = ()  # timm computes its own numerics and attention

backend = torch_steps.backend
_TESTS = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "tests")


def model(arch):
    sys.path.insert(0, _TESTS)
    import torchvision_stub  # timm imports torchvision names its ViT does not use; see that file

    torchvision_stub.install()
    import timm

    return timm.create_model(
        arch.timm_name, pretrained=False, img_size=arch.image_size, depth=arch.depth, num_classes=1000
    )


def steps(engine, arch, precision, batch, device):
    import torch

    module = model(arch).to(device)
    forward = torch.compile(module) if engine == "timm-compile" else module
    return (*torch_steps.steps(module, forward, arch, precision, batch, device), module)
