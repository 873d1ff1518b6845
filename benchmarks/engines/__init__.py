"""The engines the speed benchmark times: one adapter module per family.

An adapter module has
    NAMES       its engines' names (the --engines choices)
    FRAMEWORK   "keras" or "torch": what the harness seeds and releases between rows
    SETTINGS    the command line's settings it honours; they are passed to ``steps`` as
                keywords and recorded in its rows (a peer's columns stay empty)
    backend(engine)  the Keras backend of the engine's process (the torch one for PyTorch
                peers): the engines of one backend share a process and take turns
    steps(engine, arch, precision, batch, device, **settings) -> (infer, train, model):
                steps that block until their result exists, and the model they hold

Adapters import their frameworks inside functions: the parent process reads this registry
without Keras or PyTorch.
"""

from engines import hf_engine, keras_hub_engine, keras_vit_engine, timm_engine

FAMILIES = (keras_vit_engine, keras_hub_engine, timm_engine, hf_engine)
ADAPTERS = {name: family for family in FAMILIES for name in family.NAMES}
ENGINES = tuple(ADAPTERS)


def adapter(engine):
    return ADAPTERS[engine]


def backend(engine):
    """The Keras backend of an engine's process."""
    return ADAPTERS[engine].backend(engine)
