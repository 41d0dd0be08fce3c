"""Issue 32 item 10, seeds as TensorFlow users expect them: two models built
in one program get different initial weights (TF's global generator gives
each new model the next seeds), the same program run again gets the same
ones, tf.random.set_seed / tf.keras.utils.set_random_seed start the
sequence again, and an initializer given a seed (GlorotUniform(seed=3))
draws the same values in any model, any place. Dropout masks stay keyed by
the global seed, the step and the layer (a model rebuilt to restore a
checkpoint continues with the masks of the run that wrote it)."""
import os
import subprocess
import sys

import numpy as np
import pytest

import strata as tf

L = tf.keras.layers


def _mlp(name=None, **kw):
    return tf.keras.Sequential([L.Dense(16, activation="relu", input_shape=(8,), **kw), L.Dense(3)], name=name)


def _same(a, b):
    return all(x.shape == y.shape and np.array_equal(x, y) for x, y in zip(a.get_weights(), b.get_weights()))


def test_models_built_in_a_row_differ_and_set_seed_repeats_them():
    tf.random.set_seed(7)
    a, b = _mlp(), _mlp()
    assert not _same(a, b)
    tf.random.set_seed(7)
    a2, b2 = _mlp(), _mlp()
    assert _same(a, a2) and _same(b, b2)
    tf.keras.utils.set_random_seed(7)  # the same sequence, and NumPy's / Python's generators seeded
    a3 = _mlp()
    assert _same(a, a3)
    r1 = np.random.random(3)
    tf.keras.utils.set_random_seed(7)
    _mlp()
    assert np.array_equal(r1, np.random.random(3))
    tf.random.set_seed(8)
    assert not _same(a, _mlp())


def test_functional_and_builtin_models_take_the_next_seed_too():
    tf.random.set_seed(3)

    def functional():
        inp = tf.keras.Input(shape=(8,))
        return tf.keras.Model(inp, L.Dense(3)(L.Dense(16, activation="relu")(inp)))
    f1, f2 = functional(), functional()
    assert not _same(f1, f2)
    tf.random.set_seed(3)
    assert _same(f1, functional())
    import strata.models
    b1, b2 = strata.models.mobilenet_tiny(), strata.models.mobilenet_tiny()
    assert not _same(b1, b2)


def test_first_model_after_a_seed_has_that_seed():
    """The first model after tf.random.set_seed(S) gets S itself: the weights
    `strata train --seed S` and every earlier Strata release gave."""
    tf.random.set_seed(11)
    first = _mlp()
    tf.random.set_seed(11)
    _mlp()
    second = _mlp()
    from strata import _util
    assert _util._state["models"] == 2
    assert first._init_seed == 11 and second._init_seed not in (11, 0)
    assert not _same(first, second)


def test_a_program_run_twice_gets_the_same_weights(tmp_path):
    prog = tmp_path / "p.py"
    prog.write_text("import hashlib, strata as tf\n"
                    "L = tf.keras.layers\n"
                    "ms = [tf.keras.Sequential([L.Dense(16, input_shape=(8,)), L.Dense(3)]) for _ in range(3)]\n"
                    "print(' '.join(hashlib.sha256(b''.join(w.tobytes() for w in m.get_weights())).hexdigest()[:16]"
                    " for m in ms))\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    outs = [subprocess.run([sys.executable, str(prog)], capture_output=True, text=True, env=env, timeout=120)
            for _ in range(2)]
    for o in outs:
        assert o.returncode == 0, o.stderr
    h1, h2 = outs[0].stdout.split(), outs[1].stdout.split()
    assert h1 == h2 and len(set(h1)) == 3  # reproducible across runs, different within one


def test_seeded_initializer_gives_the_same_values_anywhere():
    init = tf.keras.initializers.GlorotUniform(seed=42)
    tf.random.set_seed(1)
    a = tf.keras.Sequential([L.Dense(16, input_shape=(8,), kernel_initializer=init), L.Dense(3)])
    tf.random.set_seed(2)
    b = tf.keras.Sequential([L.Dense(16, input_shape=(8,), kernel_initializer=tf.keras.initializers.GlorotUniform(seed=42)),
                             L.Dense(3)])
    wa, wb = a.get_weights(), b.get_weights()
    assert np.array_equal(wa[0], wb[0])  # the seeded kernel
    assert not np.array_equal(wa[2], wb[2])  # the unseeded one follows the global seed
    assert np.abs(wa[0]).max() <= np.sqrt(6.0 / (8 + 16)) + 1e-6 and wa[0].std() > 0.05  # Glorot's range
    # another place (a functional model's second Dense of the same shape) and another seed
    inp = tf.keras.Input(shape=(8,))
    h = L.Dense(8)(inp)
    out = L.Dense(16, kernel_initializer=tf.keras.initializers.GlorotUniform(seed=42))(h)
    c = tf.keras.Model(inp, out)
    assert np.array_equal(c.get_weights()[2], wa[0])
    d = tf.keras.Sequential([L.Dense(16, input_shape=(8,), kernel_initializer=tf.keras.initializers.GlorotUniform(seed=43))])
    assert not np.array_equal(d.get_weights()[0], wa[0])
    he = tf.keras.Sequential([L.Conv2D(4, 3, input_shape=(6, 6, 2), kernel_initializer=tf.keras.initializers.HeNormal(seed=5)), L.Flatten()])
    he2 = tf.keras.Sequential([L.Conv2D(4, 3, input_shape=(6, 6, 2), kernel_initializer=tf.keras.initializers.HeNormal(seed=5)), L.Flatten()])
    assert np.array_equal(he.get_weights()[0], he2.get_weights()[0])
    with pytest.raises(ValueError, match="seed=-1"):
        L.Dense(3, kernel_initializer=tf.keras.initializers.GlorotUniform(seed=-1))
    with pytest.raises(NotImplementedError, match="attention"):
        L.MultiHeadAttention(2, 4, kernel_initializer=tf.keras.initializers.GlorotUniform(seed=1))


def test_dropout_masks_follow_the_global_seed_not_the_model():
    """Two models given the same weights and trained on the same batches with
    Dropout end equal: the masks are keyed by (global seed, step, layer), as
    a model rebuilt to resume a backup needs."""
    rng = np.random.default_rng(0)
    x, y = rng.random((64, 8), dtype=np.float32), rng.integers(0, 3, 64)
    tf.random.set_seed(4)
    ms = [tf.keras.Sequential([L.Dense(16, activation="relu", input_shape=(8,)), L.Dropout(0.5), L.Dense(3)])
          for _ in range(2)]
    assert not _same(*ms)
    ms[1].set_weights(ms[0].get_weights())
    for m in ms:
        m.compile(tf.keras.optimizers.SGD(0.1), tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        m.fit(x, y, batch_size=16, epochs=1, shuffle=False, verbose=0)
    assert _same(*ms)
