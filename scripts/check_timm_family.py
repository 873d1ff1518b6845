"""Loads every timm architecture keras-vit builds, at timm's logits, on the backend
KERAS_BACKEND names: the whole table, as the tests load it by hub name on each backend
(tests/test_family.py), without the loopback hub. Needs timm (the test extra).

Each architecture is built by timm at depth 2 on a 3x3 patch grid, 8 channels a head, with
random informative weights, written by timm's ``save_for_hf`` into a folder and loaded from
it by ``keras_vit.create_model``; both see the scikit-image cat through timm's evaluation
transform. Prints one line per architecture and the count within ``--rtol`` of the logits'
scale; exits 1 if any is not.

    KERAS_BACKEND=jax .venv/bin/python scripts/check_timm_family.py [--only PATTERN]
"""

import argparse
import fnmatch
import os
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [ROOT, os.path.join(ROOT, "tests")]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", default="*", help="a shell pattern of architecture names")
    parser.add_argument("--rtol", type=float, default=2e-5)
    args = parser.parse_args(argv)

    import numpy as np
    import torchvision_stub  # timm imports torchvision; the tests' inert stand-in serves

    torchvision_stub.install()
    import timm
    from helpers import small_timm_model, timm_input, to_numpy, torch_logits

    import keras_vit
    from keras_vit.checkpoints import timm_config

    names = [n for n in timm_config.buildable() if fnmatch.fnmatch(n, args.only)]
    worst = {}
    for name in names:
        peer = small_timm_model(timm, name)
        with tempfile.TemporaryDirectory() as folder:
            timm.models.save_for_hf(peer, folder, safe_serialization=True)
            model = keras_vit.create_model(folder)
        x = timm_input(peer)
        expected = torch_logits(peer, x)
        worst[name] = float(np.abs(to_numpy(model(x)) - expected).max() / np.abs(expected).max())
        print(f"{name}: {worst[name]:.2e}", flush=True)
    within = [n for n, error in worst.items() if error <= args.rtol]
    print(f"{len(within)} of {len(names)} within {args.rtol:g} of the logits' scale")
    return 0 if len(within) == len(names) else 1


if __name__ == "__main__":
    sys.exit(main())
