"""Model sources: ``resolve`` says what a name, folder, file or URL names (a ``ModelSource``),
``build`` makes the Keras model from that and loads its weights. ``keras_vit.factory`` (the
front door) calls them in turn."""

from keras_vit.sources.builder import build, load_keras_file
from keras_vit.sources.description import InvalidModelFileError, ModelSource, NoWeightsError, Weights
from keras_vit.sources.resolver import resolve
