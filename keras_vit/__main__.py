"""``python -m keras_vit COMMAND``: the ``keras-vit`` program (``keras_vit/commands``)."""

import sys

from keras_vit.commands import main

sys.exit(main())
