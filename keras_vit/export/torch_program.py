"""The ``torch_export`` format: a ``.pt2`` program, raw images in, ``serving_default``'s outputs out.

Built on ``keras_vit.torch_graph`` (the model as one ``torch.export`` graph); torch is
imported only when a function here runs.
"""

from keras_vit.torch_graph import EXAMPLE_BATCH, export_graph, module_class, require_torch_backend, weights_device


def serving_program(model, *, top_k=5, normalization="vit", outputs_probabilities=False):
    """The ``torch_export`` format's program: raw images in, ``serving_default``'s outputs out.

    Takes ``uint8`` images ``(batch, H, W, C)`` at the model's image size (any batch size),
    pre-processes them inside with the model's own ``model.preprocessing``, else as
    ``normalization`` says (``serving.serving_preprocessing``), and returns a dict of
    ``probabilities`` (float32, softmax unless the model ends in one), ``top_k_scores``
    (float32) and ``top_k_indices`` (int32), top-k left out when ``top_k`` is 0: the
    SavedModel's ``serving_default``, LiteRT's and ONNX's inputs and outputs.

    Example (torch backend):
    >>> import keras, numpy as np, keras_vit
    >>> if keras.backend.backend() == "torch":
    ...     import torch
    ...     model = keras_vit.create_model("vit_ti16", image_size=16, patch_size=8, num_classes=3, depth=1)
    ...     outputs = serving_program(model, top_k=2).module()(torch.zeros((5, 16, 16, 3), dtype=torch.uint8))
    ...     print(sorted(outputs), tuple(outputs["top_k_indices"].shape))
    ... else:
    ...     print("['probabilities', 'top_k_indices', 'top_k_scores'] (5, 2)")
    ['probabilities', 'top_k_indices', 'top_k_scores'] (5, 2)
    """
    import torch

    from keras_vit.export.serving import image_spec, serving_preprocessing

    require_torch_backend("The torch_export format")
    height, width, channels = image_spec(model)
    serving = dict(outputs_probabilities=outputs_probabilities, top_k=min(int(top_k), int(model.output_shape[-1])))
    module = module_class()(model, False, serving_preprocessing(model, normalization), serving)
    example = torch.zeros((EXAMPLE_BATCH, height, width, channels), dtype=torch.uint8, device=weights_device(model))
    with torch.no_grad():
        return export_graph(module.eval(), example)


def write_pt2(model, path, *, top_k=5, normalization="vit", outputs_probabilities=False):
    """Writes ``serving_program(model, ...)`` to ``path`` with ``torch.export.save``; returns ``path``.

    Written as given, without verification or renaming: ``export_model`` is the safe entry
    point (it verifies the file in a process that never imports Keras, then moves it into place).
    """
    import torch

    program = serving_program(
        model, top_k=top_k, normalization=normalization, outputs_probabilities=outputs_probabilities
    )
    torch.export.save(program, path)
    return path
