"""What each recipe script does: ``python recipes/NAME.py FLAGS`` runs ``keras-vit COMMAND FLAGS``."""

import os
import sys


def run(command):
    # Set before keras_vit imports a backend: this process is a command, so the backends'
    # start-up lines are held back as in the keras-vit program (--verbose shows them).
    os.environ.setdefault("KERAS_VIT_QUIET", "1")
    from keras_vit.commands import main

    sys.exit(main([command, *sys.argv[1:]]))
