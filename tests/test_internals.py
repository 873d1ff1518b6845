"""keras_vit/internals.py, the one seam for the frameworks' private names: the installed
frameworks still have each of them, each still means what the seam uses it for, and no
other module of keras_vit spells one."""

import importlib.util
import pathlib
import re

import keras
import numpy as np
import pytest

from keras_vit import internals

PACKAGE = pathlib.Path(internals.__file__).parent
# What no module but the seam may spell.
PRIVATE = re.compile(
    r"keras\.src|\._flatten_layers|_remat_mode|object\.__setattr__|torch\._C|jax\._src|tensorflow\.python"
)
ALLOWED = {"internals.py"}


@pytest.mark.parametrize("entry", internals.ENTRIES, ids=str)
def test_the_installed_frameworks_have_every_name_the_seam_uses(entry):
    if importlib.util.find_spec(entry.framework) is None:
        pytest.skip(f"{entry.framework} is not installed, so nothing of it is used")
    try:
        internals.lookup(entry)
        problem = None
    except LookupError as error:
        problem = str(error)
    if problem:  # failed out here, so that the report is the message alone
        pytest.fail(problem, pytrace=False)


def test_a_missing_name_is_an_error_naming_the_seam_and_the_name():
    misspelt = internals.Entry("keras.layers:Layer", "_flaten_layers", why="a test", public_tried="none")
    with pytest.raises(LookupError, match=r"keras_vit/internals\.py relies on keras\.layers\.Layer\._flaten_layers"):
        internals.lookup(misspelt)


def test_no_module_but_the_seam_spells_a_private_name():
    found = [
        f"{path.relative_to(PACKAGE.parent)}:{number}: {line.strip()}"
        for path in sorted(PACKAGE.rglob("*.py"))
        if path.relative_to(PACKAGE).as_posix() not in ALLOWED
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if PRIVATE.search(line)
    ]
    assert not found, "Framework internals outside keras_vit/internals.py (route them through it):\n" + "\n".join(found)


def _built_model():
    inputs = keras.Input((3,))
    return keras.Model(inputs, keras.layers.Dense(2, name="fc")(inputs))


def test_set_untracked_keeps_a_layer_out_of_keras_tracking():
    # The reason for the seam: Keras takes a layer assigned to a model as one of its own.
    tracked, untracked = _built_model(), _built_model()
    tracked.extra = keras.layers.Dense(1, name="extra")
    internals.set_untracked(untracked, "_extra", keras.layers.Dense(1, name="extra"))
    assert [layer.name for layer in internals.sublayers(tracked)][1:] == ["fc", "extra"]  # after the input
    assert [layer.name for layer in internals.sublayers(untracked)][1:] == ["fc"]
    assert untracked._extra.name == "extra"
    internals.del_untracked(untracked, "_extra")
    assert not hasattr(untracked, "_extra")


def test_sublayers_finds_nested_layers_kept_under_private_names():
    # Why the walk is Keras' own: MultiHeadAttention keeps its parts under private names.
    attention = keras.layers.MultiHeadAttention(num_heads=2, key_dim=4, dropout=0.1, name="mha")
    inputs = keras.Input((5, 8))
    model = keras.Model(inputs, attention(inputs, inputs))
    layers = internals.sublayers(model)
    names = [layer.name for layer in layers]
    assert {"mha", "query", "key", "value", "attention_output"} <= set(names)
    # Its dropout layer is named by Keras' process-wide count ("dropout_3" after three others).
    assert [type(layer) for layer in layers].count(keras.layers.Dropout) == 1
    assert len(names) == len(set(names))


def test_remat_mode_is_the_scope_a_layer_was_made_under():
    with keras.RematScope(mode="full"):
        rematerialised = keras.layers.Dense(2)
    assert internals.remat_mode(rematerialised) is not None
    assert internals.remat_mode(keras.layers.Dense(2)) is None


def test_direct_call_skips_call_only_for_layers_that_need_nothing_more(monkeypatch):
    full_call = keras.layers.Dense.__call__
    through_call = []

    def spied(self, *args, **kwargs):
        through_call.append(self.name)
        return full_call(self, *args, **kwargs)

    monkeypatch.setattr(keras.layers.Dense, "__call__", spied)
    dense = keras.layers.Dense(2, name="plain")
    dense.build((None, 3))
    x = keras.ops.convert_to_tensor(np.ones((1, 3), "float32"))
    internals.direct_call(dense, x)
    assert through_call == []
    dense.quantize("int8")  # dispatched to its quantized call by __call__
    internals.direct_call(dense, x)
    assert through_call == ["plain"]
