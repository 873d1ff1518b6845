"""A package's names imported on first use (PEP 562), for the packages whose light parts
the command line reads before any backend is needed (``keras-vit presets``, a command's
``--help``): importing the package defines where each name lives, nothing more.

>>> import types
>>> package = types.ModuleType("demo")
>>> package.__getattr__, package.__dir__ = exports("demo", {"dedent": "textwrap"})
>>> package.__getattr__("dedent")("  a")
'a'
"""

import importlib


def exports(package, defined_in):
    """``(__getattr__, __dir__)`` for ``package``: each name of ``defined_in`` (name -> the
    module defining it) imported from its module when first asked for."""

    def __getattr__(name):
        if name in defined_in:
            return getattr(importlib.import_module(defined_in[name]), name)
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    def __dir__():
        return sorted({*vars(importlib.import_module(package)), *defined_in})

    return __getattr__, __dir__
