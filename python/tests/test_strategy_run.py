"""strategy.run per replica (issue 14): experimental_distribute_dataset
splits each global batch as the engine does, run calls fn once per replica
with its replica context, train_on_batch inside fn is one replica's share of
the engine's step, and a custom loop gives fit's weights bytes."""
import threading

import numpy as np
import pytest

import strata as tf

L = tf.keras.layers
R = tf.distribute.ReduceOp


def _model(strategy, dropout=False):
    tf.random.set_seed(0)
    with strategy.scope():
        layers = [L.Rescaling(1.0 / 255, input_shape=(28, 28)), L.Flatten(), L.Dense(32, activation="relu")]
        if dropout:
            layers += [L.Dropout(0.3), L.BatchNormalization()]
        model = tf.keras.Sequential(layers + [L.Dense(10)])
    model.compile(optimizer="adam", loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=["accuracy"])
    return model


def _bytes(model):
    return b"".join(w.tobytes() for w in model.get_weights())


def _mirrored():
    return tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])


@pytest.mark.parametrize("dropout", [False, True])
def test_custom_loop_gives_fit_weights_bytes(fashion, dropout):
    (x, y), _ = fashion
    x, y = x[:1001], y[:1001]  # the last global batch (233) splits 116 / 117
    ref = _model(_mirrored(), dropout)
    ref_logs = ref.fit(x, y, batch_size=256, epochs=2, shuffle=False, verbose=0).history
    strategy = _mirrored()
    model = _model(strategy, dropout)
    dist = strategy.experimental_distribute_dataset(tf.data.Dataset.from_tensor_slices((x, y)).batch(256))
    seen, threads = [], set()

    def step(inputs):
        images, labels = inputs
        seen.append((tf.distribute.get_replica_context().replica_id_in_sync_group, len(images)))
        threads.add(threading.get_ident())
        return model.train_on_batch(images, labels)

    for epoch in range(2):
        total = 0.0
        for batch in dist:
            assert isinstance(batch[0], tf.distribute.PerReplica)
            loss, acc = strategy.run(step, args=(batch,))
            assert len(strategy.experimental_local_results(loss)) == 2
            total += strategy.reduce(R.SUM, loss, axis=None)
        assert total > 0
    assert sorted(set(seen)) == [(0, 116), (0, 128), (1, 117), (1, 128)]
    assert len(seen) == 16 and len(threads) == 2  # once per replica per step, on two threads
    assert _bytes(model) == _bytes(ref)  # exactly fit's arithmetic
    assert ref_logs["loss"][-1] > 0


def test_one_device_run_returns_plain_values(fashion):
    (x, y), _ = fashion
    x, y = x[:300], y[:300]
    ref = _model(tf.distribute.OneDeviceStrategy())
    ref.fit(x, y, batch_size=100, epochs=1, shuffle=False, verbose=0)
    strategy = tf.distribute.OneDeviceStrategy()
    model = _model(strategy)
    for images, labels in strategy.experimental_distribute_dataset(
            tf.data.Dataset.from_tensor_slices((x, y)).batch(100)):
        assert len(images) == 100  # one replica: the batch itself
        out = strategy.run(lambda a, b: model.train_on_batch(a, b, return_dict=True), args=(images, labels))
        assert isinstance(out, dict) and 0 < out["loss"] < 10
        assert strategy.reduce(R.SUM, out["loss"]) == out["loss"]
    # fit splits each batch over the one-device strategy's compute threads
    # (one per core), run calls fn once on the whole batch: float rounding
    for a, b in zip(model.get_weights(), ref.get_weights()):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    print("one_device: max |diff| %g" % max(np.abs(a - b).max() for a, b in zip(model.get_weights(), ref.get_weights())))


def test_reduce_and_local_results_without_a_model():
    strategy = _mirrored()
    ids = strategy.run(lambda: tf.distribute.get_replica_context().replica_id_in_sync_group)
    assert strategy.experimental_local_results(ids) == (0, 1)
    v = tf.distribute.PerReplica([np.array([1.0, 2.0, 3.0], np.float32), np.array([5.0], np.float32)])
    assert strategy.reduce(R.SUM, v, axis=0) == pytest.approx(11.0)
    assert strategy.reduce(R.MEAN, v, axis=0) == pytest.approx(11.0 / 4)
    pair = strategy.run(lambda a: (a * 2, {"k": a}), args=(tf.distribute.PerReplica([1.0, 3.0]),))
    assert strategy.reduce(R.SUM, pair[0]) == 8.0 and strategy.reduce("mean", pair[1]["k"]) == 2.0
    assert strategy.reduce(R.SUM, 2.0) == 4.0  # a plain value is every replica's
    with pytest.raises(ValueError, match="reduce_op"):
        strategy.reduce("max", v)
    with strategy.scope():
        assert tf.distribute.get_replica_context() is None  # cross-replica context
    assert tf.distribute.get_replica_context().replica_id_in_sync_group == 0


def test_all_reduce_and_errors_inside_run(fashion):
    (x, y), _ = fashion
    strategy = _mirrored()
    model = _model(strategy)

    def summed():
        ctx = tf.distribute.get_replica_context()
        return ctx.all_reduce(R.SUM, np.full(3, ctx.replica_id_in_sync_group + 1.0))
    out = strategy.experimental_local_results(strategy.run(summed))
    assert [o.tolist() for o in out] == [[3.0] * 3, [3.0] * 3]

    def fails(images, labels):
        if tf.distribute.get_replica_context().replica_id_in_sync_group == 1:
            raise KeyError("replica one")
        return model.train_on_batch(images, labels)
    batch = next(iter(strategy.experimental_distribute_dataset(
        tf.data.Dataset.from_tensor_slices((x[:64], y[:64])).batch(64))))
    before = _bytes(model)
    with pytest.raises(KeyError, match="replica one"):
        strategy.run(fails, args=batch)
    assert _bytes(model) == before  # no step was applied
    strategy.run(lambda a, b: model.train_on_batch(a, b), args=batch)  # the strategy runs again
    assert _bytes(model) != before
    other = _model(tf.distribute.OneDeviceStrategy())
    with pytest.raises(NotImplementedError, match="one model per strategy.run"):
        strategy.run(lambda a, b: other.train_on_batch(a, b), args=batch)
    with pytest.raises(ValueError, match="shape"):
        strategy.run(lambda a, b: model.train_on_batch(a[:, :10], b), args=batch)


def test_distribute_datasets_from_function():
    strategy = _mirrored()
    x, y = np.arange(50, dtype=np.float32).reshape(25, 2), np.arange(25)

    def dataset_fn(ctx):
        assert ctx.num_input_pipelines == 1 and ctx.input_pipeline_id == 0
        return tf.data.Dataset.from_tensor_slices((x, y)).batch(ctx.get_per_replica_batch_size(10))

    batches = list(strategy.distribute_datasets_from_function(dataset_fn))
    assert len(batches) == 3
    firsts = [strategy.experimental_local_results(b[1]) for b in batches]
    assert [v.tolist() for v in firsts[0]] == [[0, 1, 2, 3, 4], [5, 6, 7, 8, 9]]
    assert [len(v) for v in firsts[2]] == [5, 0]  # the last replica's share is empty
    ids = strategy.run(lambda a, b: len(b), args=batches[1])
    assert strategy.experimental_local_results(ids) == (5, 5)
