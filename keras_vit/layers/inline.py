"""What the layers made of sublayers share: inline sublayer calls and their dtype config."""

import keras

from keras_vit import torch_eager
from keras_vit.internals import direct_call, sublayers
from keras_vit.layers.arguments import arguments_config


def _inline_pays():
    """True in eager PyTorch only; False on TensorFlow and JAX, and while tracing.

    TensorFlow and JAX run compiled steps (``tf.function``, ``jax.jit``) that pay Keras'
    bookkeeping once, at trace time, and the name scopes it opens are what name the ops
    of a traced graph (``block_0/mlp/fc1/Gelu``), which the export's errors map back to layers
    (``unsupported_ops``). ``torch.compile`` and ``torch.export`` trace through
    ``Layer.__call__`` too (see ``torch_eager.is_tracing``).
    """
    return keras.config.backend() == "torch" and not torch_eager.is_tracing()


def call_inline(layer, *args, **kwargs):
    """``layer.call(...)`` in eager PyTorch, ``layer(...)`` everywhere else.

    For use from inside the owning layer's ``call``. Keras' ``Layer.__call__`` converts
    the inputs, binds the call signature, resolves ``training`` and masks and opens name
    and autocast scopes. In eager PyTorch that bookkeeping runs on every call of every
    sublayer and, at small batches, outweighs the arithmetic. So there, and only there, this
    calls ``layer.call`` directly (``keras_vit.internals.direct_call``). On TensorFlow and
    JAX, and while ``torch.compile`` or ``torch.export`` trace, it is the full
    ``layer(...)``, which keeps the name scopes of traced and exported graphs (see
    ``_inline_pays``).

    The direct call is exact only for sublayers that
    - the owner built in its ``build``, parameterless ones too: Keras' ``predict_on_batch``
      reruns the whole model eagerly while any layer reports itself unbuilt;
    - share the owner's dtype policy (the owner's autocast scope is already open) or create
      their variables with ``autocast=False``, as Keras' norms and ``StdConv2D`` do;
    - get ``training`` passed explicitly and use no masks.
    The parts of an encoder block or a ResNet unit are such layers. Quantized and
    rematerialised layers always take the full ``__call__``, which dispatches them.
    tests/test_inline.py compares both paths in float32 and mixed_bfloat16.

    >>> import keras, numpy as np
    >>> dense = keras.layers.Dense(2)
    >>> dense.build((1, 3))
    >>> x = np.ones((1, 3), "float32")
    >>> bool(np.allclose(keras.ops.convert_to_numpy(call_inline(dense, keras.ops.convert_to_tensor(x))),
    ...                  keras.ops.convert_to_numpy(dense(x))))
    True
    """
    if _inline_pays():
        return direct_call(layer, *args, **kwargs)
    return layer(*args, **kwargs)


def own_policy(layer):
    """A layer's own dtype policy: a layer given a ``DTypePolicyMap`` reports the map as its
    ``dtype_policy``; its own entry is the one at its path.

    >>> import keras
    >>> own_policy(keras.layers.Dense(2, dtype="mixed_bfloat16")).name
    'mixed_bfloat16'
    """
    policy = layer.dtype_policy
    if isinstance(policy, keras.dtype_policies.DTypePolicyMap) and layer.path:
        return policy[layer.path]
    return policy


def sublayer_policy(layer, name):
    """The dtype policy for the Keras layer ``name`` that ``layer`` makes in its ``build``.

    ``layer``'s own policy, or, when that is a ``DTypePolicyMap`` (a reloaded quantized
    layer), the map's policy at the sublayer's path ``<layer.path>/<name>``. Keras' own
    layers get that plain policy, not the map: ``Dense.quantize`` names its new policy
    after the current one (``int8_from_<name>``) and fails on a map's ``map_float32``.
    This package's composite layers take the map itself, to look up their own parts.

    >>> import keras
    >>> sublayer_policy(keras.layers.Layer(dtype="mixed_bfloat16"), "fc1").name
    'mixed_bfloat16'
    """
    policy = layer.dtype_policy
    if isinstance(policy, keras.dtype_policies.DTypePolicyMap) and layer.path:
        return policy[f"{layer.path}/{name}"]
    return policy


def dtype_policy_config(layer):
    """The ``"dtype"`` entry of ``get_config`` for a layer made of sublayers.

    ``model.quantize(...)`` gives each quantized sublayer (a ``Dense``) its own policy,
    e.g. ``int8_from_float32``, which a plain ``get_config`` loses: the reloaded layer
    builds float sublayers and cannot take the int8 weights. So while any sublayer is
    quantized, this returns a serialized ``keras.dtype_policies.DTypePolicyMap``: the
    layer's own policy as default, plus each quantized sublayer's policy under its
    ``path`` (entries under this layer's path of a map it was given are kept). Reloaded, the layer gets
    that map as ``dtype`` and gives each sublayer it makes in ``build`` its policy from
    the map (``sublayer_policy``): the paths match because every sublayer is built
    inside its owner's name scope, as when it was saved.

    >>> from keras_vit.layers import MlpBlock
    >>> mlp = MlpBlock(8, name="mlp")
    >>> mlp.build((None, 4))
    >>> dtype_policy_config(mlp)["config"]
    {'name': 'float32'}
    >>> mlp.fc1.quantize("int8")
    >>> config = dtype_policy_config(mlp)
    >>> config["class_name"], {k: v["config"] for k, v in config["config"]["policy_map"].items()}
    ('DTypePolicyMap', {'mlp/fc1': {'mode': 'int8', 'source_name': 'float32'}})
    """
    policy = layer.dtype_policy
    is_map = isinstance(policy, keras.dtype_policies.DTypePolicyMap)
    default = policy.default_policy if is_map else policy
    # A map given by an enclosing model can name every layer of that model: keep this
    # layer's part (all of it while unbuilt, when the path is unknown).
    prefix = f"{layer.path}/" if layer.path else ""
    entries = {key: policy[key] for key in policy if key.startswith(prefix)} if is_map else {}
    for sublayer in sublayers(layer):
        own = own_policy(sublayer)
        if sublayer.path and own.quantization_mode is not None:
            entries[sublayer.path] = own
    if not entries:
        return keras.dtype_policies.serialize(default)
    policy_map = keras.dtype_policies.DTypePolicyMap(default_policy=default, policy_map=entries)
    return keras.dtype_policies.serialize(policy_map)


def composite_config(layer, base_config):
    """``get_config`` of a layer made of sublayers: Keras' ``base_config``, each argument of
    the layer's ``__init__`` as the layer holds it (``arguments_config``), and
    ``dtype_policy_config``.

    >>> from keras_vit.layers import MlpBlock
    >>> config = composite_config(MlpBlock(8, dropout_rate=0.1), {})
    >>> config["mlp_dim"], config["dropout_rate"], config["gelu_approximate"]
    (8, 0.1, True)
    """
    return {**arguments_config(layer, base_config), "dtype": dtype_policy_config(layer)}
