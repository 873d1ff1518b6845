"""keras-vit's version, in a module of its own: the package exports it, the build reads it
(pyproject.toml) and a saved preset records it, without importing the rest."""

__version__ = "0.1.0"
