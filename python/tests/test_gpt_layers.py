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


def test_gpt2_preset(tmp_path):
    """strata.models.gpt2: Keras layers with GPT-2's names; GPT-2's init; the
    llm.c and Hugging Face files written and read back the same."""
    g = tf.models.gpt2(layers=2, heads=2, width=32, seq_len=16, vocab=64)
    m = g.model
    C, L2, V, T = 32, 2, 64, 16
    assert m.output_shape == (None, T, V)
    assert m.count_params() == V * C + T * C + L2 * (12 * C * C + 13 * C) + 2 * C
    m.compile(optimizer="adam", loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    g.init_weights(1)
    g.save_llmc(tmp_path / "a.bin")
    g.save_hf(tmp_path / "a.safetensors")
    x = np.arange(4 * T, dtype=np.float32).reshape(4, T) % V
    h = m.fit(x, (x + 1) % V, epochs=2, batch_size=4, verbose=0)
    assert h.history["loss"][0] == pytest.approx(np.log(V), abs=0.1)  # GPT-2's init: near uniform
    g.load_hf(tmp_path / "a.safetensors")
    g.save_llmc(tmp_path / "b.bin")
    assert (tmp_path / "a.bin").read_bytes() == (tmp_path / "b.bin").read_bytes()
    hdr = np.frombuffer((tmp_path / "a.bin").read_bytes()[:32], np.int32)
    assert list(hdr) == [20240326, 3, T, V, L2, 2, C, 64]
    with pytest.raises(ValueError, match="preset"):
        tf.models.gpt2("gpt5")
