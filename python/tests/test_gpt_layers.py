"""GPT-2's layers from Python (issue 31): PositionEmbedding and the tied head
ReversibleEmbedding in a functional model (ids -> Embedding + positions ->
LayerNormalization -> logits tied to the Embedding's table) train with the
sparse loss over every position; the head adds no weights of its own."""
import numpy as np
import pytest

import strata as tf

L = tf.keras.layers


def tiny(T=8, V=16, D=12):
    ids = tf.keras.Input(shape=(T,))
    wte = L.Embedding(V, D, name="wte")
    h = wte(ids)
    h = L.Add()([h, L.PositionEmbedding(T, name="wpe")(h)])
    h = L.LayerNormalization(epsilon=1e-5)(h)
    logits = L.ReversibleEmbedding(wte, name="lm_head")(h)
    return tf.keras.Model(ids, logits)


def test_tied_model_trains():
    T, V = 8, 16
    m = tiny(T, V)
    assert m.output_shape == (None, T, V)
    assert m.count_params() == V * 12 + T * 12 + 2 * 12  # the head has no weights
    m.compile(optimizer=tf.keras.optimizers.Adam(1e-2),
              loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    rng = np.random.default_rng(0)
    x = rng.integers(0, V, (64, T)).astype(np.float32)
    y = (x + 1) % V  # the next id: learnable from the token itself
    h = m.fit(x, y, epochs=20, batch_size=16, verbose=0)
    assert h.history["loss"][-1] < h.history["loss"][0] - 0.3


def test_errors():
    with pytest.raises(TypeError, match="Embedding layer"):
        L.ReversibleEmbedding(L.Dense(3))
    with pytest.raises(ValueError, match="sequence_length"):
        L.PositionEmbedding(0)
    e = L.Embedding(5, 4)
    with pytest.raises(ValueError, match="Embedding on the token ids first"):
        L.ReversibleEmbedding(e)(tf.keras.Input(shape=(3, 4)))
