"""Texts to the ids of a text tower, as each upstream tokenizes them (``TextTokenizer``)."""

from keras_vit.text.cleaning import CLEANUPS, canonicalize, open_clip_clean
from keras_vit.text.tokenizer import TextTokenizer
