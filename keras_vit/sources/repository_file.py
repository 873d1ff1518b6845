"""One file of a hub repository (``hf-hub:<org>/<name>``) or of a folder holding its files."""

import os

from keras_vit.presets import hub


def repository_file(given, filename, missing_ok=False):
    """The local path of one file of a hub repository or folder (None if ``missing_ok`` and it has none)."""
    if hub.is_hub_name(given):
        return hub.fetch(given, filename, missing_ok=missing_ok)
    path = os.path.join(given, filename)
    if os.path.isfile(path) or missing_ok and not os.path.exists(path):
        return path if os.path.isfile(path) else None
    raise FileNotFoundError(f"{given}: the model's folder has no {filename} ({path} is missing).")
