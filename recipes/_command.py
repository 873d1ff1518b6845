"""What each recipe script does: ``python recipes/NAME.py FLAGS`` runs ``keras-vit COMMAND FLAGS``."""

import sys


def run(command):
    # The command holds the backends' lines back itself, as in the keras-vit program
    # (--verbose shows them).
    from keras_vit.commands import main

    sys.exit(main([command, *sys.argv[1:]]))
