"""fit(ds.repeat(), steps_per_epoch=n, epochs=e) as Keras: one iterator
across the epochs (Keras's DataHandler recreates it only without
steps_per_epoch or when the dataset's cardinality equals it), so epoch k
trains on batches [k n, (k + 1) n) of the stream, not the first n again:
- with the weights held (SGD at 1e-20, x = 0, label = batch + 1) each
  epoch's loss is the mean of its batches' label^2: 2.5, 12.5, 30.5 for
  batches (0, 1), (2, 3), (4, 5) (2.5 each when every epoch re-read the
  first two);
- 3 epochs of 5 steps train what 1 epoch of 15 steps trains, to the bytes:
  the engine's pipeline in order and shuffled, and a pipeline run in Python
  (from_generator);
- validation_steps on an endless validation set evaluates its first
  batches every epoch (Keras makes a new validation iterator each time);
- a crashed fit resumed with BackupAndRestore trains the steps after its
  last backup on the stream's batches from there: the uninterrupted bytes."""
import numpy as np
import pytest

import strata as tf

B, NB = 4, 8
XZ = np.zeros((B * NB, 2), np.float32)
YB = np.repeat(np.arange(1, NB + 1, dtype=np.float32), B)
RNG = np.random.default_rng(5)
XR = RNG.standard_normal((B * NB, 2)).astype(np.float32)
YR = RNG.standard_normal(B * NB).astype(np.float32)


def model(lr):
    m = tf.keras.Sequential([tf.keras.Input((2,)), tf.keras.layers.Dense(1)])
    m.compile(optimizer=tf.keras.optimizers.SGD(lr), loss="mse")
    return m


def test_epochs_read_on():
    ds = tf.data.Dataset.from_tensor_slices((XZ, YB)).batch(B).repeat()
    m = model(1e-20)
    m.set_weights([np.zeros_like(w) for w in m.get_weights()])
    h = m.fit(ds, steps_per_epoch=2, epochs=3, verbose=0)
    np.testing.assert_allclose(h.history["loss"], [2.5, 12.5, 30.5], rtol=1e-5)


def test_validation_restarts():
    ds = tf.data.Dataset.from_tensor_slices((XZ, YB)).batch(B).repeat()
    m = model(1e-20)
    m.set_weights([np.zeros_like(w) for w in m.get_weights()])
    h = m.fit(ds, steps_per_epoch=2, epochs=3, validation_data=ds, validation_steps=2, verbose=0)
    np.testing.assert_allclose(h.history["val_loss"], [2.5, 2.5, 2.5], rtol=1e-5)


def generated():
    def gen():
        for i in range(len(XR)):
            yield XR[i], YR[i]
    sig = (tf.TensorSpec((2,), tf.float32), tf.TensorSpec((), tf.float32))
    return tf.data.Dataset.from_generator(gen, output_signature=sig)


@pytest.mark.parametrize("kind", ["in order", "shuffled", "python"])
def test_three_epochs_are_one(kind):
    if kind == "python":
        ds = generated().batch(B).repeat()
    else:
        ds = tf.data.Dataset.from_tensor_slices((XR, YR))
        if kind == "shuffled":
            ds = ds.shuffle(len(XR), seed=9)
        ds = ds.batch(B).repeat()
    assert int(ds.cardinality()) == -1
    a, b = model(0.05), model(0.05)
    b.set_weights(a.get_weights())
    ha = a.fit(ds, steps_per_epoch=5, epochs=3, verbose=0)
    hb = b.fit(ds, steps_per_epoch=15, epochs=1, verbose=0)
    assert len(ha.history["loss"]) == 3 and len(hb.history["loss"]) == 1
    for wa, wb in zip(a.get_weights(), b.get_weights()):
        assert np.array_equal(wa, wb), (kind, wa, wb)


@pytest.mark.parametrize("crash_at", [3, 7, 12])  # global steps (1-based): epochs 1, 2, 3
def test_backup_resumes_the_stream(tmp_path, crash_at):
    """A fit crashed part-way (an exception in a callback) and run again with
    the same BackupAndRestore (every 2 steps) trains only the steps after
    its last backup, on the stream's batches from there: the uninterrupted
    run's bytes."""
    ds = tf.data.Dataset.from_tensor_slices((XR, YR)).shuffle(len(XR), seed=9).batch(B).repeat()
    full = model(0.05)
    w0 = full.get_weights()
    full.fit(ds, steps_per_epoch=5, epochs=3, verbose=0)

    class Crash(tf.keras.callbacks.Callback):  # counts the steps; raises after step `at`
        def __init__(self, at=0):
            super().__init__()
            self.n, self.at = 0, at

        def on_train_batch_end(self, batch, logs=None):
            self.n += 1
            if self.n == self.at:
                raise RuntimeError("simulated crash")

    backup = tf.keras.callbacks.BackupAndRestore(str(tmp_path / "bk"), save_freq=2)
    m = model(0.05)
    m.set_weights(w0)
    with pytest.raises(RuntimeError, match="simulated crash"):
        m.fit(ds, steps_per_epoch=5, epochs=3, verbose=0, callbacks=[backup, Crash(crash_at)])
    assert (tmp_path / "bk").exists()
    m2 = model(0.05)
    m2.set_weights(w0)
    steps = Crash()
    m2.fit(ds, steps_per_epoch=5, epochs=3, verbose=0, callbacks=[backup, steps])
    assert steps.n == 15 - (crash_at - 1) // 2 * 2  # from the last backup (every 2 steps)
    for a, b in zip(full.get_weights(), m2.get_weights()):
        assert np.array_equal(a, b), (crash_at, a, b)
