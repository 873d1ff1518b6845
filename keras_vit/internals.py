"""Everything keras-vit takes from Keras, TensorFlow, PyTorch or JAX beyond their public API.

Each use is a function here that says what it reaches, why, and which public route was
tried first. ``ENTRIES`` lists the private names themselves, and tests/test_internals.py
checks that the installed frameworks still have each one, so that an upgrade that drops
one fails there, naming this file, and not somewhere inside a model. That test also
checks that no other module of keras_vit spells a framework's private names.

A leaf: it imports Keras, and torch, JAX or TensorFlow only inside a function, never when
it is imported.
"""

import dataclasses
import importlib

import keras

SEAM = "keras_vit/internals.py"


@dataclasses.dataclass(frozen=True)
class Entry:
    """One private name of a framework that keras-vit relies on.

    ``owner`` is an importable module (``"keras.src.layers.preprocessing.data_layer"``) or
    ``module:Class`` (``"keras.layers:Layer"``); ``name`` the attribute on it, on an
    instance made without arguments when ``on_instance`` (set in ``__init__``). ``used_in``
    is where keras-vit spells the name: this file, or another one still to be routed here.
    """

    owner: str
    name: str
    why: str
    public_tried: str
    on_instance: bool = False
    used_in: str = SEAM

    @property
    def framework(self):
        return self.owner.split(".")[0].split(":")[0]

    def __str__(self):
        module, _, cls = self.owner.partition(":")
        return f"{module}.{cls + '.' if cls else ''}{self.name}"


def lookup(entry):
    """The object ``entry`` names, from the installed framework; a clear ``LookupError``
    (naming this file and the missing attribute) when that version no longer has it.

    >>> lookup(REMAT_MODE) is None  # a layer made outside any keras.RematScope
    True
    """
    module, _, cls = entry.owner.partition(":")
    try:
        owner = importlib.import_module(module)
        for part in filter(None, cls.split(".")):
            owner = getattr(owner, part)
        if entry.on_instance:
            owner = owner()
        return getattr(owner, entry.name)
    except (ImportError, AttributeError) as error:
        where = "" if entry.used_in == SEAM else f" (in {entry.used_in})"
        raise LookupError(
            f"{SEAM} relies on {entry}, which the installed {entry.framework} {_version(entry.framework)} "
            f"does not have ({error}). keras-vit uses it for {entry.why}; public route tried: "
            f"{entry.public_tried}. Update its entry in {SEAM} and the code that uses it{where}."
        ) from error


def _version(framework):
    try:
        return importlib.import_module(framework).__version__
    except (ImportError, AttributeError):
        return "(version unknown)"


def _keras_at_least(major, minor):
    return tuple(int(part) for part in keras.version().split(".")[:2]) >= (major, minor)


# -- Keras: the layers inside a layer --------------------------------------------------

FLATTEN_LAYERS = Entry(
    "keras.layers:Layer",
    "_flatten_layers",
    why="every layer inside a model or layer, nested ones too, each once, as Keras tracks them",
    public_tried="keras.Model.layers lists a model's top level only, and a plain Layer has no public list; "
    "walking public attributes misses sublayers kept under private names (Keras' own MultiHeadAttention keeps "
    "its projections and dropout so), and on PyTorch a layer's sublayers are not in its __dict__ at all "
    "(torch.nn.Module keeps them apart)",
)


def sublayers(layer):
    """Every layer inside ``layer`` (not ``layer`` itself), nested ones too, each once, in
    Keras' own order.

    >>> mlp = keras.Sequential([keras.layers.Dense(2, name="fc1"), keras.layers.Dense(1, name="fc2")])
    >>> [sublayer.name for sublayer in sublayers(mlp)]
    ['fc1', 'fc2']
    """
    return layer._flatten_layers(include_self=False, recursive=True)


# -- Keras and PyTorch: attributes kept out of their tracking ------------------------------


def set_untracked(obj, name, value):
    """``obj.name = value`` past the object's own ``__setattr__``.

    Why: a Keras layer tracks the layers and variables assigned to it (they would join its
    weights, its saved file and its ``summary``) and refuses new ones once built ("You
    cannot add new elements of state"); a ``torch.nn.Module`` registers an assigned module
    as its submodule (its parameters then counted twice); a Keras variable on JAX with NNX
    copies what is assigned into its NNX metadata. Public route tried: none of the three
    offers one (Keras' ``DotNotTrackScope`` is private); ``object.__setattr__`` is
    Python's own.

    >>> layer = keras.layers.Dense(2)
    >>> layer.build((None, 3))
    >>> set_untracked(layer, "_keras_vit_note", keras.layers.Dense(1))  # no error though built
    >>> len(layer.weights), type(layer._keras_vit_note).__name__
    (2, 'Dense')
    """
    object.__setattr__(obj, name, value)


def del_untracked(obj, name):
    """Removes what ``set_untracked`` set, as past the same ``__delattr__``."""
    object.__delattr__(obj, name)


# -- Keras: calling a layer without Layer.__call__ -----------------------------------------

REMAT_MODE = Entry(
    "keras.layers:Layer",
    "_remat_mode",
    on_instance=True,
    why="the keras.RematScope mode a layer was made under: such a layer must go through Layer.__call__, "
    "which rematerialises it",
    public_tried="keras.RematScope reports the scope open now, not the one a layer was made under",
)


def remat_mode(layer):
    """The ``keras.RematScope`` mode ``layer`` was made under, or None."""
    return getattr(layer, REMAT_MODE.name, None)


def direct_call(layer, *args, **kwargs):
    """``layer.call(...)``, past Keras' ``Layer.__call__``; ``layer(...)`` for a layer whose
    ``__call__`` does more than bookkeeping: a quantized one (dispatched to its quantized
    call) or one made under a ``keras.RematScope``.

    Why: eager PyTorch pays ``__call__``'s bookkeeping on every call of every sublayer
    (``keras_vit.layers.inline.call_inline`` says what it is, and where skipping it is
    exact). Public route tried: ``layer(...)``, as everywhere else. It relies on
    ``__call__`` adding nothing else those layers need: tests/test_inline.py and
    tests/test_layers.py compare both paths.

    >>> dense = keras.layers.Dense(2, kernel_initializer="ones")
    >>> dense.build((1, 3))
    >>> keras.ops.convert_to_numpy(direct_call(dense, keras.ops.ones((1, 3)))).tolist()
    [[3.0, 3.0]]
    """
    if layer.quantization_mode is None and remat_mode(layer) is None:
        return layer.call(*args, **kwargs)
    return layer(*args, **kwargs)


# -- Keras: the base of its pre-processing layers ------------------------------------------

_DATA_LAYER_AT = ("keras.src.layers.preprocessing.data_layer", "DataLayer")
_DATA_LAYER_BEFORE_3_10 = ("keras.src.layers.preprocessing.tf_data_layer", "TFDataLayer")
DATA_LAYER = Entry(
    *(_DATA_LAYER_AT if _keras_at_least(3, 10) else _DATA_LAYER_BEFORE_3_10),
    why="the base of Keras' own pre-processing layers (Rescaling, Normalization): its __call__ switches "
    "self.backend to TensorFlow inside a tf.data graph, so ImagePreprocessing maps over a tf.data pipeline on "
    "JAX and PyTorch too",
    public_tried="keras.layers.Layer, whose ops are the global backend's, which a tf.data graph cannot run on "
    "JAX or PyTorch; Keras exports no such base",
)


def data_layer_base():
    """The class ``ImagePreprocessing`` derives from (``DATA_LAYER``); raises a
    ``LookupError`` naming this file when the installed Keras lacks it.

    >>> issubclass(data_layer_base(), keras.layers.Layer)
    True
    """
    return lookup(DATA_LAYER)


# -- Private names still spelled outside this file ------------------------------------------
# Their files belong to other work; each is listed so that the version test watches it too.
# The reasons are read from their code; the public routes are the ones to try when they move here.

INITIAL_EPOCH = Entry(
    "keras:Model",
    "_initial_epoch",
    on_instance=True,
    why="the epoch fit resumes from, where Keras' own BackupAndRestore puts it",
    public_tried="fit(initial_epoch=...), which a callback cannot set",
    used_in="keras_vit/training/checkpointing.py",
)


def set_initial_epoch(model, epoch):
    """Makes ``model.fit`` (already running, from a callback's ``on_train_begin``) start at
    ``epoch``, as Keras' own ``BackupAndRestore`` does (``INITIAL_EPOCH``)."""
    setattr(model, INITIAL_EPOCH.name, epoch)


VARIABLE_INDEX = Entry(
    "keras.optimizers:Optimizer",
    "_get_variable_index",
    why="a variable's slot in the optimizer, as Keras' documented subclassing example finds it",
    public_tried="variable.path, which TensorFlow's update_step variables lack",
    used_in="keras_vit/optimizers.py",
)


def variable_index(optimizer, variable):
    """``variable``'s index among the variables ``optimizer`` was built with (``VARIABLE_INDEX``)."""
    return getattr(optimizer, VARIABLE_INDEX.name)(variable)


NOT_IMPLEMENTED = Entry(
    "keras.layers:Layer",
    "_not_implemented_error",
    why="Keras' own error for a subclass's quantize, so that the message is Keras'",
    public_tried="a NotImplementedError of keras-vit's own",
    used_in="keras_vit/layers/dense.py",
)


def not_implemented_error(layer, method):
    """Keras' error for ``method`` of a ``layer`` subclass that Keras does not implement it for."""
    return getattr(layer, NOT_IMPLEMENTED.name)(method)


CLIP_GRADIENTS = Entry(
    "keras.optimizers:Optimizer",
    "_clip_gradients",
    why="global-norm clipping of the gradient summed over a TensorFlow strategy's replicas",
    public_tried="global_clipnorm, which Keras applies to each replica's part of the gradient before summing the parts",
    used_in="keras_vit/training/optimizers.py",
)


def clip_after_summing_replicas(optimizer):
    """Makes ``optimizer``'s clipping (``global_clipnorm``), under a TensorFlow distribution
    strategy of several replicas (mirrored, TPU), clip the gradient of the whole batch: the
    replicas' parts summed, as one device clips it. Keras clips each replica's part before
    it sums them, which is another step (``CLIP_GRADIENTS``). Outside such a strategy,
    Keras' own clipping. Returns ``optimizer``."""
    clip = getattr(optimizer, CLIP_GRADIENTS.name)

    def clip_summed(grads):
        import tensorflow as tf

        context = tf.distribute.get_replica_context()
        replicas = context.num_replicas_in_sync if context is not None else 1
        if replicas == 1:
            return clip(grads)
        summed = iter(context.all_reduce(tf.distribute.ReduceOp.SUM, [g for g in grads if g is not None]))
        clipped = clip([None if g is None else next(summed) for g in grads])
        # Keras sums the replicas' gradients after this: each replica gives its share.
        return [None if g is None else g / replicas for g in clipped]

    setattr(optimizer, CLIP_GRADIENTS.name, clip_summed)
    return optimizer


ELSEWHERE = (
    CLIP_GRADIENTS,
    INITIAL_EPOCH,
    VARIABLE_INDEX,
    NOT_IMPLEMENTED,
    Entry(
        "keras.layers:Equalization",
        "_custom_histogram_fixed_width",
        why="overridden to pick the histogram code by the backend the layer runs on, not the global one",
        public_tried="keras.layers.Equalization as it is, slow inside tf.data under KERAS_BACKEND=jax",
        used_in="keras_vit/data/augment.py",
    ),
)

ENTRIES = (FLATTEN_LAYERS, REMAT_MODE, DATA_LAYER, *ELSEWHERE)
