"""Callbacks run in Python with Keras's logs; stop_training is honoured."""
import csv

import numpy as np

import strata as tf

X = np.random.default_rng(1).random((64, 4), dtype=np.float32)
Y = (X.sum(axis=1) > 2).astype(np.int32)


def model():
    m = tf.keras.Sequential([tf.keras.layers.Dense(2, activation="softmax", input_shape=(4,))])
    m.compile(optimizer=tf.keras.optimizers.SGD(0.1), loss="sparse_categorical_crossentropy",
              metrics=["accuracy"])
    return m


def test_subclass_hooks_and_stop_training():
    seen = []

    class Rec(tf.keras.callbacks.Callback):
        def on_epoch_begin(self, epoch, logs=None):
            seen.append(("begin", epoch))

        def on_train_batch_end(self, batch, logs=None):
            seen.append(("batch", batch, sorted(logs)))

        def on_epoch_end(self, epoch, logs=None):
            seen.append(("end", epoch, sorted(logs)))
            if epoch == 1:
                self.model.stop_training = True

    h = model().fit(X, Y, epochs=5, batch_size=32, validation_data=(X, Y), callbacks=[Rec()], verbose=0)
    assert len(h.history["loss"]) == 2
    assert ("end", 1, ["accuracy", "loss", "val_accuracy", "val_loss"]) in seen
    assert seen.count(("batch", 1, ["accuracy", "loss"])) == 2


def test_builtin_callbacks(tmp_path):
    lrs = []
    sched = tf.keras.callbacks.LearningRateScheduler(lambda e, lr: 0.1 / (e + 1))
    rec = tf.keras.callbacks.LambdaCallback(on_epoch_end=lambda e, l: lrs.append(m.optimizer.learning_rate))
    ckpt = tf.keras.callbacks.ModelCheckpoint(str(tmp_path / "w{epoch}.weights.h5"))
    log = tf.keras.callbacks.CSVLogger(str(tmp_path / "log.csv"))
    tb = tf.keras.callbacks.TensorBoard(str(tmp_path / "tb"))
    es = tf.keras.callbacks.EarlyStopping(monitor="loss", patience=0, min_delta=10.0)
    m = model()
    h = m.fit(X, Y, epochs=4, batch_size=16, callbacks=[sched, rec, ckpt, log, tb, es, tf.keras.callbacks.TerminateOnNaN()], verbose=0)
    assert len(h.history["loss"]) == 2  # EarlyStopping: no 10.0 improvement
    np.testing.assert_allclose(lrs, [0.1, 0.05], rtol=1e-6)
    assert (tmp_path / "w1.weights.h5").exists() and (tmp_path / "w2.weights.h5").exists()
    rows = list(csv.reader(open(tmp_path / "log.csv")))
    assert rows[0] == ["epoch", "accuracy", "loss"] and len(rows) == 3
    assert list((tmp_path / "tb" / "train").iterdir())


def test_ctrl_c_raises_keyboard_interrupt_at_a_step_boundary(tmp_path):
    """SIGINT while C trains (GIL released) becomes KeyboardInterrupt at the
    next step boundary, after BackupAndRestore's backup is written there; the
    interpreter survives to handle it."""
    import os
    import signal
    import subprocess
    import sys
    import time
    prog = tmp_path / "long_fit.py"
    prog.write_text(
        "import strata as tf, numpy as np, sys\n"
        "x = np.random.default_rng(0).random((4096, 256), dtype=np.float32)\n"
        "y = np.arange(4096) % 10\n"
        "m = tf.keras.Sequential([tf.keras.layers.Dense(512, activation='relu', input_shape=(256,)),\n"
        "                         tf.keras.layers.Dense(10)])\n"
        "m.compile('adam', tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))\n"
        "print('ready', flush=True)\n"
        "try:\n"
        "    m.fit(x, y, epochs=10000, batch_size=32, verbose=0,\n"
        "          callbacks=[tf.keras.callbacks.BackupAndRestore(sys.argv[1])])\n"
        "except KeyboardInterrupt:\n"
        "    print('interrupted', len(m.get_weights()), flush=True)\n"
        "    sys.exit(0)\n")
    env = dict(os.environ)
    backup = tmp_path / "backup"
    p = subprocess.Popen([sys.executable, str(prog), str(backup)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         env=env, text=True)
    assert p.stdout.readline().strip() == "ready"
    time.sleep(0.5)
    p.send_signal(signal.SIGINT)
    t0 = time.time()
    out, err = p.communicate(timeout=30)
    assert p.returncode == 0, err
    assert "interrupted 4" in out
    assert time.time() - t0 < 5
    assert (backup / "latest").exists()  # the backup written at the step it stopped at


def test_backup_and_restore_resumes_to_the_same_weights(tmp_path):
    """A fit stopped part-way (an exception in a callback at epoch 2's end)
    and run again with the same BackupAndRestore ends with the weights of an
    uninterrupted fit."""
    def fresh():
        tf.random.set_seed(5)
        return model()

    full = fresh()
    full.fit(X, Y, epochs=4, batch_size=16, verbose=0)

    class Crash(tf.keras.callbacks.Callback):
        def on_epoch_end(self, epoch, logs=None):
            if epoch == 1:
                raise RuntimeError("simulated crash")

    backup = tf.keras.callbacks.BackupAndRestore(str(tmp_path / "backup"))
    m = fresh()
    try:
        m.fit(X, Y, epochs=4, batch_size=16, verbose=0, callbacks=[backup, Crash()])
    except RuntimeError as e:
        assert "simulated crash" in str(e)
    assert (tmp_path / "backup").exists()
    m2 = fresh()
    h = m2.fit(X, Y, epochs=4, batch_size=16, verbose=0, callbacks=[backup])
    assert len(h.history["loss"]) >= 2
    for a, b in zip(full.get_weights(), m2.get_weights()):
        np.testing.assert_array_equal(a, b)
    assert not (tmp_path / "backup").exists()  # deleted once training completed
    tf.random.set_seed(None)
