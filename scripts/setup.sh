#!/usr/bin/env bash
# Creates .venv (if needed) and installs keras-vit with its test peers into it.
# Idempotent: a second run only checks. Safe on a bare machine with PyPI access.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
VENV=${VENV:-.venv}
# On CPU-only machines pin the CPU build of torch (a bare "torch" would pull CUDA
# wheels); set KERAS_VIT_CONSTRAINTS= to install without it (e.g. for a CUDA torch).
CONSTRAINTS=${KERAS_VIT_CONSTRAINTS-constraints/cpu.txt}

if [ ! -x "$VENV/bin/python" ]; then
  "$PYTHON" -m venv "$VENV"
fi
# -qq: errors only (a machine's pip configuration can warn on every call, e.g. about a missing
# find-links folder, which would bury the main job's output).
PIP=("$VENV/bin/python" -m pip install --quiet --quiet --disable-pip-version-check)
[ -n "$CONSTRAINTS" ] && PIP+=(-c "$CONSTRAINTS")

stamp="$VENV/.keras-vit-installed"
want=$(cat pyproject.toml constraints/*.txt scripts/setup.sh | sha256sum | cut -d' ' -f1)
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  # The distribution was called keras-vit before (a name another project holds on PyPI).
  "$VENV/bin/python" -m pip uninstall --quiet --yes keras-vit >/dev/null 2>&1 || true
  "${PIP[@]}" -e ".[test]"
  # timm is the reference for the parity tests; its own requirements include
  # torchvision, which must not be installed here (see tests/torchvision_stub.py).
  "${PIP[@]}" --no-deps "timm==1.0.31"
  # open_clip is the reference of the text tokenizers' tests (its package ships the real CLIP
  # vocabulary); it requires torchvision too, so the same way. Its other requirements
  # (ftfy, regex) come with the text extra and transformers.
  "${PIP[@]}" --no-deps "open_clip_torch==3.3.0"
  echo "$want" > "$stamp"
fi
