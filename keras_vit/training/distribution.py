"""The one seam for running past one device: TensorFlow strategies and keras.distribution.

Nothing here reimplements distribution: TensorFlow's ``TPUStrategy`` /
``MirroredStrategy`` and JAX's ``keras.distribution`` (data parallel, Megatron-style model
parallel, and parameters sharded FSDP-style) do the work; this module only picks and
configures them.
"""

import contextlib

import keras

from keras_vit.dependencies import require
from keras_vit.vocabulary import STRATEGIES


def model_parallel_layout_map(device_mesh):
    """Megatron-style sharding of the encoder blocks over the mesh's "model" axis.

    Column-parallel qkv and fc1 kernels, row-parallel out and fc2 kernels, so each block
    needs one all-reduce after attention and one after the MLP; everything else is
    replicated. Regexes match keras-vit's variable paths.
    """
    layout_map = keras.distribution.LayoutMap(device_mesh)
    layout_map[r".*attention/qkv/kernel"] = (None, "model")
    layout_map[r".*attention/qkv/bias"] = ("model",)
    layout_map[r".*attention/out/kernel"] = ("model", None)
    layout_map[r".*mlp/fc1/kernel"] = (None, "model")
    layout_map[r".*mlp/fc1/bias"] = ("model",)
    layout_map[r".*mlp/fc2/kernel"] = ("model", None)
    return layout_map


def sharded_layout_map(device_mesh):
    """FSDP-style: the batch and every large weight split over the mesh's one axis, "batch".

    Each dense kernel by its input rows, the patch embedding's kernel and the position
    table by their width; the optimizer's slots take their weight's layout, so each device
    holds its share of both. XLA gathers a layer's weights where the layer runs. The
    norms, biases and tokens (and a hybrid's ResNet stem) are replicated.
    """
    layout_map = keras.distribution.LayoutMap(device_mesh)
    layout_map[r"(?!.*(?:patch_embedding|resnet)/).*kernel"] = ("batch", None)
    layout_map[r".*patch_embedding/kernel"] = (None, None, None, "batch")
    layout_map[r".*position_embedding/embedding"] = (None, None, "batch")
    return layout_map


def sharded_dimensions(spec):
    """The widths the sharded layout splits: every one must divide by the device count."""
    return {"hidden_size": spec.hidden_size, "mlp_dim": spec.mlp_dim, "representation_size": spec.representation_size}


def model_parallel_mesh_shape(num_devices):
    """``(batch, model)`` axes: pairs of devices share each block, the rest split the batch."""
    model = 2 if num_devices % 2 == 0 else 1
    return num_devices // model, model


def num_replicas(strategy_name):
    """How many ways a global batch is split (checked before any training starts)."""
    backend = keras.backend.backend()
    if strategy_name == "default":
        return 1
    if backend == "jax":
        devices = len(keras.distribution.list_devices())
        if strategy_name == "model_parallel":
            return model_parallel_mesh_shape(devices)[0]
        return devices
    return make_tf_strategy(strategy_name).num_replicas_in_sync


def check_strategy(strategy_name, batch_size, accumulation_steps=1, spec=None):
    """Clear errors for a strategy this backend lacks, a batch it cannot split (over its
    devices, and over ``accumulation_steps`` micro-batches of one update), or a model
    ``spec`` whose widths the sharded layout cannot split."""
    backend = keras.backend.backend()
    allowed = STRATEGIES.get(backend, ("default",))
    if strategy_name not in allowed:
        raise ValueError(
            f"strategy {strategy_name!r} is not available on the {backend} backend; expected one of {allowed}."
        )
    replicas = num_replicas(strategy_name)
    if batch_size % replicas:
        raise ValueError(
            f"batch_size {batch_size} is not divisible by the {replicas} devices of strategy "
            f"{strategy_name!r}; use a multiple of {replicas}."
        )
    if strategy_name == "sharded" and spec is not None:
        uneven = {k: v for k, v in sharded_dimensions(spec).items() if v and v % replicas}
        if uneven:
            raise ValueError(
                f"strategy 'sharded' splits the model's widths over {replicas} devices; "
                f"{', '.join(f'{k} {v}' for k, v in uneven.items())} is not divisible by {replicas}."
            )
    parts = replicas * accumulation_steps
    if accumulation_steps > 1 and batch_size % parts:
        raise ValueError(
            f"batch_size {batch_size} is not divisible by the {replicas} device(s) times the "
            f"{accumulation_steps} accumulation steps; use a multiple of {parts}."
        )
    return replicas


_TF_STRATEGIES = {}


def make_tf_strategy(name, tpu=""):
    """A ``tf.distribute`` strategy by name (created once per process)."""
    tf = require("tensorflow", "tensorflow")

    if name not in _TF_STRATEGIES:
        if name == "tpu":
            resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu=tpu)
            tf.config.experimental_connect_to_cluster(resolver)
            tf.tpu.experimental.initialize_tpu_system(resolver)
            _TF_STRATEGIES[name] = tf.distribute.TPUStrategy(resolver)
        elif name == "mirrored":
            # All local GPUs, else all (logical) CPU devices.
            devices = tf.config.list_logical_devices("GPU") or tf.config.list_logical_devices("CPU")
            _TF_STRATEGIES[name] = tf.distribute.MirroredStrategy([d.name for d in devices])
        else:
            _TF_STRATEGIES[name] = tf.distribute.get_strategy()
    return _TF_STRATEGIES[name]


@contextlib.contextmanager
def distribution_scope(strategy_name, tpu="", across_processes=False):
    """Create and compile the model inside this scope. ``across_processes``: the JAX
    strategies span several processes, each feeding its own part of every batch (the
    pipeline's ``shard``), so Keras does not shard the dataset again.

    >>> with distribution_scope("default"):
    ...     pass
    """
    backend = keras.backend.backend()
    if strategy_name == "default":
        yield
    elif backend == "tensorflow":
        with make_tf_strategy(strategy_name, tpu).scope():
            yield
    elif backend == "jax":
        devices = keras.distribution.list_devices()
        auto_shard = {"auto_shard_dataset": not across_processes}
        if strategy_name == "data_parallel":
            distribution = keras.distribution.DataParallel(devices=devices, **auto_shard)
        elif strategy_name == "sharded":
            mesh = keras.distribution.DeviceMesh((len(devices),), ["batch"], devices)
            distribution = keras.distribution.ModelParallel(
                layout_map=sharded_layout_map(mesh), batch_dim_name="batch", **auto_shard
            )
        else:
            mesh = keras.distribution.DeviceMesh(model_parallel_mesh_shape(len(devices)), ["batch", "model"], devices)
            distribution = keras.distribution.ModelParallel(
                layout_map=model_parallel_layout_map(mesh), batch_dim_name="batch", **auto_shard
            )
        with distribution.scope():
            yield
    else:
        raise ValueError(f"strategy {strategy_name!r} is not available on the {backend} backend.")
