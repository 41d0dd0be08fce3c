"""The merge layers and MultiHeadAttention (issue 28) as Python classes: their
arguments checked, their Keras configs (to_json), and the clear error a
Sequential gives (they are called on tensors of a functional model)."""
import pytest

import strata as tf
from strata.keras._json import layer_config

L = tf.keras.layers


def test_merge_configs():
    assert layer_config(L.Add(name="a")) == ("Add", {"name": "a", "trainable": True, "dtype": "float32"})
    assert layer_config(L.Subtract(name="s"))[0] == "Subtract"
    assert layer_config(L.Multiply(name="m"))[0] == "Multiply"
    assert layer_config(L.Concatenate(axis=2, name="c"))[1]["axis"] == 2
    assert layer_config(L.Concatenate(name="c"))[1]["axis"] == -1


def test_mha_config_and_weights():
    m = L.MultiHeadAttention(num_heads=4, key_dim=16, value_dim=8, output_shape=32, use_bias=False,
                             dropout=0.1, name="mha")
    n, c = layer_config(m)
    assert n == "MultiHeadAttention"
    assert (c["num_heads"], c["key_dim"], c["value_dim"], c["output_shape"]) == (4, 16, 8, 32)
    assert c["use_bias"] is False and c["dropout"] == 0.1 and c["attention_axes"] is None
    assert layer_config(L.MultiHeadAttention(2, 8, name="m2"))[1]["value_dim"] == 8
    # Keras's layouts: query/key/value kernels [d, heads, dim], output [heads, value_dim, out]
    shapes = [s for s, _ in m._weight_shapes([(10, 20), (12, 6), (12, 5)])]
    assert shapes == [(20, 4, 16), (5, 4, 16), (6, 4, 8), (4, 8, 32)]
    shapes = [s for s, _ in L.MultiHeadAttention(2, 3)._weight_shapes([(5, 7), (6, 4)])]
    assert shapes == [(7, 2, 3), (2, 3), (4, 2, 3), (2, 3), (4, 2, 3), (2, 3), (2, 3, 7), (7,)]


@pytest.mark.parametrize("make,match", [
    (lambda: L.Concatenate(axis=0), "batch axis"),
    (lambda: L.MultiHeadAttention(0, 4), "num_heads"),
    (lambda: L.MultiHeadAttention(2, -1), "key_dim"),
    (lambda: L.MultiHeadAttention(2, 4, dropout=1.0), "dropout"),
])
def test_bad_arguments(make, match):
    with pytest.raises(ValueError, match=match):
        make()


def test_unsupported_arguments():
    with pytest.raises(NotImplementedError, match="attention_axes"):
        L.MultiHeadAttention(2, 4, attention_axes=(1, 2))
    with pytest.raises(NotImplementedError, match="kernel_regularizer"):
        L.MultiHeadAttention(2, 4, kernel_regularizer="l2")


def test_not_in_a_sequential():
    with pytest.raises(NotImplementedError, match="functional"):
        tf.keras.Sequential([L.Dense(4, input_shape=(4,)), L.Add()])
