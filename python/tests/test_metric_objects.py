"""Metric objects used standalone, losses with a reduction, and
tf.nn.compute_average_loss (issue 32, point 4's part without GradientTape),
shaped as TensorFlow's "Custom training with tf.distribute.Strategy"
tutorial writes its evaluation step; values checked against NumPy and
against model.evaluate."""
import numpy as np
import pytest

import strata as tf


def test_mean_and_accuracy_metrics():
    m = tf.keras.metrics.Mean(name="train_loss")
    assert m.result().numpy() == 0.0  # nothing seen yet
    m.update_state([1.0, 2.0, 3.0])
    m.update_state(5.0)
    assert m.result().numpy() == np.float32(2.75) and m.name == "train_loss"
    m.update_state([10.0], sample_weight=[0.0])
    assert m.result().numpy() == np.float32(2.75)
    m.reset_state()
    assert m.result().numpy() == 0.0
    m.update_state([4.0, 8.0], sample_weight=[3.0, 1.0])
    assert m.result().numpy() == np.float32(5.0)
    m.reset_states()  # TF 2's older name
    assert m(7.0).numpy() == 7.0 and isinstance(m.result(), tf.Tensor) and m.result().dtype == tf.float32

    acc = tf.keras.metrics.SparseCategoricalAccuracy()
    acc.update_state([[2], [1]], [[0.1, 0.6, 0.3], [0.05, 0.95, 0]])  # Keras docs' example
    assert acc.result().numpy() == np.float32(0.5)
    acc.reset_state()
    acc.update_state([[2], [1]], [[0.1, 0.6, 0.3], [0.05, 0.95, 0]], sample_weight=[0.7, 0.3])
    np.testing.assert_allclose(acc.result().numpy(), 0.3, rtol=1e-6)

    a = tf.keras.metrics.Accuracy()
    a.update_state([[1], [2], [3], [4]], [[0], [2], [3], [4]])
    assert a.result().numpy() == np.float32(0.75)
    c = tf.keras.metrics.CategoricalAccuracy()
    c.update_state([[0, 0, 1], [0, 1, 0]], [[0.1, 0.9, 0.8], [0.05, 0.95, 0]])
    assert c.result().numpy() == np.float32(0.5)
    b = tf.keras.metrics.BinaryAccuracy(threshold=0.7)
    b.update_state([[1], [1], [0], [0]], [[0.98], [0.6], [0], [0.6]])
    assert b.result().numpy() == np.float32(0.75)
    t = tf.keras.metrics.SparseTopKCategoricalAccuracy(k=1)
    t.update_state([2, 1], [[0.1, 0.9, 0.8], [0.05, 0.95, 0]])
    assert t.result().numpy() == np.float32(0.5)
    mse = tf.keras.metrics.MeanSquaredError()
    mse.update_state([[0, 1], [0, 0]], [[1, 1], [0, 0]])
    assert mse.result().numpy() == np.float32(0.25)


def test_loss_reductions_and_average_loss():
    y = np.array([1, 2])
    logits = np.array([[0.1, 2.0, 0.3], [1.0, 0.2, 3.0]], np.float32)
    lp = logits - logits.max(1, keepdims=True)
    lp = lp - np.log(np.exp(lp).sum(1, keepdims=True))
    want = -lp[np.arange(2), y]
    none = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction=tf.keras.losses.Reduction.NONE)
    per = none(y, logits)
    assert isinstance(per, tf.Tensor) and per.shape == (2,)
    np.testing.assert_allclose(per, want, rtol=1e-6)
    np.testing.assert_allclose(tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="sum")(y, logits),
                               want.sum(), rtol=1e-6)
    np.testing.assert_allclose(tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)(y, logits),
                               want.mean(), rtol=1e-6)
    np.testing.assert_allclose(tf.nn.compute_average_loss(per, global_batch_size=8), want.sum() / 8, rtol=1e-6)
    np.testing.assert_allclose(tf.nn.compute_average_loss(per), want.mean(), rtol=1e-6)
    np.testing.assert_allclose(tf.nn.compute_average_loss(per, sample_weight=[1.0, 0.0], global_batch_size=2),
                               want[0] / 2, rtol=1e-6)
    np.testing.assert_allclose(tf.keras.losses.sparse_categorical_crossentropy(y, logits, from_logits=True), want, rtol=1e-6)
    model = tf.keras.Sequential([tf.keras.layers.Dense(2, input_shape=(3,))])
    with pytest.raises(NotImplementedError, match="reduction='none'"):
        model.compile("adam", none)
    with pytest.raises(NotImplementedError, match="Mean"):
        model.compile("adam", "mse", metrics=[tf.keras.metrics.Mean()])


def test_custom_training_tutorial_evaluation_step(fashion):
    """The tutorial's test_step under MirroredStrategy (2 replicas): the
    metrics' results equal model.evaluate's loss and accuracy."""
    (x_train, y_train), (x_test, y_test) = fashion
    train_images = (x_train[:1024, ..., None] / np.float32(255)).astype(np.float32)
    test_images = (x_test[:512, ..., None] / np.float32(255)).astype(np.float32)
    train_labels, test_labels = y_train[:1024], y_test[:512]
    strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    GLOBAL_BATCH_SIZE = 64
    test_dataset = tf.data.Dataset.from_tensor_slices((test_images, test_labels)).batch(GLOBAL_BATCH_SIZE)
    test_dist_dataset = strategy.experimental_distribute_dataset(test_dataset)

    with strategy.scope():
        loss_object = tf.keras.losses.SparseCategoricalCrossentropy(
            from_logits=True, reduction=tf.keras.losses.Reduction.NONE)

        def compute_loss(labels, predictions):
            per_example_loss = loss_object(labels, predictions)
            return tf.nn.compute_average_loss(per_example_loss, global_batch_size=GLOBAL_BATCH_SIZE)

        test_loss = tf.keras.metrics.Mean(name='test_loss')
        test_accuracy = tf.keras.metrics.SparseCategoricalAccuracy(name='test_accuracy')
        model = tf.keras.Sequential([
            tf.keras.layers.Conv2D(8, 3, activation='relu', input_shape=(28, 28, 1)),
            tf.keras.layers.MaxPooling2D(),
            tf.keras.layers.Flatten(),
            tf.keras.layers.Dense(32, activation='relu'),
            tf.keras.layers.Dense(10)
        ])
        model.compile("adam", tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=["accuracy"])
    model.fit(train_images, train_labels, batch_size=GLOBAL_BATCH_SIZE, epochs=1, verbose=0)
    predictions_all = model.predict(test_images, verbose=0)

    def test_step(inputs):
        images, labels = inputs
        predictions = model(images, training=False)
        t_loss = loss_object(labels, predictions)
        test_loss.update_state(t_loss)
        test_accuracy.update_state(labels, predictions)
        return compute_loss(labels, predictions)

    def distributed_test_step(dataset_inputs):
        return strategy.run(test_step, args=(dataset_inputs,))

    total = 0.0
    for x in test_dist_dataset:  # the tutorial's loop: the model called on each replica's slice
        total += float(strategy.reduce(tf.distribute.ReduceOp.SUM, distributed_test_step(x), axis=None))
    loss, acc = model.evaluate(test_images, test_labels, batch_size=GLOBAL_BATCH_SIZE, verbose=0)
    np.testing.assert_allclose(test_loss.result().numpy(), loss, rtol=1e-5)
    np.testing.assert_allclose(test_accuracy.result().numpy(), acc, rtol=1e-6)
    np.testing.assert_allclose(total / len(test_dataset), loss, rtol=1e-5)  # 512 = 8 full batches
    test_loss.reset_state()
    test_accuracy.reset_state()
    for x in test_dataset:  # the step itself, outside strategy.run
        test_step(x)
    np.testing.assert_allclose(test_loss.result().numpy(), loss, rtol=1e-5)
    np.testing.assert_allclose(test_accuracy.result().numpy(), acc, rtol=1e-6)

    # compute_average_loss inside strategy.run: each replica divides by the global batch
    per_example = np.arange(64, dtype=np.float32)
    dist = strategy.experimental_distribute_dataset(tf.data.Dataset.from_tensor_slices(per_example).batch(64))
    per_replica = strategy.run(lambda v: tf.nn.compute_average_loss(v), args=(next(iter(dist)),))
    np.testing.assert_allclose(strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=None),
                               per_example.mean(), rtol=1e-6)
    want = (np.argmax(predictions_all, 1) == test_labels).mean()
    np.testing.assert_allclose(test_accuracy.result().numpy(), want, rtol=1e-6)
