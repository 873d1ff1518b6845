"""A model rebuilt with a changed spec, carrying what is not in the spec: its dtype policy,
name, pre-processing and class names. Resizing, loading at another size and adapting a
local preset each rebuild a model this way, then fill in its weights."""

from keras_vit.models.vit import VisionTransformer, resized_preprocessing


def rebuild(model, spec, dtype=None, **own):
    """A new ``VisionTransformer`` of ``spec`` like ``model``; its weights are not copied.

    It gets ``model``'s dtype policy (unless ``dtype``), and its ``name``, ``preprocessing``
    and ``class_names`` unless ``own`` replaces them. The pre-processing follows the new
    image size; ``model``'s class names are dropped when the class count changes, while
    class names given in ``own`` are kept whatever the count (one name per new class).

    Examples:
        >>> import keras_vit
        >>> model = keras_vit.create_model("vit_ti16", image_size=16, num_classes=2, depth=1,
        ...                                class_names=["cat", "dog"])
        >>> wider = rebuild(model, model.spec.replace(image_size=32))
        >>> wider.input_shape, wider.class_names
        ((None, 32, 32, 3), ('cat', 'dog'))
        >>> rebuild(model, model.spec.replace(num_classes=5)).class_names is None
        True
        >>> rebuild(model, model.spec.replace(num_classes=3), class_names=["a", "b", "c"]).class_names
        ('a', 'b', 'c')
    """
    name = own.pop("name", model.name)
    preprocessing = own.pop("preprocessing", model.preprocessing)
    if "class_names" in own:  # given: kept (VisionTransformer checks one name per class)
        class_names = own.pop("class_names")
    else:
        class_names = model.class_names if spec.num_classes == model.spec.num_classes else None
    if own:
        raise TypeError(f"rebuild() got unexpected arguments {sorted(own)}: spec fields go in spec.")
    return VisionTransformer(
        spec,
        dtype=model.dtype_policy if dtype is None else dtype,
        preprocessing=resized_preprocessing(preprocessing, spec.image_size),
        class_names=class_names,
        name=name,
    )
