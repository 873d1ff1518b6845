"""A process's part of each batch, and evaluation batches filled to a fixed size.

Training in ``count`` processes, the global batch of ``batch_size`` is the one a single
process would make: the consecutive examples of the shuffled stream, in order. Process
``index`` takes the ``index``-th ``batch_size / count`` of them, and Keras assembles the
processes' parts into the global batch (its dataset sharding turned off). Each example
keeps its place in the stream, so its random crop and flip (drawn from its position's seed)
are the single process's too, and the other processes' examples are dropped before any
transform.

Evaluated across several devices, every batch needs the same size: the last one is filled
with blank examples of weight 0, so each real example counts once, none is dropped.
"""

from keras_vit.dependencies import require


def check_shard(shard, batch_size):
    """``(index, count)`` that splits ``batch_size``, else a clear error."""
    if shard is None:
        return None
    index, count = shard
    if not (isinstance(count, int) and count >= 1 and isinstance(index, int) and 0 <= index < count):
        raise ValueError(f"shard must be (index, count) with 0 <= index < count; got {shard!r}.")
    if batch_size % count:
        raise ValueError(f"batch_size {batch_size} does not split into {count} equal parts (shard {shard!r}).")
    return index, count


def own_part(dataset, batch_size, shard, start=0):
    """The elements of ``dataset`` (its positions counted from ``start``) that process
    ``index`` of ``count`` batches: of each ``batch_size`` consecutive positions, its share."""
    if shard is None:
        return dataset
    index, count = shard
    part = batch_size // count
    mine = dataset.enumerate(start).filter(lambda position, _: (position % batch_size) // part == index)
    return mine.map(lambda _, element: element)


def full_batches(dataset, num_examples, batch_size):
    """The examples of ``dataset``'s full batches: its last, partial one left out."""
    return dataset.take(num_examples - num_examples % batch_size)


def with_blanks(dataset, num_examples, batch_size, shard):
    """``(image, label, weight)`` examples: the transformed ``dataset`` with weight 1, then
    the blanks (zero images, weight 0) that fill the last batch to ``batch_size``; this
    process's part of them when ``shard`` is given (``dataset`` already its part)."""
    tf = require("tensorflow", "data")

    image_spec, label_spec = dataset.element_spec
    blank = (tf.zeros(image_spec.shape, image_spec.dtype), tf.zeros(label_spec.shape, label_spec.dtype), 0.0)
    blanks = tf.data.Dataset.from_tensors(blank).repeat(-num_examples % batch_size)
    real = dataset.map(lambda image, label: (image, label, 1.0))
    return real.concatenate(own_part(blanks, batch_size, shard, start=num_examples))


def count_examples(data, dataset):
    """The number of examples: the split's, the dataset's cardinality, or counted."""
    tf = require("tensorflow", "data")

    known = getattr(data, "num_examples", None)
    if known is not None:
        return int(known)
    cardinality = int(dataset.cardinality())
    if cardinality >= 0:
        return cardinality
    return int(dataset.reduce(tf.constant(0, tf.int64), lambda total, _: total + 1))
