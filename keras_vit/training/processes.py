"""Training in several processes: JAX's multi-process runtime through ``keras.distribution``.

Every process runs the same command with its own ``--process-id``; process 0 also hosts
the coordinator at ``--coordinator-address``. ``keras.distribution.initialize`` joins them,
after which ``keras.distribution.list_devices()`` lists every process's devices and the
``data_parallel`` and ``sharded`` strategies span them all. On CPUs the processes'
collectives go through gloo. ``--coordinator-address auto`` leaves the three values to
JAX's cluster detection (a TPU VM pod slice, SLURM, Open MPI).

The run's other rules live with the run: each process reads its own part of each batch
(``keras_vit/data/pipeline.py``), process 0 alone writes files (``is_writer``) and shows
the progress (``fit_verbosity``), and a value that must agree across processes is process
0's (``agree``).

TensorFlow's ``MultiWorkerMirroredStrategy`` and torch across processes are not engines
Keras' ``fit`` runs on: asking for them is an error naming what works.
"""

import contextlib
import dataclasses
import json
import os
import socket
import sys
import time
import weakref

import keras
import numpy as np

from keras_vit.dependencies import require

# keras.distribution.initialize's own environment variables, read when a flag is not given.
ENVIRONMENT = {
    "coordinator_address": "KERAS_DISTRIBUTION_JOB_ADDRESSES",
    "num_processes": "KERAS_DISTRIBUTION_NUM_PROCESSES",
    "process_id": "KERAS_DISTRIBUTION_PROCESS_ID",
}
AUTO = "auto"  # the coordinator found by JAX's cluster detection
MULTI_PROCESS_STRATEGIES = ("data_parallel", "sharded")
_ELSEWHERE = {
    "tensorflow": (
        "Keras 3's fit does not run under TensorFlow's MultiWorkerMirroredStrategy "
        "(keras-team/keras#20585): train across several GPU hosts with KERAS_BACKEND=jax, or on a "
        "TPU pod slice with --strategy tpu"
    ),
    "torch": "Keras' fit trains on one device with torch: train across processes with KERAS_BACKEND=jax",
}


@dataclasses.dataclass(frozen=True)
class Processes:
    """The processes that train together: ``count`` of them, this one ``index``."""

    coordinator: str
    count: int | None
    index: int | None


def requested(config, environ=None):
    """The processes ``config`` (its flags, else Keras' environment variables) asks for, or
    None for a one-process run."""
    environ = os.environ if environ is None else environ
    workers = _tf_config_workers(environ.get("TF_CONFIG"))
    if keras.backend.backend() == "tensorflow" and workers > 1:  # TensorFlow's own way to ask
        return Processes("TF_CONFIG", workers, None)
    values = {}
    for field, variable in ENVIRONMENT.items():
        value = getattr(config, field)
        if value is None and environ.get(variable):
            value = environ[variable] if field == "coordinator_address" else _int(environ[variable], variable)
        values[field] = value
    if values["coordinator_address"] == AUTO:
        return Processes(AUTO, None, None)
    if values["num_processes"] is None and (values["coordinator_address"] or values["process_id"] is not None):
        raise ValueError(
            "--coordinator-address and --process-id join several processes: expected --num-processes (or "
            "KERAS_DISTRIBUTION_NUM_PROCESSES) with them, or --coordinator-address auto."
        )
    if not values["num_processes"] or values["num_processes"] == 1:
        return None
    return Processes(values["coordinator_address"], values["num_processes"], values["process_id"])


def _tf_config_workers(text):
    """How many tasks a ``TF_CONFIG``'s cluster lists (0 when none, or unreadable)."""
    try:
        cluster = json.loads(text or "{}").get("cluster", {})
        return sum(len(tasks) for tasks in cluster.values())
    except (ValueError, AttributeError, TypeError):
        return 0


def _int(text, variable):
    try:
        return int(text)
    except ValueError:
        raise ValueError(f"{variable} must be an integer; got {text!r}.") from None


def check(processes, strategy):
    """Clear errors, before anything starts, for processes the run cannot have."""
    if processes is None:
        return
    backend = keras.backend.backend()
    if backend != "jax":
        raise ValueError(
            f"Training in several processes runs on JAX; got the {backend} backend. {_ELSEWHERE[backend]}."
        )
    if strategy not in MULTI_PROCESS_STRATEGIES:
        raise ValueError(
            f"strategy {strategy!r} trains on one process's devices; several processes need one of "
            f"{MULTI_PROCESS_STRATEGIES}."
        )
    if processes.coordinator == AUTO:
        return
    count, index = processes.count, processes.index
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise ValueError(f"--num-processes must be a positive integer; got {count!r}.")
    if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < count:
        raise ValueError(f"--process-id must be from 0 to {count - 1} (--num-processes {count}); got {index!r}.")
    _host_port(processes.coordinator)


def _host_port(address):
    host, _, port = str(address or "").rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(f"--coordinator-address must be process 0's host:port (e.g. 10.0.0.1:1234); got {address!r}.")
    return host, int(port)


def join(config):
    """Joins the run's other processes, if ``config`` asks for any."""
    joining = requested(config)
    check(joining, config.strategy)
    if joining is not None:
        initialize(joining, config.coordinator_timeout)


def initialize(processes, timeout):
    """Joins the processes (once per process). A process other than 0 first waits up to
    ``timeout`` seconds for the coordinator to answer, so that a wrong address is an error,
    not a hang."""
    jax = require("jax", "jax")
    if jax.distributed.is_initialized():
        return
    if processes.coordinator != AUTO and processes.index > 0:
        _wait_for(processes.coordinator, timeout)
    # On CPUs the collectives between processes need gloo (JAX's default has none there).
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    if processes.coordinator == AUTO:
        keras.distribution.initialize()
    else:
        keras.distribution.initialize(processes.coordinator, processes.count, processes.index)


def _wait_for(address, timeout):
    host, port = _host_port(address)
    deadline = time.monotonic() + timeout
    while True:
        try:
            with socket.create_connection((host, port), timeout=1.0):
                return
        except OSError as error:
            if time.monotonic() > deadline:
                raise ConnectionError(
                    f"No coordinator answered at {address} within {timeout} s ({error.strerror or error}): "
                    "expected process 0 to run there, started with the same --coordinator-address."
                ) from None
            time.sleep(0.2)


def count():
    """How many processes train together (1 without ``initialize``)."""
    jax = _joined()
    return jax.process_count() if jax else 1


def index():
    """This process's place among them (0 without ``initialize``)."""
    jax = _joined()
    return jax.process_index() if jax else 0


def _joined():
    """JAX, once this process has joined others; else None."""
    if keras.backend.backend() != "jax":
        return None
    import jax

    return jax if jax.distributed.is_initialized() else None


def is_writer():
    """Whether this process writes the run's files: process 0 alone."""
    return index() == 0


def fit_verbosity(progress, stream=None):
    """Keras fit's ``verbose`` for the recipe's ``progress``: 0 but in the writer (one
    progress a run); ``None`` is progress bars on a terminal, else (a log file, a pipe) one
    line per epoch, without the bars' escape codes. ``stream``: default ``sys.stdout``.

    >>> import io
    >>> fit_verbosity(None, io.StringIO()), fit_verbosity(1, io.StringIO()), fit_verbosity(0)
    (2, 1, 0)
    """
    if not is_writer():
        return 0
    if progress is None:
        return 1 if (sys.stdout if stream is None else stream).isatty() else 2
    return progress


@contextlib.contextmanager
def alone():
    """For what one process does alone (the writer's files): outside the distribution, so
    that a variable made meanwhile (Keras' saving makes some) lives in this process only,
    not in a collective the others never join."""
    current = keras.distribution.distribution()
    keras.distribution.set_distribution(None)
    try:
        yield
    finally:
        keras.distribution.set_distribution(current)


def agree(values):
    """Process 0's ``values`` (a tuple of ints), in every process."""
    if count() == 1:
        return tuple(values)
    from jax.experimental import multihost_utils

    return tuple(int(v) for v in multihost_utils.broadcast_one_to_all(np.asarray(values, "int64")))


def _whole(value):
    """A variable's value as numpy: gathered from the processes when it is split across them."""
    if getattr(value, "is_fully_addressable", True) or value.is_fully_replicated:
        return keras.ops.convert_to_numpy(value)
    from jax.experimental import multihost_utils

    return np.asarray(multihost_utils.process_allgather(value, tiled=True))


def _state(model):
    return [*model.variables, *(model.optimizer.variables if model.optimizer is not None else ())]


def snapshot(model, build, split):
    """What the run's files are written from: ``model``, or where ``split`` (its weights
    split over the devices) across several processes, ``build()``'s copy in the writer's
    host memory, outside the distribution."""
    if not split or count() == 1:
        return Snapshot(model)
    if not is_writer():
        return Snapshot(model, None, split=True)
    with alone(), keras.device("cpu:0"):
        copy = build()
        copy.optimizer.build(copy.trainable_variables)
    return Snapshot(model, copy, split=True)


class Snapshot:
    """The model the run's files are written from.

    Where each process holds every weight whole (one process, or data parallel), that is
    the model itself. Where weights are split across processes (``sharded`` over several),
    no process can read them: calling the snapshot
    gathers each one, in every process (a collective: all must call it together), into
    ``copy``, a model of the same build and a built optimizer, made outside the
    distribution (``alone``) and held by the writer alone (``copy`` None elsewhere).
    """

    def __init__(self, model, copy=None, split=False):
        self.model, self.copy, self.split = model, copy, split

    def __call__(self):
        if not self.split:
            return self.model
        sources = _state(self.model)
        targets = _state(self.copy) if self.copy is not None else [None] * len(sources)
        if len(targets) != len(sources):
            raise RuntimeError(f"the writer's copy holds {len(targets)} variables, the model {len(sources)}")
        for source, target in zip(sources, targets):
            value = _whole(source.value)
            if target is not None:
                target.assign(value)
        return self.copy


def predict(model, images):
    """``model``'s outputs for ``images`` (numpy, the same in every process), as numpy in
    every process: each process computes its part of the batch (a collective)."""
    jax = require("jax", "jax")
    from jax.experimental import multihost_utils

    devices, local = jax.device_count(), jax.local_device_count()
    rows = -(-len(images) // devices)  # per device, the batch filled up with its first image
    filled = np.concatenate([images, np.repeat(images[:1], rows * devices - len(images), axis=0)])
    start = index() * rows * local
    mesh = jax.sharding.Mesh(np.array(jax.devices()), ("batch",))
    sharding = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec("batch"))
    batch = jax.make_array_from_process_local_data(sharding, filled[start : start + rows * local])
    outputs = _stateless_forward(model)(
        [v.value for v in model.trainable_variables], [v.value for v in model.non_trainable_variables], batch
    )
    return np.asarray(multihost_utils.process_allgather(outputs, tiled=True))[: len(images)]


_FORWARDS = weakref.WeakKeyDictionary()


def _stateless_forward(model):
    """``model``'s inference as one jitted function of its weights and a batch (kept while
    the model lives, so each batch shape compiles once)."""
    if model not in _FORWARDS:
        import jax

        def forward(trainable, non_trainable, batch):
            return model.stateless_call(trainable, non_trainable, batch, training=False)[0]

        _FORWARDS[model] = jax.jit(forward)
    return _FORWARDS[model]
