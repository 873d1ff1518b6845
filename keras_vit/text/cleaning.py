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


def open_clip_clean(text):
    """open_clip's (and OpenAI CLIP's) clean-up: mojibake and HTML entities fixed (``ftfy``,
    then ``html.unescape`` twice), whitespace collapsed, lower case.

    >>> open_clip_clean("  A &amp;amp; B\\tC ")
    'a & b c'
    """
    ftfy = require("ftfy", "text")
    text = html.unescape(html.unescape(ftfy.fix_text(text))).strip()
    return _collapse_whitespace(text).lower()


def canonicalize(text, lower=True):
    """big_vision's and SigLIP's canonical text: lower case (unless a tokenizer's config says
    ``do_lower_case: false``), ASCII punctuation removed, whitespace collapsed.

    >>> canonicalize("A photo of a Cat,  (small)!")
    'a photo of a cat small'
    """
    return _collapse_whitespace((text.lower() if lower else text).translate(_PUNCTUATION))


# clean-up -> the function; "none": the tokenizer's own normalisation alone.
CLEANUPS = {
    "none": lambda text: text,
    "open_clip": open_clip_clean,
    "canonicalize": canonicalize,
    "canonicalize_cased": lambda text: canonicalize(text, lower=False),
}
