"""An inert stand-in for ``torchvision`` so that timm imports beside a CPU-only torch.

PyPI's torchvision here is a CUDA build that fails to import next to the CPU torch, and
timm imports torchvision names at import time although its ViT and ResNetV2 code use none
of them. Every ``torchvision.*`` module resolves to an empty module whose attributes are
placeholders: touching one at import time works, using one raises.
"""

import importlib.abc
import importlib.machinery
import sys
import types


class _PlaceholderMeta(type):
    # Distinct names must stay distinct (timm builds dicts keyed by enum members).
    def __getattr__(cls, name):
        if name.startswith("__"):
            raise AttributeError(name)
        child = _PlaceholderMeta(f"{cls.__name__}.{name}", (_Placeholder,), {})
        setattr(cls, name, child)
        return child


class _Placeholder(metaclass=_PlaceholderMeta):
    def __init__(self, *args, **kwargs):
        raise RuntimeError("torchvision is not installed here; this name is a test stand-in.")


class _StubModule(types.ModuleType):
    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        placeholder = _PlaceholderMeta(f"{self.__name__}.{name}", (_Placeholder,), {})
        setattr(self, name, placeholder)
        return placeholder


class _StubFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, fullname, path, target=None):
        if fullname == "torchvision" or fullname.startswith("torchvision."):
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec):
        module = _StubModule(spec.name)
        module.__path__ = []
        module.__version__ = "0.0.0+stub"
        return module

    def exec_module(self, module):
        pass


def install():
    """Make ``import torchvision`` resolve to the stand-in (idempotent)."""
    if not any(isinstance(f, _StubFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, _StubFinder())
