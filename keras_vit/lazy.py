"""A package's names imported on first use (PEP 562), for the packages whose light parts
the command line reads before any backend is needed (``keras-vit presets``, a command's
``--help``): importing the package defines where each name lives, nothing more. A package
lists its names once, in its ``if typing.TYPE_CHECKING:`` imports (what type checkers and
the API reference read), and ``declared`` reads that list for Python, as the Scientific
Python lazy loader reads a stub.

>>> import types
>>> package = types.ModuleType("demo")
>>> package.__getattr__, package.__dir__ = exports("demo", {"dedent": "textwrap"})
>>> package.__getattr__("dedent")("  a")
'a'
"""

import ast
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


def package(name, file):
    """``(__all__, __getattr__, __dir__)`` of the package ``name`` whose ``__init__`` is at
    ``file``: the names its ``if typing.TYPE_CHECKING:`` block imports, each imported on
    first use."""
    defined_in = declared(file)
    return (sorted(defined_in), *exports(name, defined_in))


def declared(file):
    """``{name: module}``: what the ``if typing.TYPE_CHECKING:`` block of the module at ``file``
    imports, name by name (``from module import name``)."""
    with open(file, encoding="utf-8") as f:
        tree = ast.parse(f.read(), file)
    (block,) = [node for node in tree.body if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)]
    return {
        alias.asname or alias.name: node.module
        for node in block.body
        if isinstance(node, ast.ImportFrom)
        for alias in node.names
    }
