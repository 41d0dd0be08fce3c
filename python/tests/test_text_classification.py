"""Keras's "Text classification from scratch" example (IMDB sentiment with
Embedding + Conv1D + GlobalMaxPooling1D), as it writes the model, after
`import strata as tf` (issue 32's tutorial suite). Strata never downloads:
the reviews are synthetic integer sequences (a sentiment word decides the
label), already vectorized, since TextVectorization is refused by name, as
is the example's variable-length Input(shape=(None,)); the model itself runs
unchanged on sequences of the example's fixed sequence_length."""
import numpy as np
import pytest

import strata as tf
from strata import keras
from strata.keras import layers

max_features = 20000
embedding_dim = 128
sequence_length = 500


def _reviews(n, seed):
    """Integer reviews: ids 10..max_features-1 and, 60 times, the 'good'
    word (id 7) and the 'bad' one (id 9): label 1 when 'good' outnumbers
    'bad' (50 to 10), else 0 (10 to 50)."""
    rng = np.random.default_rng(seed)
    x = rng.integers(10, max_features, size=(n, sequence_length)).astype(np.int64)
    y = rng.integers(0, 2, size=n).astype(np.int64)
    for i in range(n):
        pos = rng.choice(sequence_length, size=60, replace=False)
        x[i, pos[:50]] = 7 if y[i] else 9
        x[i, pos[50:]] = 9 if y[i] else 7
    return x, y


def test_text_vectorization_and_variable_length_are_refused_by_name():
    with pytest.raises(NotImplementedError, match="TextVectorization"):
        keras.layers.TextVectorization(max_tokens=max_features, output_mode="int",
                                       output_sequence_length=sequence_length)
    with pytest.raises(NotImplementedError, match="None dimension"):
        keras.Input(shape=(None,), dtype="int64")


def test_text_classification_from_scratch_model():
    x_train, y_train = _reviews(384, 0)
    x_val, y_val = _reviews(128, 1)
    tf.random.set_seed(1)
    # A integer input for vocab indices (the example's shape=(None,): fixed length here).
    inputs = keras.Input(shape=(sequence_length,), dtype="int64")

    # Next, we add a layer to map those vocab indices into a space of dimensionality
    # 'embedding_dim'.
    x = layers.Embedding(max_features, embedding_dim)(inputs)
    x = layers.Dropout(0.5)(x)

    # Conv1D + global max pooling
    x = layers.Conv1D(128, 7, padding="valid", activation="relu", strides=3)(x)
    x = layers.Conv1D(128, 7, padding="valid", activation="relu", strides=3)(x)
    x = layers.GlobalMaxPooling1D()(x)

    # We add a vanilla hidden layer:
    x = layers.Dense(128, activation="relu")(x)
    x = layers.Dropout(0.5)(x)

    # We project onto a single unit output layer, and squash it with a sigmoid:
    predictions = layers.Dense(1, activation="sigmoid", name="predictions")(x)

    model = keras.Model(inputs, predictions)

    # Compile the model with binary crossentropy loss and an adam optimizer.
    model.compile(loss="binary_crossentropy", optimizer="adam", metrics=["accuracy"])
    assert [type(l).__name__ for l in model.layers] == [
        "InputLayer", "Embedding", "Dropout", "Conv1D", "Conv1D", "GlobalMaxPooling1D", "Dense", "Dropout", "Dense"]
    assert model.output_shape == (None, 1)
    epochs = 3
    # Fit the model using the train and test datasets.
    h = model.fit(tf.data.Dataset.from_tensor_slices((x_train, y_train)).batch(32), epochs=epochs,
                  validation_data=tf.data.Dataset.from_tensor_slices((x_val, y_val)).batch(32), verbose=0)
    assert len(h.history["val_accuracy"]) == epochs and np.isfinite(h.history["loss"]).all()
    assert h.history["loss"][-1] < h.history["loss"][0]
    loss, acc = model.evaluate(x_val, y_val, verbose=0)
    assert acc > 0.6  # it learned the sentiment words
    p = model.predict(x_val[:4], verbose=0)
    assert p.shape == (4, 1) and ((p > 0) & (p < 1)).all()
