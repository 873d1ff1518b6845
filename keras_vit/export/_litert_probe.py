"""Runs a ``.tflite`` file in a separate process and saves its outputs.

LiteRT is native code: a flat buffer it cannot handle may abort the whole process (seen:
``free(): double free`` while allocating an int8 model) instead of raising. Verification
runs each LiteRT file here, so that such a file fails its export cleanly, the caller's
process survives, and the temporary files are removed.

    python keras_vit/export/_litert_probe.py model.tflite images.npy outputs.npz [threads]
"""

import sys

import numpy as np


def main(argv):
    path, images_path, outputs_path = argv[1:4]
    threads = int(argv[4]) if len(argv) > 4 else 2
    from ai_edge_litert.interpreter import Interpreter

    images = np.load(images_path)
    runner = Interpreter(model_path=path, num_threads=threads).get_signature_runner("serving_default")
    batch = runner(images=images)
    single = runner(images=images[:1])  # the same interpreter, resized: dynamic batch works
    np.savez(outputs_path, **batch, **{f"single_{k}": v for k, v in single.items()})
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
