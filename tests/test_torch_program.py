"""The compiled PyTorch path: the model as one torch.export graph, compiled or trained.

``compile_for_inference`` and ``export_program`` are the torch backend's own (they capture
the ATen graph the torch backend runs), so these tests run on torch and skip elsewhere,
saying so; on the other backends the error that names ``KERAS_BACKEND=torch`` is tested.
The ``torch_export`` format (the ``.pt2`` file) works from every backend and is tested
with the other exports in test_export.py.
"""

import keras
import numpy as np
import pytest
from helpers import TINY_ENCODER, to_numpy

import keras_vit
from keras_vit.torch_graph import export_program

BACKEND = keras.backend.backend()
torch_only = pytest.mark.skipif(
    BACKEND != "torch", reason=f"the compiled path is the torch backend's own (KERAS_BACKEND=torch); this is {BACKEND}"
)
# Exact GELU and a random head (not the paper's zero init): outputs that differ per class,
# so that a wrong weight or op shows.
TINY = dict(image_size=32, patch_size=8, depth=2, num_classes=5, gelu_approximate=False, head_zero_init=False)
TOLERANCE = 1e-5


def _model(**options):
    return keras_vit.create_model("vit_ti16", **dict(TINY, **TINY_ENCODER, **options))


def _images(rng, batch):
    return rng.uniform(-1, 1, (batch, 32, 32, 3)).astype("float32")


@torch_only
def test_compiled_inference_equals_the_model_at_any_batch_size_and_follows_its_weights(rng):
    import torch
    from torch._dynamo.utils import counters

    model = _model()
    predict = keras_vit.compile_for_inference(model)
    graphs = counters["stats"]["unique_graphs"]
    # The first size compiles a graph of its own, 1 another (torch specialises size 1), and
    # the first other size one that serves every size after it.
    for batch in (3, 1, 6, 2, 9):
        images = _images(rng, batch)
        got = predict(images)
        assert isinstance(got, torch.Tensor) and tuple(got.shape) == (batch, 5)
        np.testing.assert_allclose(to_numpy(got), to_numpy(model(images, training=False)), atol=TOLERANCE)
    assert counters["stats"]["unique_graphs"] - graphs <= 3
    # One portable graph: no custom op that needs keras-vit, or one CPU library, to run.
    targets = [str(node.target) for node in predict.program.graph.nodes if node.op == "call_function"]
    assert not [t for t in targets if "keras_vit" in t or "mkldnn" in t], targets
    # The weights are the model's own tensors, not a copy: an update shows without compiling again.
    head = model.get_layer("head")
    head.bias.assign(to_numpy(head.bias) + 1.0)
    images = torch.from_numpy(_images(rng, 2))
    np.testing.assert_allclose(to_numpy(predict(images)), to_numpy(model(images, training=False)), atol=TOLERANCE)
    with pytest.raises(ValueError, match=r"Expected inputs of shape \(batch, 32, 32, 3\).*got shape \(2, 16, 16, 3\)"):
        predict(np.zeros((2, 16, 16, 3), "float32"))


@torch_only
def test_a_text_tower_compiles_for_inference_to_its_embeddings(rng):
    from keras_vit.models.text_spec import TextSpec
    from keras_vit.models.text_tower import text_encoder

    spec = TextSpec(vocabulary_size=50, context_length=8, hidden_size=16, depth=1, num_heads=2, mlp_dim=32)
    tower = text_encoder(spec.replace(projection_dim=12))
    predict = keras_vit.compile_for_inference(tower)
    ids = rng.integers(0, 50, (3, 8)).astype("int32")
    np.testing.assert_allclose(to_numpy(predict(ids)), to_numpy(tower(ids)), atol=TOLERANCE)
    with pytest.raises(ValueError, match=r"Expected inputs of shape \(batch, 8\).*got shape \(3, 9\)"):
        predict(np.zeros((3, 9), "int32"))


@torch_only
def test_tanh_gelu_compiled_as_sigmoid_equals_the_model_and_the_switch_keeps_the_graph(rng):
    # The paper's tanh GELU (the default): rewritten in every block on a CPU, left as exported
    # with the switch off; both equal the Keras model. A wrong constant in the rewrite (the
    # tanh's sqrt(2 / pi) instead of twice it, say) moves the outputs by far more than this.
    import torch

    model = _model(gelu_approximate=True)
    images = _images(rng, 4)
    expected = to_numpy(model(images, training=False))
    rewritten = keras_vit.compile_for_inference(model)
    kept = keras_vit.compile_for_inference(model, tanh_gelu_as_sigmoid=False)
    assert (rewritten.gelus_rewritten, kept.gelus_rewritten) == (TINY["depth"], 0)
    for predict in (rewritten, kept):
        np.testing.assert_allclose(to_numpy(predict(images)), expected, atol=TOLERANCE)

    def gelus(program):
        return [n.kwargs.get("approximate") for n in program.graph.nodes if n.target is torch.ops.aten.gelu.default]

    # The exported program itself is untouched (export_program's users get the exact graph).
    assert gelus(rewritten.program) == gelus(kept.program) == ["tanh"] * TINY["depth"]
    # The exact GELU is not the tanh form: nothing to rewrite.
    assert keras_vit.compile_for_inference(_model()).gelus_rewritten == 0


@torch_only
def test_training_graph_trains_the_keras_model(rng):
    import torch

    model = _model()
    graph = export_program(model, training=True).module()
    assert {id(p) for p in graph.parameters()} == {id(v.value) for v in model.variables}
    images, labels = _images(rng, 4), torch.tensor([0, 1, 2, 3])
    np.testing.assert_allclose(to_numpy(graph(torch.from_numpy(images))), to_numpy(model(images)), atol=TOLERANCE)
    before = to_numpy(model.get_layer("head").kernel)
    optimizer = torch.optim.SGD([p for p in graph.parameters() if p.requires_grad], lr=0.1)
    torch.nn.functional.cross_entropy(graph(torch.from_numpy(images)), labels).backward()
    optimizer.step()
    assert not np.allclose(to_numpy(model.get_layer("head").kernel), before)  # the model itself moved
    with torch.no_grad():
        after = graph(torch.from_numpy(images))
    np.testing.assert_allclose(to_numpy(after), to_numpy(model(images, training=False)), atol=TOLERANCE)


@torch_only
def test_training_graph_of_a_model_with_dropout_is_refused():
    model = _model(dropout_rate=0.1)
    with pytest.raises(ValueError, match=r"without dropout or stochastic depth.*embedding_dropout.*dropout_rate=0"):
        export_program(model, training=True)
    export_program(model)  # inference has no random ops: fine


@pytest.mark.skipif(BACKEND == "torch", reason="the error is for the other backends; torch compiles")
def test_other_backends_are_told_to_use_torch():
    model = _model(depth=1)
    for call in (lambda: keras_vit.compile_for_inference(model), lambda: export_program(model)):
        with pytest.raises(
            RuntimeError, match=f"needs the PyTorch backend \\(KERAS_BACKEND=torch.*got KERAS_BACKEND='{BACKEND}'"
        ):
            call()
