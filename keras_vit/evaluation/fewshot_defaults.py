"""The few-shot probe's defaults, in a module of their own that imports no backend, so that
``keras-vit fewshot --help`` shows them without Keras."""

DEFAULT_L2 = 2.0**10  # big_vision's common_fewshot config, which the paper's numbers come from
DEFAULT_SHOTS = (1, 5, 10, 25)
