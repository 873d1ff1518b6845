"""A keras-vit layer's ``get_config``: its ``__init__`` arguments, read from the signatures."""

import inspect


def argument_names(layer):
    """The names ``layer``'s ``__init__`` takes: its class's and those of the keras-vit classes
    it passes ``**kwargs`` on to (Keras' own ``Layer`` arguments are left to Keras).

    >>> from keras_vit.layers import PatchEmbedding
    >>> argument_names(PatchEmbedding(8, 4))
    ['hidden_size', 'patch_size', 'num_channels', 'flatten', 'use_bias']
    """
    names = []
    for cls in type(layer).__mro__:
        if not cls.__module__.startswith("keras_vit."):
            break
        if "__init__" not in vars(cls):  # a subclass that takes its base's arguments
            continue
        parameters = inspect.signature(cls.__init__).parameters.values()
        own = [p.name for p in parameters if p.name != "self" and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
        names += [name for name in own if name not in names]
        if not any(p.kind is p.VAR_KEYWORD for p in parameters):
            break
    return names


def arguments_config(layer, base_config):
    """``get_config`` of a layer that holds each ``__init__`` argument as an attribute of the
    same name: Keras' ``base_config`` and those attributes, so a new argument is saved without
    being listed again.

    >>> from keras_vit.layers import PatchEmbedding
    >>> arguments_config(PatchEmbedding(8, 4, flatten=False), {})
    {'hidden_size': 8, 'patch_size': 4, 'num_channels': 3, 'flatten': False, 'use_bias': True}
    """
    return {**base_config, **{name: getattr(layer, name) for name in argument_names(layer)}}
