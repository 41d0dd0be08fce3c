"""Tensors, Variables and the op namespace (issue 32, point 1), written as
TensorFlow's "Introduction to tensors" and "Introduction to Variables"
guides and the beginners' quickstart write them, with only the import
changed; the values asserted are TensorFlow's."""
import numpy as np
import pytest

import strata as tf


def test_tensor_guide_basics():
    rank_0_tensor = tf.constant(4)
    assert rank_0_tensor.dtype == tf.int32 and rank_0_tensor.shape == () and rank_0_tensor.numpy() == 4
    assert "shape=()" in repr(rank_0_tensor) and "dtype=int32" in repr(rank_0_tensor)
    rank_1_tensor = tf.constant([2.0, 3.0, 4.0])
    assert rank_1_tensor.dtype == tf.float32
    rank_2_tensor = tf.constant([[1, 2], [3, 4], [5, 6]], dtype=tf.float16)
    assert np.array(rank_2_tensor).dtype == np.float16
    assert isinstance(rank_2_tensor.numpy(), np.ndarray) and not isinstance(rank_2_tensor.numpy(), tf.Tensor)

    a = tf.constant([[1, 2], [3, 4]])
    b = tf.constant([[1, 1], [1, 1]])
    np.testing.assert_array_equal(tf.add(a, b), [[2, 3], [4, 5]])
    np.testing.assert_array_equal(tf.multiply(a, b), [[1, 2], [3, 4]])
    np.testing.assert_array_equal(tf.matmul(a, b), [[3, 3], [7, 7]])
    np.testing.assert_array_equal(a @ b, [[3, 3], [7, 7]])
    assert isinstance(a + b, tf.Tensor) and (a * b).dtype == tf.int32

    c = tf.constant([[4.0, 5.0], [10.0, 1.0]])
    assert tf.reduce_max(c).numpy() == 10.0
    np.testing.assert_array_equal(tf.math.argmax(c), [1, 0])  # axis 0 by default, as TF
    assert tf.math.argmax(c).dtype == tf.int64
    np.testing.assert_allclose(tf.nn.softmax(c), [[0.26894143, 0.7310586], [0.9998766, 1.2339458e-04]], rtol=1e-5)
    assert isinstance(tf.nn.softmax(c), tf.Tensor) and tf.nn.softmax(c).dtype == tf.float32
    assert tf.reduce_max([1, 2, 3]).numpy() == 3
    assert tf.convert_to_tensor([1, 2, 3]).dtype == tf.int32


def test_tensor_guide_shapes_indexing_casts():
    rank_4_tensor = tf.zeros([3, 2, 4, 5])
    assert rank_4_tensor.dtype == tf.float32 and rank_4_tensor.ndim == 4
    assert rank_4_tensor.shape == (3, 2, 4, 5) and rank_4_tensor.shape[0] == 3 and rank_4_tensor.shape[-1] == 5
    assert tf.size(rank_4_tensor).numpy() == 120 and tf.rank(rank_4_tensor).numpy() == 4
    np.testing.assert_array_equal(tf.shape(rank_4_tensor), [3, 2, 4, 5])
    assert tf.shape(rank_4_tensor).dtype == tf.int32

    rank_1_tensor = tf.constant([0, 1, 1, 2, 3, 5, 8, 13, 21, 34])
    assert rank_1_tensor[0].numpy() == 0 and isinstance(rank_1_tensor[0], tf.Tensor)
    np.testing.assert_array_equal(rank_1_tensor[1:3], [1, 1])
    np.testing.assert_array_equal(rank_1_tensor[::-1][:2], [34, 21])
    assert [int(v) for v in rank_1_tensor][:3] == [0, 1, 1]

    x = tf.constant([[1], [2], [3]])
    assert x.shape.as_list() == [3, 1] and x.shape.rank == 2
    reshaped = tf.reshape(x, [1, 3])
    assert reshaped.shape == (1, 3)
    rank_3_tensor = tf.constant([[[0, 1, 2, 3, 4], [5, 6, 7, 8, 9]], [[10, 11, 12, 13, 14], [15, 16, 17, 18, 19]],
                                 [[20, 21, 22, 23, 24], [25, 26, 27, 28, 29]]])
    np.testing.assert_array_equal(tf.reshape(rank_3_tensor, [-1]), np.arange(30))
    assert tf.reshape(rank_3_tensor, [3 * 2, 5]).shape == (6, 5)

    the_f64_tensor = tf.constant([2.2, 3.3, 4.4], dtype=tf.float64)
    the_f16_tensor = tf.cast(the_f64_tensor, dtype=tf.float16)
    the_u8_tensor = tf.cast(the_f16_tensor, dtype=tf.uint8)
    np.testing.assert_array_equal(the_u8_tensor, [2, 3, 4])
    assert the_u8_tensor.dtype == tf.uint8

    x = tf.constant([1, 2, 3])
    y = tf.constant(2)
    z = tf.constant([2, 2, 2])
    for r in (tf.multiply(x, 2), x * y, x * z):
        np.testing.assert_array_equal(r, [2, 4, 6])
    x = tf.reshape(x, [3, 1])
    y = tf.range(1, 5)
    np.testing.assert_array_equal(tf.multiply(x, y), [[1, 2, 3, 4], [2, 4, 6, 8], [3, 6, 9, 12]])
    np.testing.assert_array_equal(tf.broadcast_to(tf.constant([1, 2, 3]), [3, 3]), [[1, 2, 3]] * 3)
    assert x[:, tf.newaxis].shape == (3, 1, 1)


def test_float32_stays_float32():
    t = tf.reduce_sum(tf.constant([1.5, 2.5]))
    assert (t * 2).dtype == tf.float32 and (2 * t + 1).dtype == tf.float32 and (t / 3).dtype == tf.float32
    assert f"{t:.2f}" == "4.00" and float(t) == 4.0
    assert tf.reduce_mean(tf.constant([1, 2])).dtype == tf.int32  # integer mean, as TF
    assert tf.reduce_mean(tf.constant([1, 2])).numpy() == 1
    with pytest.raises(TypeError, match="dtype"):
        tf.add(tf.constant([1.0]), tf.constant([1]))  # TF does not mix dtypes
    with pytest.raises(TypeError):
        tf.constant(1.5, dtype=tf.int32)


def test_math_namespace():
    x = tf.constant([1.0, 4.0, 9.0])
    np.testing.assert_allclose(tf.math.sqrt(x), [1, 2, 3])
    np.testing.assert_allclose(tf.math.log(tf.math.exp(x)), x, rtol=1e-6)
    np.testing.assert_allclose(tf.math.square(tf.constant([-2.0])), [4.0])
    np.testing.assert_allclose(tf.math.abs(tf.constant([-2.0, 3.0])), [2.0, 3.0])
    assert tf.math.reduce_sum(x).numpy() == 14.0 and tf.math.reduce_min(x).numpy() == 1.0
    np.testing.assert_array_equal(tf.math.reduce_mean(tf.constant([[1.0, 3.0], [5.0, 7.0]]), axis=1), [2.0, 6.0])
    np.testing.assert_array_equal(tf.reduce_sum(tf.ones([2, 3]), axis=0, keepdims=True), [[2, 2, 2]])
    np.testing.assert_array_equal(tf.argmax(tf.constant([[1, 9], [8, 2]]), axis=1), [1, 0])
    np.testing.assert_array_equal(tf.fill([2, 2], 7), [[7, 7], [7, 7]])
    assert tf.ones([2], dtype=tf.int32).dtype == tf.int32
    assert tf.math.equal(tf.constant([1, 2]), 2).numpy().tolist() == [False, True]
    np.testing.assert_allclose(tf.nn.relu(tf.constant([-1.0, 2.0])), [0.0, 2.0])
    np.testing.assert_array_equal(tf.one_hot([0, 2], 3), [[1, 0, 0], [0, 0, 1]])


def test_variable_guide():
    my_tensor = tf.constant([[1.0, 2.0], [3.0, 4.0]])
    my_variable = tf.Variable(my_tensor)
    bool_variable = tf.Variable([False, False, False, True])
    assert bool_variable.dtype == np.bool_
    assert my_variable.shape == (2, 2) and my_variable.dtype == tf.float32
    np.testing.assert_array_equal(my_variable.numpy(), [[1, 2], [3, 4]])
    assert isinstance(tf.convert_to_tensor(my_variable), tf.Tensor)
    np.testing.assert_array_equal(tf.math.argmax(my_variable), [1, 1])
    np.testing.assert_array_equal(tf.reshape(my_variable, [1, 4]), [[1, 2, 3, 4]])
    a = tf.Variable([2.0, 3.0])
    a.assign([1, 2])
    np.testing.assert_array_equal(a.numpy(), [1.0, 2.0])
    with pytest.raises(ValueError, match="shape"):
        a.assign([1.0, 2.0, 3.0])
    a = tf.Variable([2.0, 3.0])
    b = tf.Variable(a)
    a.assign([5, 6])
    np.testing.assert_array_equal(a.numpy(), [5, 6])
    np.testing.assert_array_equal(b.numpy(), [2, 3])
    np.testing.assert_array_equal(a.assign_add([2, 3]).numpy(), [7, 9])
    np.testing.assert_array_equal(a.assign_sub([7, 9]).numpy(), [0, 0])
    step = tf.Variable(0)
    step.assign_add(1)
    assert int(step) == 1 and (step + 1).numpy() == 2 and isinstance(step * 2, tf.Tensor)
    assert "tf.Variable" in repr(step)


def test_random_ops_seeded():
    tf.random.set_seed(5)
    a = tf.random.uniform([3], minval=1, maxval=2)
    n = tf.random.normal([2, 2])
    tf.random.set_seed(5)
    np.testing.assert_array_equal(a, tf.random.uniform([3], minval=1, maxval=2))
    np.testing.assert_array_equal(n, tf.random.normal([2, 2]))
    assert a.dtype == tf.float32 and ((a >= 1) & (a < 2)).numpy().all()
    assert tf.random.uniform([4], maxval=10, dtype=tf.int32).dtype == tf.int32
    tf.random.set_seed(None)


def test_tensor_spec():
    spec = tf.TensorSpec(shape=(None, 28), dtype=tf.float32)
    assert spec.shape.as_list() == [None, 28] and spec.dtype == tf.float32
    assert spec.is_compatible_with(np.zeros((5, 28), np.float32))


def test_unknown_names_say_strata_lacks_them():
    for ns, path, name in ((tf, "tf", "sparse"), (tf.math, "tf.math", "bessel_i0"), (tf.nn, "tf.nn", "ctc_loss"),
                           (tf.random, "tf.random", "stateless_uniform"), (tf.keras.metrics, "tf.keras.metrics", "AUC"),
                           (tf.keras.losses, "tf.keras.losses", "Huber"), (tf.keras, "tf.keras", "applications"),
                           (tf.keras.layers, "tf.keras.layers", "LSTM"), (tf.distribute, "tf.distribute", "TPUStrategy"),
                           (tf.keras.callbacks, "tf.keras.callbacks", "ReduceLROnPlateau"),
                           (tf.keras.initializers, "tf.keras.initializers", "RandomNormal"),
                           (tf.io, "tf.io", "read_file"), (tf.train, "tf.train", "SequenceExample"),
                           (tf.data, "tf.data", "FixedLengthRecordDataset")):
        assert not hasattr(ns, name)
        with pytest.raises(AttributeError, match=r"%s\.%s: Strata does not provide" % (path.replace(".", r"\."), name)):
            getattr(ns, name)
        with pytest.raises(NotImplementedError):  # the older refusals' type too
            getattr(ns, name)


def test_quickstart_beginner_tensors(fashion):
    (x_train, y_train), (x_test, y_test) = fashion
    x_train, y_train, x_test, y_test = x_train[:2048], y_train[:2048], x_test[:512], y_test[:512]
    x_train, x_test = x_train / 255.0, x_test / 255.0
    tf.random.set_seed(1)
    model = tf.keras.models.Sequential([
        tf.keras.layers.Flatten(input_shape=(28, 28)),
        tf.keras.layers.Dense(128, activation='relu'),
        tf.keras.layers.Dropout(0.2),
        tf.keras.layers.Dense(10)
    ])
    predictions = model(x_train[:1]).numpy()
    assert predictions.shape == (1, 10) and isinstance(predictions, np.ndarray)
    probs = tf.nn.softmax(predictions).numpy()
    np.testing.assert_allclose(probs.sum(), 1.0, rtol=1e-5)
    loss_fn = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    first = loss_fn(y_train[:1], predictions).numpy()
    np.testing.assert_allclose(first, -np.log(probs[0, y_train[0]]), rtol=1e-4)
    model.compile(optimizer='adam', loss=loss_fn, metrics=['accuracy'])
    assert model.optimizer.learning_rate.numpy() == np.float32(0.001)
    model.fit(x_train, y_train, epochs=2, verbose=0)
    loss, acc = model.evaluate(x_test, y_test, verbose=0)
    assert acc > 0.6
    out = model(x_test[:5])
    assert isinstance(out, tf.Tensor) and out.shape == (5, 10)
    assert type(model.predict(x_test[:5], verbose=0)) is np.ndarray  # predict stays NumPy, as Keras
    model.optimizer.learning_rate.assign(0.01)
    assert abs(float(model.optimizer.learning_rate) - 0.01) < 1e-9
    tf.random.set_seed(None)


def test_regularizers_refused_by_the_layer_and_coordinator_name():
    from strata.keras import regularizers
    r = regularizers.l2(0.001)
    assert r(np.ones((2, 2))) == np.float32(0.004)
    with pytest.raises(NotImplementedError, match="kernel_regularizer.*weight_decay"):
        tf.keras.layers.Dense(16, kernel_regularizer=r, activation="relu")
    assert tf.distribute.coordinator.ClusterCoordinator is tf.distribute.experimental.coordinator.ClusterCoordinator

