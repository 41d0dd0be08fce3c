"""tf.data beyond the core (issue 32, point 6), as TensorFlow's "tf.data:
Build TensorFlow input pipelines" guide writes it (only the import
changed): datasets of Python lists, range, zip, from_generator,
from_tensors, filter, enumerate, padded_batch, reduce, Options; the values
asserted are the guide's outputs."""
import numpy as np
import pytest

import strata as tf


def test_basic_mechanics():
    dataset = tf.data.Dataset.from_tensor_slices([8, 3, 0, 8, 2, 1])
    assert [elem.numpy() for elem in dataset] == [8, 3, 0, 8, 2, 1]
    it = iter(dataset)
    assert next(it).numpy() == 8
    assert dataset.reduce(0, lambda state, value: state + value).numpy() == 22
    assert list(dataset.as_numpy_iterator()) == [8, 3, 0, 8, 2, 1]
    assert dataset.element_spec == tf.TensorSpec(shape=(), dtype=tf.int32)


def test_dataset_structure_and_zip():
    dataset1 = tf.data.Dataset.from_tensor_slices(tf.random.uniform([4, 10]))
    assert dataset1.element_spec == tf.TensorSpec(shape=(10,), dtype=tf.float32)
    dataset2 = tf.data.Dataset.from_tensor_slices(
        (tf.random.uniform([4]), tf.random.uniform([4, 100], maxval=100, dtype=tf.int32)))
    spec = dataset2.element_spec
    assert spec == (tf.TensorSpec(shape=(), dtype=tf.float32), tf.TensorSpec(shape=(100,), dtype=tf.int32))
    dataset3 = tf.data.Dataset.zip((dataset1, dataset2))
    shapes = ['shapes: {a.shape}, {b.shape}, {c.shape}'.format(a=a, b=b, c=c) for a, (b, c) in dataset3]
    assert shapes == ['shapes: (10,), (), (100,)'] * 4
    assert int(dataset3.cardinality()) == 4
    d = tf.data.Dataset.from_tensor_slices({"a": [1, 2], "b": [[1.0], [2.0]]})
    assert [e["a"].numpy() for e in d] == [1, 2] and d.element_spec["b"].dtype == tf.float32


def test_python_generators():
    def count(stop):
        i = 0
        while i < stop:
            yield i
            i += 1
    ds_counter = tf.data.Dataset.from_generator(count, args=[25], output_types=tf.int32, output_shapes=(), )
    batches = [count_batch.numpy() for count_batch in ds_counter.repeat().batch(10).take(10)]
    np.testing.assert_array_equal(batches[0], np.arange(10))
    np.testing.assert_array_equal(batches[2], [20, 21, 22, 23, 24, 0, 1, 2, 3, 4])
    assert batches[0].dtype == np.int32 and len(batches) == 10

    def gen_series():
        i = 0
        rng = np.random.default_rng(0)
        while True:
            size = rng.integers(0, 10)
            yield i, rng.normal(size=(size,))
            i += 1
    ds_series = tf.data.Dataset.from_generator(
        gen_series, output_types=(tf.int32, tf.float32), output_shapes=((), (None,)))
    ds_series_batch = ds_series.shuffle(20).padded_batch(10)
    ids, sequence_batch = next(iter(ds_series_batch))
    assert ids.shape == (10,) and sequence_batch.shape[0] == 10 and sequence_batch.dtype == tf.float32
    assert ids.numpy().max() < 30 and len(set(ids.numpy().tolist())) == 10

    sig = tf.data.Dataset.from_generator(lambda: iter([[1.0, 2.0]]), output_signature=tf.TensorSpec((3,), tf.float32))
    with pytest.raises(ValueError, match="shape"):
        list(sig)


def test_batching_and_padding():
    inc_dataset = tf.data.Dataset.range(100)
    dec_dataset = tf.data.Dataset.range(0, -100, -1)
    dataset = tf.data.Dataset.zip((inc_dataset, dec_dataset))
    batched_dataset = dataset.batch(4)
    got = [[arr.numpy() for arr in batch] for batch in batched_dataset.take(4)]
    np.testing.assert_array_equal(got[1][0], [4, 5, 6, 7])
    np.testing.assert_array_equal(got[1][1], [-4, -5, -6, -7])
    batched_dataset = dataset.batch(7, drop_remainder=True)
    assert batched_dataset.element_spec == (tf.TensorSpec(shape=(7,), dtype=tf.int64),
                                            tf.TensorSpec(shape=(7,), dtype=tf.int64))
    assert int(batched_dataset.cardinality()) == 14

    dataset = tf.data.Dataset.range(100)
    dataset = dataset.map(lambda x: tf.fill([tf.cast(x, tf.int32)], x))
    dataset = dataset.padded_batch(4, padded_shapes=(None,))
    b = [batch.numpy() for batch in dataset.take(2)]
    np.testing.assert_array_equal(b[0], [[0, 0, 0], [1, 0, 0], [2, 2, 0], [3, 3, 3]])
    np.testing.assert_array_equal(b[1], [[4, 4, 4, 4, 0, 0, 0], [5, 5, 5, 5, 5, 0, 0],
                                         [6, 6, 6, 6, 6, 6, 0], [7, 7, 7, 7, 7, 7, 7]])
    padded = tf.data.Dataset.range(1, 4).map(lambda x: tf.fill([tf.cast(x, tf.int32)], x)).padded_batch(
        3, padded_shapes=[5], padding_values=np.int64(-1))
    np.testing.assert_array_equal(next(iter(padded)), [[1, -1, -1, -1, -1], [2, 2, -1, -1, -1], [3, 3, 3, -1, -1]])


def test_filter_enumerate_from_tensors_concatenate():
    ds = tf.data.Dataset.range(10).filter(lambda x: x % 3 == 0)
    assert list(ds.as_numpy_iterator()) == [0, 3, 6, 9]
    assert int(ds.cardinality()) == tf.data.UNKNOWN_CARDINALITY
    assert list(tf.data.Dataset.from_tensor_slices([7, 8]).enumerate(start=5).as_numpy_iterator()) == [(5, 7), (6, 8)]
    one = tf.data.Dataset.from_tensors(([1, 2, 3], 'A'))
    (x, label), = list(one.as_numpy_iterator())
    np.testing.assert_array_equal(x, [1, 2, 3])
    assert label == b'A' and int(one.cardinality()) == 1
    both = tf.data.Dataset.range(3).concatenate(tf.data.Dataset.range(10, 12))
    assert list(both.as_numpy_iterator()) == [0, 1, 2, 10, 11]
    assert tf.data.Dataset.range(1, 6).reduce(np.int64(1), lambda s, v: s * v).numpy() == 120
    assert tf.data.Dataset.from_tensors(3).get_single_element().numpy() == 3


def test_fit_on_zip_and_generator():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(64, 4)).astype(np.float32)
    y = (x.sum(1) > 0).astype(np.int32)
    tf.random.set_seed(2)
    model = tf.keras.Sequential([tf.keras.layers.Dense(2, input_shape=(4,))])
    model.compile("sgd", tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    ds = tf.data.Dataset.zip((tf.data.Dataset.from_tensor_slices(x), tf.data.Dataset.from_tensor_slices(y))).batch(16)
    w0 = model.get_weights()
    h1 = model.fit(ds, epochs=1, verbose=0).history["loss"]

    tf.random.set_seed(2)
    ref = tf.keras.Sequential([tf.keras.layers.Dense(2, input_shape=(4,))])
    ref.compile("sgd", tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    assert all((a == b).all() for a, b in zip(w0, ref.get_weights()))
    h2 = ref.fit(x, y, batch_size=16, epochs=1, shuffle=False, verbose=0).history["loss"]
    assert h1 == h2
    assert all((a == b).all() for a, b in zip(model.get_weights(), ref.get_weights()))

    gen = tf.data.Dataset.from_generator(lambda: ((x[i], y[i]) for i in range(64)), output_signature=(
        tf.TensorSpec((4,), tf.float32), tf.TensorSpec((), tf.int32))).batch(16)
    assert np.isfinite(model.evaluate(gen, verbose=0))
    tf.random.set_seed(None)


def test_options_auto_shard_policy():
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
    ds = tf.data.Dataset.from_tensor_slices((np.zeros((8, 2), np.float32), np.zeros(8, np.int32))).batch(4)
    ds = ds.with_options(options)
    assert ds.options().experimental_distribute.auto_shard_policy == tf.data.experimental.AutoShardPolicy.OFF
    assert ds.map(lambda a, b: (a, b)).options() is options  # kept through transforms
    model = tf.keras.Sequential([tf.keras.layers.Dense(2, input_shape=(2,))])
    model.compile("sgd", tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    model.fit(ds, epochs=1, verbose=0)  # one worker: nothing to shard, as TF

    from strata.data import _more

    class TwoWorkers:
        def _workers(self):
            return 0, 2
    with pytest.raises(NotImplementedError, match="auto_shard_policy=OFF"):
        _more.check_options(ds, TwoWorkers(), "fit")
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    _more.check_options(ds, TwoWorkers(), "fit")  # in-memory data: DATA is what Strata does
    with pytest.raises(AttributeError, match="tf.data.experimental.sample_from_datasets: Strata does not"):
        tf.data.experimental.sample_from_datasets
