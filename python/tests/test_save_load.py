"""Whole-model saving (issue 32, point 3), as TensorFlow's "Save and load
models" tutorial writes its "Save the entire model" part (only the import
changed, Fashion-MNIST, fewer examples): model.save('my_model.keras') and
tf.keras.models.load_model give the same evaluate bytes and the same
training afterwards (optimizer state included), for a Sequential and a
functional residual model; .h5 and SavedModel paths are refused."""
import json
import zipfile

import numpy as np
import pytest

import strata as tf
from strata import keras

L = tf.keras.layers


@pytest.fixture(autouse=True)
def _seed_and_dir(tmp_path, monkeypatch):
    from strata import _util
    saved = _util._state["seed"]
    monkeypatch.chdir(tmp_path)
    yield
    _util._state["seed"] = saved


def create_model():
    model = tf.keras.Sequential([
        keras.layers.Dense(512, activation='relu', input_shape=(784,)),
        keras.layers.Dropout(0.2),
        keras.layers.Dense(10)
    ])
    model.compile(optimizer='adam',
                  loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=[tf.keras.metrics.SparseCategoricalAccuracy()])
    return model


def _same_weights(a, b):
    wa, wb = a.get_weights(), b.get_weights()
    return len(wa) == len(wb) and all(x.shape == y.shape and (x == y).all() for x, y in zip(wa, wb))


def test_save_entire_model_tutorial(fashion):
    (train_images, train_labels), (test_images, test_labels) = fashion
    train_labels, test_labels = train_labels[:1000], test_labels[:1000]
    train_images = train_images[:1000].reshape(-1, 28 * 28) / 255.0
    test_images = test_images[:1000].reshape(-1, 28 * 28) / 255.0
    tf.random.set_seed(4)
    model = create_model()
    model.fit(train_images, train_labels, epochs=2, verbose=0)
    model.save('my_model.keras')
    assert sorted(n for n in zipfile.ZipFile('my_model.keras').namelist() if "/" not in n) == [
        "config.json", "metadata.json", "model.weights.safetensors"]

    new_model = tf.keras.models.load_model('my_model.keras')
    new_model.summary(print_fn=lambda s: None)
    assert new_model.evaluate(test_images, test_labels, verbose=2) == model.evaluate(test_images, test_labels, verbose=0)
    assert new_model.predict(test_images, verbose=0).shape == (1000, 10)
    assert _same_weights(model, new_model)
    assert type(new_model.optimizer).__name__ == "Adam" and new_model.metrics_names == model.metrics_names
    # the optimizer state came back too: one more epoch gives the same weights on both
    model.fit(train_images, train_labels, epochs=1, shuffle=False, verbose=0)
    new_model.fit(train_images, train_labels, epochs=1, shuffle=False, verbose=0)
    assert _same_weights(model, new_model)


def test_functional_model_round_trip():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((128, 8)).astype(np.float32)
    y = (x[:, 0] > 0).astype(np.int32) + (x[:, 1] > 1).astype(np.int32)
    tf.random.set_seed(2)
    inputs = tf.keras.Input(shape=(8,), name="features")
    h = L.Dense(16, activation="relu")(inputs)
    r = L.Dense(16, activation="relu")(h)
    a = L.Add()([h, r])
    c = L.Concatenate()([a, inputs])
    outputs = L.Dense(3)(c)
    model = tf.keras.Model(inputs, outputs, name="toy_resnet")
    model.compile(tf.keras.optimizers.SGD(0.05, momentum=0.9),
                  tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=["accuracy"])
    model.fit(x, y, batch_size=32, epochs=2, verbose=0)
    model.save("out/toy.keras")  # the directory is made
    back = tf.keras.models.load_model("out/toy.keras")
    assert back.name == "toy_resnet" and [l.name for l in back.layers] == [l.name for l in model.layers]
    assert back.evaluate(x, y, verbose=0) == model.evaluate(x, y, verbose=0)
    model.fit(x, y, batch_size=32, epochs=1, shuffle=False, verbose=0)
    back.fit(x, y, batch_size=32, epochs=1, shuffle=False, verbose=0)  # momentum restored
    assert _same_weights(model, back)
    cfg = json.loads(zipfile.ZipFile("out/toy.keras").read("config.json"))
    assert cfg["compile_config"]["optimizer"]["class_name"] == "SGD"


def test_uncompiled_model_and_refusals():
    m = tf.keras.Sequential([L.Dense(4, input_shape=(3,)), L.Dense(2)])
    m.save("plain.keras")
    back = tf.keras.models.load_model("plain.keras")
    assert _same_weights(m, back)
    with pytest.raises(NotImplementedError, match=r"\.keras"):
        m.save("model.h5")
    with pytest.raises(ValueError, match=r"must end in \.keras"):
        m.save("saved_model_dir")
    with pytest.raises(ValueError, match=r"must end in \.keras"):
        tf.keras.models.load_model("saved_model_dir")
    with open("bad.keras", "wb") as f:
        f.write(b"not a zip")
    with pytest.raises(ValueError, match="not a .keras archive"):
        tf.keras.models.load_model("bad.keras")


def test_nested_probability_model_quickstart(fashion):
    """The beginners' quickstart ends with
    `probability_model = tf.keras.Sequential([model, tf.keras.layers.Softmax()])`;
    the nested model shares the trained model's weights (both ways)."""
    (x_train, y_train), (x_test, y_test) = fashion
    x_train, x_test = x_train[:1024] / 255.0, x_test[:256] / 255.0
    y_train, y_test = y_train[:1024], y_test[:256]
    tf.random.set_seed(6)
    model = tf.keras.models.Sequential([
        tf.keras.layers.Flatten(input_shape=(28, 28)),
        tf.keras.layers.Dense(128, activation='relu'),
        tf.keras.layers.Dropout(0.2),
        tf.keras.layers.Dense(10)
    ])
    loss_fn = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    model.compile(optimizer='adam', loss=loss_fn, metrics=['accuracy'])
    model.fit(x_train, y_train, epochs=1, verbose=0)
    probability_model = tf.keras.Sequential([
        model,
        tf.keras.layers.Softmax()
    ])
    probs = probability_model(x_test[:5])
    assert isinstance(probs, tf.Tensor) and probs.shape == (5, 10)
    np.testing.assert_allclose(probs, tf.nn.softmax(model(x_test[:5])), rtol=1e-5, atol=1e-7)
    model.fit(x_train, y_train, epochs=1, verbose=0)  # the inner model trains on: the outer sees it
    np.testing.assert_allclose(probability_model.predict(x_test[:5], verbose=0),
                               tf.nn.softmax(model.predict(x_test[:5], verbose=0)), rtol=1e-5, atol=1e-7)
    probability_model.compile("sgd", "sparse_categorical_crossentropy")
    probability_model.fit(x_train[:64], y_train[:64], epochs=1, verbose=0)  # and back
    inner = probability_model.get_weights()[:len(model.get_weights())]
    assert all((a == b).all() for a, b in zip(inner, model.get_weights()))
    with pytest.raises(NotImplementedError, match="first entry"):
        tf.keras.Sequential([tf.keras.layers.Dense(3, input_shape=(4,)), model])
