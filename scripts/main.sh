#!/usr/bin/env bash
# Installs what is needed, then runs the main job: pre-training on the embedded digits,
# fine-tuning at 1.5x the resolution, and the test accuracy of each phase.
# Extra arguments go to keras-vit main (e.g. --epochs 2).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export KERAS_BACKEND=${KERAS_BACKEND:-tensorflow}
exec .venv/bin/keras-vit main "$@"
