"""The issue's seed program, verbatim after `import strata as tf`, on a
2,048-example slice of Fashion-MNIST under MirroredStrategy on 2 replicas."""
import numpy as np

import strata as tf


def test_seed_program_mirrored_two_replicas(fashion):
    (x_train, y_train), (x_test, y_test) = fashion
    x_train = x_train[:2048].reshape(-1, 784).astype("float32") / 255.0
    y_train = y_train[:2048]
    x_test = x_test[:512].reshape(-1, 784).astype("float32") / 255.0
    y_test = y_test[:512]

    strategy = tf.distribute.MirroredStrategy(devices=["/cpu:0", "/cpu:1"])
    assert strategy.num_replicas_in_sync == 2
    with strategy.scope():
        model = tf.keras.Sequential([
            tf.keras.layers.Dense(128, activation="relu", input_shape=(784,)),
            tf.keras.layers.Dense(10, activation="softmax"),
        ])
    model.compile(optimizer="adam", loss="sparse_categorical_crossentropy", metrics=["accuracy"])
    history = model.fit(x_train, y_train, epochs=1, batch_size=256, verbose=0)
    assert list(history.history) == ["loss", "accuracy"]
    assert len(history.history["loss"]) == 1
    assert history.history["loss"][0] < 2.3  # below chance level: it learned
    loss, acc = model.evaluate(x_test, y_test, verbose=0)
    assert acc > 0.4
    probs = model.predict(x_test[:5], verbose=0)
    assert probs.shape == (5, 10) and probs.dtype == np.float32
    np.testing.assert_allclose(probs.sum(axis=1), 1.0, rtol=1e-5)
    assert model.evaluate(x_test, y_test, verbose=0, return_dict=True)["accuracy"] == acc


def test_global_batch_256_is_128_per_replica(fashion):
    """Mirrored with 2 replicas on a 256 batch gives the weights of one
    device on the same 256 batch: each replica took 128 and the all-reduced
    gradient is the global batch's (up to float summation order)."""
    (x, y), _ = fashion
    x, y = x[:512].reshape(-1, 784).astype("float32") / 255.0, y[:512]
    weights = []
    for strategy in (tf.distribute.MirroredStrategy(), tf.distribute.OneDeviceStrategy("/cpu:0")):
        tf.random.set_seed(0)  # the same initial weights (a second model draws the next seed)
        with strategy.scope():
            m = tf.keras.Sequential([tf.keras.Input(shape=(784,)), tf.keras.layers.Dense(10)])
        m.compile(optimizer=tf.keras.optimizers.SGD(0.1),
                  loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        m.fit(x, y, batch_size=256, epochs=1, shuffle=False, verbose=0)
        weights.append(m.get_weights())
    assert tf.distribute.MirroredStrategy().num_replicas_in_sync == 2
    for a, b in zip(*weights):
        np.testing.assert_allclose(a, b, atol=1e-5)


def test_cnn_fit_validation_and_weights_roundtrip(fashion, tmp_path):
    (x, y), _ = fashion
    x = x[:1024].reshape(-1, 28, 28, 1).astype("float32") / 255.0
    y = tf.keras.utils.to_categorical(y[:1024], 10)
    with tf.distribute.MirroredStrategy().scope():
        model = tf.keras.Sequential([
            tf.keras.layers.Conv2D(8, 3, activation="relu", input_shape=(28, 28, 1)),
            tf.keras.layers.MaxPooling2D(),
            tf.keras.layers.Dropout(0.1),
            tf.keras.layers.Flatten(),
            tf.keras.layers.Dense(10, activation="softmax"),
        ])
    model.compile(optimizer=tf.keras.optimizers.Adam(1e-3), loss="categorical_crossentropy",
                  metrics=["accuracy"])
    h = model.fit(x, y, epochs=2, batch_size=128, validation_split=0.25, verbose=0)
    assert list(h.history) == ["loss", "accuracy", "val_loss", "val_accuracy"]
    assert len(h.history["val_loss"]) == 2
    # the validation slice is the LAST 25%, as Keras: evaluating it gives val_*
    loss, acc = model.evaluate(x[768:], y[768:], verbose=0)
    assert abs(loss - h.history["val_loss"][-1]) < 1e-4
    path = str(tmp_path / "w.weights.h5")
    model.save_weights(path)
    w = model.get_weights()
    model.set_weights([np.zeros_like(a) for a in w])
    assert all((a == 0).all() for a in model.get_weights())
    model.load_weights(path)
    for a, b in zip(w, model.get_weights()):
        np.testing.assert_array_equal(a, b)
    model.summary(print_fn=lambda s: None)


def test_tf_data_pipeline(fashion):
    (x, y), _ = fashion
    x, y = x[:600], y[:600].astype("int64")
    ds = tf.data.Dataset.from_tensor_slices((x, y))
    assert len(ds) == 600
    batches = list(ds.shuffle(600, seed=1).batch(256).take(2))
    assert [b[0].shape for b in batches] == [(256, 28, 28), (256, 28, 28)]
    assert batches[0][1].numpy().dtype == np.int64
    assert len(ds.skip(100).batch(100)) == 5
    assert len(list(ds.batch(100).repeat(2))) == 12
    model = tf.keras.Sequential([tf.keras.layers.Rescaling(1 / 255., input_shape=(28, 28)),
                                 tf.keras.layers.Flatten(), tf.keras.layers.Dense(10)])
    model.compile("adam", tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=["accuracy"])
    train = ds.shuffle(600).batch(64).prefetch(tf.data.AUTOTUNE)
    h = model.fit(train, epochs=2, verbose=0, validation_data=ds.take(128).batch(64))
    assert len(h.history["val_accuracy"]) == 2
    mapped = ds.map(lambda a, b: (tf.cast(a, tf.float32) / 255.0, b)).batch(100)
    assert 0 <= model.evaluate(mapped, verbose=0)[1] <= 1
