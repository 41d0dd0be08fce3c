"""Checkpoint plumbing (issue 32, point 5) as TensorFlow's "Save and load
models" tutorial writes it (the checkpoint half; only the import changed,
Fashion-MNIST in place of MNIST, fewer examples and epochs):
ModelCheckpoint and save_weights create their directory, save_freq in
batches, tf.train.latest_checkpoint, and tf.io.gfile."""
import math
import os

import numpy as np
import pytest

import strata as tf
from strata import keras


@pytest.fixture
def data(fashion, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (train_images, train_labels), (test_images, test_labels) = fashion
    train_labels = train_labels[:1000]
    test_labels = test_labels[:1000]
    train_images = train_images[:1000].reshape(-1, 28 * 28) / 255.0
    test_images = test_images[:1000].reshape(-1, 28 * 28) / 255.0
    return train_images, train_labels, test_images, test_labels


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


def test_checkpoint_callback_usage(data):
    train_images, train_labels, test_images, test_labels = data
    tf.random.set_seed(3)
    model = create_model()
    checkpoint_path = "training_1/cp.ckpt"
    checkpoint_dir = os.path.dirname(checkpoint_path)
    cp_callback = tf.keras.callbacks.ModelCheckpoint(filepath=checkpoint_path, save_weights_only=True, verbose=1)
    model.fit(train_images, train_labels, epochs=2, validation_data=(test_images, test_labels),
              callbacks=[cp_callback], verbose=0)
    assert sorted(os.listdir(checkpoint_dir)) == ["checkpoint", "cp.ckpt"]
    trained_loss, trained_acc = model.evaluate(test_images, test_labels, verbose=0)

    model = create_model()
    loss, acc = model.evaluate(test_images, test_labels, verbose=2)
    assert acc < trained_acc
    model.load_weights(checkpoint_path)
    loss, acc = model.evaluate(test_images, test_labels, verbose=2)
    assert (loss, acc) == (trained_loss, trained_acc)
    tf.random.set_seed(None)


def test_checkpoint_every_n_batches_and_latest(data):
    train_images, train_labels, test_images, test_labels = data
    checkpoint_path = "training_2/cp-{epoch:04d}.ckpt"
    checkpoint_dir = os.path.dirname(checkpoint_path)
    batch_size = 32
    n_batches = len(train_images) / batch_size
    n_batches = math.ceil(n_batches)
    cp_callback = tf.keras.callbacks.ModelCheckpoint(
        filepath=checkpoint_path, verbose=1, save_weights_only=True, save_freq=2 * n_batches)
    model = create_model()
    model.save_weights(checkpoint_path.format(epoch=0))  # creates training_2/
    assert tf.train.latest_checkpoint(checkpoint_dir) == os.path.join(checkpoint_dir, "cp-0000.ckpt")
    model.fit(train_images, train_labels, epochs=5, batch_size=batch_size, callbacks=[cp_callback],
              validation_data=(test_images, test_labels), verbose=0)
    assert sorted(os.listdir(checkpoint_dir)) == ["checkpoint", "cp-0000.ckpt", "cp-0002.ckpt", "cp-0004.ckpt"]
    latest = tf.train.latest_checkpoint(checkpoint_dir)
    assert latest == os.path.join("training_2", "cp-0004.ckpt")
    with open(os.path.join(checkpoint_dir, "checkpoint")) as f:
        state = f.read()
    assert state.startswith('model_checkpoint_path: "cp-0004.ckpt"\n')
    assert state.count("all_model_checkpoint_paths:") == 3

    model = create_model()
    model.load_weights(latest)
    w = model.get_weights()
    assert all(np.isfinite(a).all() for a in w)
    # epoch 4's weights differ from the final (epoch 5's) ones, equal a reload of the same file
    other = create_model()
    other.load_weights(latest)
    assert all((a == b).all() for a, b in zip(w, other.get_weights()))

    model.save_weights('./checkpoints/my_checkpoint')  # the tutorial's manual save: the directory is made
    assert tf.train.latest_checkpoint('./checkpoints') == os.path.join('./checkpoints', 'my_checkpoint')
    assert tf.train.latest_checkpoint('no_such_dir') is None
    model.save_weights('weights_dir/m.weights.h5')  # Keras 3's suffix: no TF state file
    assert os.listdir('weights_dir') == ['m.weights.h5']
    with pytest.raises(ValueError, match="save_freq"):
        tf.keras.callbacks.ModelCheckpoint("x", save_freq=0)


def test_gfile(tmp_path):
    d = str(tmp_path / "a" / "b")
    assert not tf.io.gfile.exists(d)
    tf.io.gfile.makedirs(d)
    tf.io.gfile.makedirs(d)  # exists already: fine, as TF
    assert tf.io.gfile.isdir(d)
    with tf.io.gfile.GFile(os.path.join(d, "x.txt"), "w") as f:
        f.write("one\ntwo\n")
    with tf.io.gfile.GFile(os.path.join(d, "y.bin"), "wb") as f:
        f.write(b"\x00\x01")
    assert tf.io.gfile.glob(os.path.join(d, "*.txt")) == [os.path.join(d, "x.txt")]
    assert tf.io.gfile.listdir(d) == ["x.txt", "y.bin"]
    with tf.io.gfile.GFile(os.path.join(d, "x.txt")) as f:
        assert f.readlines() == ["one\n", "two\n"]
    assert tf.io.gfile.GFile(os.path.join(d, "y.bin"), "rb").read() == b"\x00\x01"
    with pytest.raises(NotImplementedError, match="local files only"):
        tf.io.gfile.exists("gs://bucket/x")
    with pytest.raises(AttributeError, match="tf.io.gfile.join: Strata does not provide"):
        tf.io.gfile.join
    with pytest.raises(NotImplementedError, match="one Keras model"):
        tf.train.Checkpoint(model=None)


def test_train_checkpoint_and_manager(data):
    """tf.train.Checkpoint as the custom-training tutorial uses it (save
    every few epochs, restore into a new model from latest_checkpoint for
    evaluation), and a CheckpointManager keeping the newest two."""
    train_images, train_labels, test_images, test_labels = data
    checkpoint_dir = './training_checkpoints'
    checkpoint_prefix = os.path.join(checkpoint_dir, "ckpt")
    model = create_model()
    optimizer = model.optimizer
    checkpoint = tf.train.Checkpoint(optimizer=optimizer, model=model)
    for epoch in range(2):
        model.fit(train_images, train_labels, epochs=1, verbose=0)
        path = checkpoint.save(checkpoint_prefix)
    assert path == os.path.join(checkpoint_dir, "ckpt-2")
    assert tf.train.latest_checkpoint(checkpoint_dir) == path

    new_model = tf.keras.Sequential([keras.layers.Dense(512, activation='relu', input_shape=(784,)),
                                     keras.layers.Dropout(0.2), keras.layers.Dense(10)])
    new_optimizer = tf.keras.optimizers.Adam()
    eval_accuracy = tf.keras.metrics.SparseCategoricalAccuracy(name='eval_accuracy')
    checkpoint = tf.train.Checkpoint(optimizer=new_optimizer, model=new_model)
    checkpoint.restore(tf.train.latest_checkpoint(checkpoint_dir)).expect_partial()
    for images, labels in tf.data.Dataset.from_tensor_slices((test_images, test_labels)).batch(100):
        eval_accuracy(labels, new_model(images, training=False))
    assert all((a == b).all() for a, b in zip(new_model.get_weights(), model.get_weights()))
    _, acc = model.evaluate(test_images, test_labels, verbose=0)
    np.testing.assert_allclose(eval_accuracy.result().numpy(), acc, rtol=1e-6)
    with pytest.raises(RuntimeError, match="must compile"):  # restore's compile is not the user's
        new_model.fit(train_images, train_labels, epochs=1, verbose=0)
    # the optimizer state came back: one more epoch on both gives the same weights
    new_model.compile(new_optimizer, tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    checkpoint.restore(path)
    model.fit(train_images, train_labels, epochs=1, shuffle=False, verbose=0)
    new_model.fit(train_images, train_labels, epochs=1, shuffle=False, verbose=0)
    assert all((a == b).all() for a, b in zip(new_model.get_weights(), model.get_weights()))

    manager = tf.train.CheckpointManager(tf.train.Checkpoint(model=model, optimizer=optimizer), "./tf_ckpts",
                                         max_to_keep=2)
    for _ in range(3):
        manager.save()
    assert manager.checkpoints == [os.path.join("./tf_ckpts", "ckpt-2"), os.path.join("./tf_ckpts", "ckpt-3")]
    assert manager.latest_checkpoint == os.path.join("./tf_ckpts", "ckpt-3")
    assert sorted(os.listdir("./tf_ckpts")) == ["checkpoint", "ckpt-2", "ckpt-3"]
    assert tf.train.Checkpoint(model=model).restore(None) is not None
