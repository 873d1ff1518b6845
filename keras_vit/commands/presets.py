"""The pretrained presets as a table (``keras-vit presets [PATTERN]``), or one preset's card
when the pattern names exactly one: file, numerics, pre-processing, top-1, licence."""

from keras_vit import commands
from keras_vit.presets.__main__ import main as show


def build_parser():
    parser = commands.parser("presets", __doc__)
    parser.add_argument("pattern", nargs="?", default="*", help="a glob over preset names")
    return parser


def main(argv=None):
    return show([build_parser().parse_args(argv).pattern])
