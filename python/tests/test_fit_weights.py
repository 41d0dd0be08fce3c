"""fit(validation_freq=) and class_weight with Keras's semantics: val_*
only on the epochs Keras's _should_eval picks (History, callbacks' logs,
CSVLogger), and one SGD step with class weights against a NumPy reference
of Keras's weighted SUM_OVER_BATCH_SIZE loss (float32 engine against a
float64 reference: within 2e-6 absolute on the weights, 1e-5 relative on
the loss), the reported loss weighted, accuracy not."""
import numpy as np
import pytest

import strata as tf

RNG = np.random.default_rng(3)
X = RNG.standard_normal((48, 4)).astype(np.float32)
Y = np.argmax(X @ RNG.standard_normal((4, 3)), axis=1)


def model(hidden=False, lr=0.5, metrics=("accuracy",)):
    layers = [tf.keras.layers.Dense(8, activation="relu")] if hidden else []
    m = tf.keras.Sequential([tf.keras.Input((4,))] + layers + [tf.keras.layers.Dense(3)])
    m.compile(optimizer=tf.keras.optimizers.SGD(lr),
              loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
              metrics=list(metrics))
    return m


class Logs(tf.keras.callbacks.Callback):
    def __init__(self):
        super().__init__()
        self.seen = {}

    def on_epoch_end(self, epoch, logs=None):
        self.seen[epoch] = sorted(logs)


@pytest.mark.parametrize("freq,initial,want", [
    (1, 0, [0, 1, 2, 3, 4, 5]),
    (2, 0, [1, 3, 5]),          # epochs 2, 4, 6 (1-based)
    (4, 0, [3]),
    ([1, 5, 9], 0, [0, 4]),      # Keras 2's list form
    (2, 1, [1, 3, 5]),          # initial_epoch counts: Keras epochs 2, 4, 6
    (3, 2, [2, 5]),
])
def test_validation_freq(freq, initial, want, tmp_path):
    m, logs = model(hidden=True), Logs()
    csv = tmp_path / "log.csv"
    h = m.fit(X, Y, batch_size=16, epochs=6, initial_epoch=initial, validation_data=(X, Y),
              validation_freq=freq, callbacks=[logs, tf.keras.callbacks.CSVLogger(str(csv))],
              verbose=0)
    validated = [e for e in range(initial, 6) if "val_loss" in logs.seen[e]]
    assert validated == [e for e in want if e >= initial]
    assert len(h.history["loss"]) == 6 - initial
    assert len(h.history.get("val_loss", [])) == len(validated)
    assert len(h.history.get("val_accuracy", [])) == len(validated)
    rows = csv.read_text().splitlines()
    assert rows[0] == "epoch,accuracy,loss,val_accuracy,val_loss"
    for row in rows[1:]:
        e = int(row.split(",")[0])
        assert (row.endswith(",NA,NA")) == (e not in validated)


def test_validation_freq_early_stopping_skips():
    m = model(hidden=True)
    es = tf.keras.callbacks.EarlyStopping(monitor="val_loss", patience=100)
    h = m.fit(X, Y, batch_size=16, epochs=4, validation_data=(X, Y), validation_freq=2,
              callbacks=[es], verbose=0)
    assert len(h.history["loss"]) == 4 and len(h.history["val_loss"]) == 2


@pytest.mark.parametrize("freq", [0, -1, "2", [0, 2], 1.5])
def test_validation_freq_rejects(freq):
    with pytest.raises(ValueError, match="validation_freq"):
        model().fit(X, Y, validation_data=(X, Y), validation_freq=freq, verbose=0)


def reference_step(ws, cw, lr, x, y):
    """One full-batch SGD step of Dense logits + sparse CE, each example's
    loss and gradient weighted by cw[y], divided by the batch (float64)."""
    W, b = ws[0].astype(np.float64), ws[1].astype(np.float64)
    z = x.astype(np.float64) @ W + b
    z -= z.max(axis=1, keepdims=True)
    p = np.exp(z) / np.exp(z).sum(axis=1, keepdims=True)
    w = np.array([cw.get(int(c), 1.0) for c in y])
    n = len(y)
    loss = float(np.sum(w * -np.log(p[np.arange(n), y])) / n)
    dz = p.copy()
    dz[np.arange(n), y] -= 1
    dz *= (w / n)[:, None]
    acc = float(np.mean(np.argmax(z, axis=1) == y))
    return [W - lr * x.T.astype(np.float64) @ dz, b - lr * dz.sum(axis=0)], loss, acc


@pytest.mark.parametrize("cw", [{0: 0.25, 1: 3.0, 2: 1.5}, {2: 4.0}])  # {2: 4.0}: classes 0, 1 weigh 1
def test_class_weight_step_against_numpy(cw):
    m = model()
    w0 = m.get_weights()
    h = m.fit(X, Y, batch_size=len(X), epochs=1, shuffle=False, class_weight=cw, verbose=0)
    ref, loss, acc = reference_step(w0, cw, 0.5, X, Y)
    for got, want in zip(m.get_weights(), ref):
        assert np.max(np.abs(got - want)) < 2e-6
    assert abs(h.history["loss"][0] - loss) < 1e-5 * loss
    assert abs(h.history["accuracy"][0] - acc) < 1e-12  # metrics= stay unweighted
    # train_on_batch takes it too, with the same step
    m2 = model()
    m2.set_weights(w0)
    out = m2.train_on_batch(X, Y, class_weight=cw, return_dict=True)
    for got, want in zip(m2.get_weights(), ref):
        assert np.max(np.abs(got - want)) < 2e-6
    assert abs(out["loss"] - loss) < 1e-5 * loss


def test_class_weight_changes_the_step_and_ones_do_not():
    m1, m2, m3 = model(), model(), model()
    w0 = m1.get_weights()
    m2.set_weights(w0)
    m3.set_weights(w0)
    m1.fit(X, Y, batch_size=16, epochs=1, shuffle=False, verbose=0)
    m2.fit(X, Y, batch_size=16, epochs=1, shuffle=False, class_weight={0: 1, 1: 1, 2: 1}, verbose=0)
    m3.fit(X, Y, batch_size=16, epochs=1, shuffle=False, class_weight={0: 1, 1: 5, 2: 1}, verbose=0)
    for a, b, c in zip(m1.get_weights(), m2.get_weights(), m3.get_weights()):
        assert np.array_equal(a, b)
    assert max(np.max(np.abs(a - c)) for a, c in zip(m1.get_weights(), m3.get_weights())) > 1e-3


def test_class_weight_mirrored_matches_one_device():
    cw = {0: 0.5, 1: 2.0, 2: 1.0}
    m1 = model()
    w0 = m1.get_weights()
    m1.fit(X, Y, batch_size=len(X), epochs=1, shuffle=False, class_weight=cw, verbose=0)
    with tf.distribute.MirroredStrategy(["cpu:0", "cpu:1"]).scope():
        m2 = model()
    m2.set_weights(w0)
    m2.fit(X, Y, batch_size=len(X), epochs=1, shuffle=False, class_weight=cw, verbose=0)
    for a, b in zip(m1.get_weights(), m2.get_weights()):
        assert np.max(np.abs(a - b)) < 1e-6


def test_class_weight_one_hot_and_dataset():
    cw = {0: 0.25, 1: 3.0, 2: 1.5}
    m = tf.keras.Sequential([tf.keras.Input((4,)), tf.keras.layers.Dense(3)])
    m.compile(optimizer=tf.keras.optimizers.SGD(0.5),
              loss=tf.keras.losses.CategoricalCrossentropy(from_logits=True))
    w0 = m.get_weights()
    ds = tf.data.Dataset.from_tensor_slices((X, np.eye(3, dtype=np.float32)[Y])).batch(len(X))
    m.fit(ds, epochs=1, class_weight=cw, verbose=0)  # one-hot rows: the argmax's weight
    ref, _, _ = reference_step(w0, cw, 0.5, X, Y)
    for got, want in zip(m.get_weights(), ref):
        assert np.max(np.abs(got - want)) < 2e-6


@pytest.mark.parametrize("cw,match", [
    ([1.0, 2.0], "dict"),
    ({-1: 1.0}, "class index"),
    ({"a": 1.0}, "class index"),
    ({0: float("nan")}, "finite"),
    ({0: 1.0, 1: 1.0}, "example .* has class 2, which has no weight"),
])
def test_class_weight_rejects(cw, match):
    with pytest.raises(ValueError, match=match):
        model().fit(X, Y, class_weight=cw, verbose=0)


def test_sample_weight_step_against_numpy():
    """Per-example weights (here random, shuffled fit, mirrored x2) give the
    reference step of weights w_i: they follow the shuffle and the split."""
    w = RNG.uniform(0.1, 3.0, len(X)).astype(np.float32)
    m = model()
    w0 = m.get_weights()
    h = m.fit(X, Y, batch_size=len(X), epochs=1, shuffle=True, sample_weight=w, verbose=0)
    ref, loss, acc = reference_step_w(w0, w, 0.5, X, Y)
    for got, want in zip(m.get_weights(), ref):
        assert np.max(np.abs(got - want)) < 2e-6
    assert abs(h.history["loss"][0] - loss) < 1e-5 * loss
    assert abs(h.history["accuracy"][0] - acc) < 1e-12
    with tf.distribute.MirroredStrategy(["cpu:0", "cpu:1"]).scope():
        m2 = model()
    m2.set_weights(w0)
    ds = tf.data.Dataset.from_tensor_slices((X, Y, w)).shuffle(len(X)).batch(len(X))
    m2.fit(ds, epochs=1, verbose=0)  # (x, y, w) elements
    for got, want in zip(m2.get_weights(), ref):
        assert np.max(np.abs(got - want)) < 2e-6
    m3 = model()
    m3.set_weights(w0)
    m3.train_on_batch(X, Y, sample_weight=w)
    for got, want in zip(m3.get_weights(), ref):
        assert np.max(np.abs(got - want)) < 2e-6


def test_sample_weight_ones_give_the_unweighted_bytes():
    """Weight 1 for every example (two shuffled epochs of 3 batches) gives the
    unweighted run's weights bytes: the weight column changes neither the
    shuffle nor the arithmetic."""
    m1, m2 = model(hidden=True), model(hidden=True)
    m2.set_weights(m1.get_weights())
    m1.fit(X, Y, batch_size=16, epochs=2, verbose=0)
    m2.fit(X, Y, batch_size=16, epochs=2, sample_weight=np.ones(len(X)), verbose=0)
    for a, b in zip(m1.get_weights(), m2.get_weights()):
        assert np.array_equal(a, b)


def reference_step_w(ws, sw, lr, x, y):
    W, b = ws[0].astype(np.float64), ws[1].astype(np.float64)
    z = x.astype(np.float64) @ W + b
    z -= z.max(axis=1, keepdims=True)
    p = np.exp(z) / np.exp(z).sum(axis=1, keepdims=True)
    n = len(y)
    w = sw.astype(np.float64)
    loss = float(np.sum(w * -np.log(p[np.arange(n), y])) / n)
    dz = p.copy()
    dz[np.arange(n), y] -= 1
    dz *= (w / n)[:, None]
    acc = float(np.mean(np.argmax(z, axis=1) == y))
    return [W - lr * x.T.astype(np.float64) @ dz, b - lr * dz.sum(axis=0)], loss, acc


@pytest.mark.parametrize("kw,exc,match", [
    (dict(sample_weight=np.ones(5)), ValueError, "one weight per example"),
    (dict(sample_weight=np.full(48, np.nan)), ValueError, "finite"),
    (dict(sample_weight=np.ones(48), class_weight={0: 1.0}), ValueError, "at the same time"),
    (dict(sample_weight=np.ones(48), validation_split=0.25), NotImplementedError, "validation_split"),
])
def test_sample_weight_rejects(kw, exc, match):
    with pytest.raises(exc, match=match):
        model().fit(X, Y, verbose=0, **kw)
