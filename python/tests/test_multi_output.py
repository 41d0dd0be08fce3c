"""Models with several outputs (issue 32), as TensorFlow's functional API
guide writes its "ticket" model (only the import changed; the LSTMs, which
Strata lacks, replaced by GlobalAveragePooling1D, and fixed-length texts):
several inputs and outputs, loss as a list or a dict by output name,
loss_weights, fit and evaluate with Keras's per-output names; each output's
loss is the Keras loss of predict's output for it, and the total is their
weighted sum."""
import numpy as np
import pytest

import strata as tf
from strata import keras
from strata.keras import layers


@pytest.fixture(autouse=True)
def _restore_seed():
    from strata import _util
    saved = _util._state["seed"]
    yield
    _util._state["seed"] = saved


num_tags = 12  # Number of unique issue tags
num_words = 1000  # Size of vocabulary obtained when preprocessing text data
num_departments = 4  # Number of departments for predictions
length = 10


def _ticket_model():
    title_input = keras.Input(shape=(length,), name="title")  # Variable-length sequence of ints
    body_input = keras.Input(shape=(length,), name="body")  # Variable-length sequence of ints
    tags_input = keras.Input(shape=(num_tags,), name="tags")  # Binary vectors of size `num_tags`
    title_features = layers.Embedding(num_words, 16)(title_input)
    body_features = layers.Embedding(num_words, 8)(body_input)
    title_features = layers.GlobalAveragePooling1D()(title_features)
    body_features = layers.GlobalAveragePooling1D()(body_features)
    x = layers.concatenate([title_features, body_features, tags_input])
    priority_pred = layers.Dense(1, name="priority")(x)
    department_pred = layers.Dense(num_departments, name="department")(x)
    return keras.Model(inputs=[title_input, body_input, tags_input],
                       outputs=[priority_pred, department_pred])


def _data(n=64):
    rng = np.random.default_rng(0)
    title_data = rng.integers(num_words, size=(n, length))
    body_data = rng.integers(num_words, size=(n, length))
    tags_data = rng.integers(2, size=(n, num_tags)).astype("float32")
    priority_targets = rng.random(size=(n, 1)).round().astype("float32")
    dept_targets = rng.integers(2, size=(n, num_departments)).astype("float32")
    return title_data, body_data, tags_data, priority_targets, dept_targets


def test_functional_guide_ticket_model():
    title_data, body_data, tags_data, priority_targets, dept_targets = _data()
    tf.random.set_seed(1)
    model = _ticket_model()
    assert model.output_shape == [(None, 1), (None, num_departments)]
    model.compile(
        optimizer=keras.optimizers.RMSprop(1e-3),
        loss=[keras.losses.BinaryCrossentropy(from_logits=True),
              keras.losses.CategoricalCrossentropy(from_logits=True)],
        loss_weights=[1.0, 0.2],
    )
    hist = model.fit({"title": title_data, "body": body_data, "tags": tags_data},
                     {"priority": priority_targets, "department": dept_targets},
                     epochs=2, batch_size=32, verbose=0).history
    assert set(hist) == {"loss", "priority_loss", "department_loss"}
    for e in range(2):
        np.testing.assert_allclose(hist["loss"][e], hist["priority_loss"][e] + 0.2 * hist["department_loss"][e],
                                   rtol=1e-5)

    inputs = [title_data, body_data, tags_data]
    res = model.evaluate(inputs, [priority_targets, dept_targets], batch_size=64, verbose=0, return_dict=True)
    assert list(res) == ["loss", "priority_loss", "department_loss"] == model.metrics_names
    priority, department = model.predict(inputs, verbose=0)
    assert priority.shape == (64, 1) and department.shape == (64, num_departments)
    p_loss = float(keras.losses.BinaryCrossentropy(from_logits=True)(priority_targets, priority))
    d_loss = float(keras.losses.CategoricalCrossentropy(from_logits=True)(dept_targets, department))
    np.testing.assert_allclose([res["priority_loss"], res["department_loss"]], [p_loss, d_loss], rtol=1e-5)
    np.testing.assert_allclose(res["loss"], p_loss + 0.2 * d_loss, rtol=1e-5)
    out = model(inputs)
    assert isinstance(out, list) and np.allclose(out[0].numpy(), priority)

    # the same with dicts by output name: the same training
    tf.random.set_seed(1)
    again = _ticket_model()
    again.compile(
        optimizer=keras.optimizers.RMSprop(1e-3),
        loss={"priority": keras.losses.BinaryCrossentropy(from_logits=True),
              "department": keras.losses.CategoricalCrossentropy(from_logits=True)},
        loss_weights={"priority": 1.0, "department": 0.2},
    )
    hist2 = again.fit({"title": title_data, "body": body_data, "tags": tags_data},
                      [priority_targets, dept_targets], epochs=2, batch_size=32, verbose=0).history
    assert hist2 == hist


def test_two_classifier_heads_with_accuracy():
    rng = np.random.default_rng(3)
    x = rng.random((96, 8), dtype=np.float32)
    ya = (x[:, 0] > 0.5).astype(np.int32)
    yb = (x[:, 1] * 3).astype(np.int32)
    inp = keras.Input(shape=(8,))
    h = layers.Dense(16, activation="relu")(inp)
    a = layers.Dense(2, name="head_a")(h)
    b = layers.Dense(3, activation="softmax", name="head_b")(h)
    model = keras.Model(inp, [a, b])
    model.compile("adam", loss=[keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                                "sparse_categorical_crossentropy"], metrics=["accuracy"])
    hist = model.fit(x, [ya, yb], epochs=2, batch_size=32, verbose=0,
                     validation_data=(x[:32], [ya[:32], yb[:32]])).history
    assert set(hist) == {"loss", "head_a_loss", "head_b_loss", "head_a_accuracy", "head_b_accuracy",
                         "val_loss", "val_head_a_loss", "val_head_b_loss", "val_head_a_accuracy",
                         "val_head_b_accuracy"}
    loss, la, lb, acc_a, acc_b = model.evaluate(x, [ya, yb], verbose=0)
    pa, pb = model.predict(x, verbose=0)
    np.testing.assert_allclose([acc_a, acc_b], [np.mean(pa.argmax(1) == ya), np.mean(pb.argmax(1) == yb)],
                               rtol=1e-6)
    np.testing.assert_allclose(loss, la + lb, rtol=1e-5)
    with pytest.raises(ValueError, match="2 outputs"):
        model.fit(x, ya, verbose=0)
    with pytest.raises(NotImplementedError, match="validation_data"):
        model.fit(x, [ya, yb], validation_split=0.2, verbose=0)
    with pytest.raises(ValueError, match="3 losses given"):
        model.compile("adam", loss=["mse", "mse", "mse"])
