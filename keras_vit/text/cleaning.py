"""The upstreams' text clean-ups before tokenizing, each by name (``TextTokenizer.clean``).

A text tower's accuracy depends on them as much as on its weights: the ids of a caption
cleaned otherwise are not the ones the tower was trained on.
"""

import html
import re
import string

from keras_vit.dependencies import require

_WHITESPACE = re.compile(r"\s+")
_PUNCTUATION = str.maketrans("", "", string.punctuation)


def _collapse_whitespace(text):
    return _WHITESPACE.sub(" ", text).strip()


def _open_clip_basic(text):
    """open_clip's first step: mojibake and HTML entities fixed (``ftfy``, then
    ``html.unescape`` twice), whitespace collapsed."""
    ftfy = require("ftfy", "text")
    return _collapse_whitespace(html.unescape(html.unescape(ftfy.fix_text(text))))


def open_clip_clean(text):
    """open_clip's (and OpenAI CLIP's) clean-up: ``_open_clip_basic``, then lower case.

    >>> open_clip_clean("  A &amp;amp; B\\tC ")
    'a & b c'
    """
    return _open_clip_basic(text).lower()


def open_clip_canonicalize(text):
    """open_clip's ``canonicalize`` for its SigLIP tokenizers: ``_open_clip_basic``, then
    big_vision's canonical text, underscores read as spaces first (as open_clip does).

    >>> open_clip_canonicalize("A snake_case &amp; Co.")
    'a snake case co'
    """
    return canonicalize(_open_clip_basic(text).replace("_", " "))


def canonicalize(text, lower=True):
    """big_vision's and SigLIP's canonical text: lower case (unless a tokenizer's config says
    ``do_lower_case: false``), ASCII punctuation removed, whitespace collapsed.

    >>> canonicalize("A photo of a Cat,  (small)!")
    'a photo of a cat small'
    """
    return _collapse_whitespace((text.lower() if lower else text).translate(_PUNCTUATION))


# clean-up -> the function; "none": the tokenizer's own normalisation alone; open_clip_*:
# open_clip's tokenizers' ``clean`` options.
CLEANUPS = {
    "none": lambda text: text,
    "open_clip": open_clip_clean,
    "open_clip_lower": open_clip_clean,
    "open_clip_whitespace": _open_clip_basic,
    "open_clip_canonicalize": open_clip_canonicalize,
    "canonicalize": canonicalize,
    "canonicalize_cased": lambda text: canonicalize(text, lower=False),
}
