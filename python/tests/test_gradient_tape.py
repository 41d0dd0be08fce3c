"""tf.GradientTape in a custom loop (issue 32, point 4), as TensorFlow's
"Custom training with tf.distribute.Strategy" tutorial writes it (only the
import changed; synthetic images, fewer steps): under MirroredStrategy
with 2 replicas the tape's loop gives fit's weights (within float
rounding) when it computes fit's loss, and its metrics agree with
evaluate; what the tape does not record is refused by name."""
import numpy as np
import pytest

import strata as tf


@pytest.fixture(autouse=True)
def _restore_seed():
    from strata import _util
    saved = _util._state["seed"]
    yield
    _util._state["seed"] = saved


def _images(n=256, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.random((n, 12, 12, 1), dtype=np.float32)
    y = (x[:, :6, :, 0].mean((1, 2)) * 20).astype(np.int64) % 10
    return x, y


def create_model():
    return tf.keras.Sequential([
        tf.keras.layers.Conv2D(8, 3, activation='relu', input_shape=(12, 12, 1)),
        tf.keras.layers.MaxPooling2D(),
        tf.keras.layers.Flatten(),
        tf.keras.layers.Dense(32, activation='relu'),
        tf.keras.layers.Dense(10)
    ])


def test_custom_training_tutorial_matches_fit():
    train_images, train_labels = _images()
    test_images, test_labels = _images(128, seed=1)
    strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    BATCH_SIZE_PER_REPLICA = 32
    GLOBAL_BATCH_SIZE = BATCH_SIZE_PER_REPLICA * strategy.num_replicas_in_sync
    EPOCHS = 2
    train_dataset = tf.data.Dataset.from_tensor_slices((train_images, train_labels)).batch(GLOBAL_BATCH_SIZE)
    test_dataset = tf.data.Dataset.from_tensor_slices((test_images, test_labels)).batch(GLOBAL_BATCH_SIZE)
    train_dist_dataset = strategy.experimental_distribute_dataset(train_dataset)
    test_dist_dataset = strategy.experimental_distribute_dataset(test_dataset)

    with strategy.scope():
        loss_object = tf.keras.losses.SparseCategoricalCrossentropy(
            from_logits=True, reduction=tf.keras.losses.Reduction.NONE)

        def compute_loss(labels, predictions, model_losses):
            per_example_loss = loss_object(labels, predictions)
            loss = tf.nn.compute_average_loss(per_example_loss)
            if model_losses:
                loss += tf.nn.scale_regularization_loss(tf.add_n(model_losses))
            return loss
    with strategy.scope():
        test_loss = tf.keras.metrics.Mean(name='test_loss')
        train_accuracy = tf.keras.metrics.SparseCategoricalAccuracy(name='train_accuracy')
        test_accuracy = tf.keras.metrics.SparseCategoricalAccuracy(name='test_accuracy')
    tf.random.set_seed(9)
    with strategy.scope():
        model = create_model()
        optimizer = tf.keras.optimizers.Adam(learning_rate=0.001)

    def train_step(inputs):
        images, labels = inputs
        with tf.GradientTape() as tape:
            predictions = model(images, training=True)
            loss = compute_loss(labels, predictions, model.losses)
        gradients = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(gradients, model.trainable_variables))
        train_accuracy.update_state(labels, predictions)
        return loss

    def test_step(inputs):
        images, labels = inputs
        predictions = model(images, training=False)
        t_loss = loss_object(labels, predictions)
        test_loss.update_state(t_loss)
        test_accuracy.update_state(labels, predictions)

    @tf.function
    def distributed_train_step(dataset_inputs):
        per_replica_losses = strategy.run(train_step, args=(dataset_inputs,))
        return strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica_losses, axis=None)

    @tf.function
    def distributed_test_step(dataset_inputs):
        return strategy.run(test_step, args=(dataset_inputs,))

    losses = []
    for epoch in range(EPOCHS):
        total_loss = 0.0
        num_batches = 0
        for x in train_dist_dataset:
            total_loss += distributed_train_step(x)
            num_batches += 1
        train_loss = total_loss / num_batches
        for x in test_dist_dataset:
            distributed_test_step(x)
        losses.append(float(train_loss))
        if epoch < EPOCHS - 1:
            test_loss.reset_states()
            train_accuracy.reset_states()
            test_accuracy.reset_states()

    tf.random.set_seed(9)
    with strategy.scope():
        ref = create_model()
        ref.compile(tf.keras.optimizers.Adam(learning_rate=0.001),
                    tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=["accuracy"])
    hist = ref.fit(train_images, train_labels, batch_size=GLOBAL_BATCH_SIZE, epochs=EPOCHS, shuffle=False,
                   verbose=0).history
    for a, b in zip(model.get_weights(), ref.get_weights()):
        np.testing.assert_allclose(a, b, atol=1e-6, rtol=0)
    np.testing.assert_allclose(losses, hist["loss"], rtol=1e-5)
    np.testing.assert_allclose(train_accuracy.result().numpy(), hist["accuracy"][-1], rtol=1e-6)
    loss, acc = ref.evaluate(test_images, test_labels, batch_size=GLOBAL_BATCH_SIZE, verbose=0)
    np.testing.assert_allclose(test_loss.result().numpy(), loss, rtol=1e-5)
    np.testing.assert_allclose(test_accuracy.result().numpy(), acc, rtol=1e-6)


def test_tape_refusals():
    model = create_model()
    model.compile("sgd", tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    x, y = _images(8)
    strategy = tf.distribute.get_strategy()
    seen = {}

    def step(images, labels):
        with tf.GradientTape() as tape:
            logits = model(images, training=True)
            np.sin(logits)  # no gradient in Strata: harmless unless a loss uses it
            loss = tf.reduce_mean(tf.keras.losses.sparse_categorical_crossentropy(labels, logits, from_logits=True)) * 2.0
            penalty = loss + 0.01 * tf.reduce_sum(tf.math.cos(logits))  # tf.math.cos: not differentiated by Strata
            assert int(tf.argmax(logits, axis=1).shape[0]) == len(labels)  # unused in the loss: harmless
            with tape.stop_recording():
                assert getattr(model(images), "_tape_node", None) is None  # a second forward...
        with pytest.raises(NotImplementedError, match="called again on this replica"):
            tape.gradient(loss, model.trainable_variables)  # ...after the recorded one: refused
        with tf.GradientTape() as tape:
            logits = model(images, training=True)
            loss = tf.reduce_mean(tf.keras.losses.sparse_categorical_crossentropy(labels, logits, from_logits=True)) * 2.0
            penalty = loss + 0.01 * tf.reduce_sum(tf.math.cos(logits))
            wavy = loss + tf.reduce_sum(np.sin(logits))
        with pytest.raises(NotImplementedError, match="does not differentiate"):
            tape.gradient(penalty, model.trainable_variables)
        tape._used = False
        with pytest.raises(NotImplementedError, match=r"does not differentiate \(np.sin\)"):
            tape.gradient(wavy, model.trainable_variables)
        tape._used = False
        grads = tape.gradient(loss, model.trainable_variables)
        with pytest.raises(NotImplementedError, match="stay in Strata's engine"):
            grads[0].numpy()
        with pytest.raises(NotImplementedError, match="compiled with"):
            tf.keras.optimizers.SGD().apply_gradients(zip(grads, model.trainable_variables))
        model.optimizer.apply_gradients(zip(grads, model.trainable_variables))
        seen["ok"] = True
    before = model.get_weights()
    strategy.run(step, args=(x, y))
    assert seen["ok"] and any((a != b).any() for a, b in zip(before, model.get_weights()))


def test_quickstart_for_experts_loop_under_the_default_strategy():
    """The experts' quickstart loop (a subclassed model, an optimizer made
    outside any scope, @tf.function train_step) run through
    tf.distribute.get_strategy().run: fit's weights within float rounding."""
    from strata.keras import Model
    from strata.keras.layers import Conv2D, Dense, Flatten

    class MyModel(Model):
        def __init__(self):
            super().__init__()
            self.conv1 = Conv2D(8, 3, activation='relu')
            self.flatten = Flatten()
            self.d1 = Dense(32, activation='relu')
            self.d2 = Dense(10)

        def call(self, x):
            x = self.conv1(x)
            x = self.flatten(x)
            x = self.d1(x)
            return self.d2(x)

    x_train, y_train = _images(128)
    tf.random.set_seed(12)
    model = MyModel()
    model.build((None, 12, 12, 1))  # Strata traces call() when the shape is known: before strategy.run
    loss_object = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    optimizer = tf.keras.optimizers.Adam()
    train_loss = tf.keras.metrics.Mean(name='train_loss')
    train_accuracy = tf.keras.metrics.SparseCategoricalAccuracy(name='train_accuracy')

    @tf.function
    def train_step(images, labels):
        with tf.GradientTape() as tape:
            predictions = model(images, training=True)
            loss = loss_object(labels, predictions)
        gradients = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(gradients, model.trainable_variables))
        train_loss(loss)
        train_accuracy(labels, predictions)

    train_ds = tf.data.Dataset.from_tensor_slices((x_train, y_train)).batch(32)
    strategy = tf.distribute.get_strategy()
    for images, labels in train_ds:
        strategy.run(train_step, args=(images, labels))

    tf.random.set_seed(12)
    ref = MyModel()
    ref.compile(tf.keras.optimizers.Adam(), loss_object, metrics=["accuracy"])
    hist = ref.fit(x_train, y_train, batch_size=32, epochs=1, shuffle=False, verbose=0).history
    for a, b in zip(model.get_weights(), ref.get_weights()):
        np.testing.assert_allclose(a, b, atol=1e-5, rtol=0)
    np.testing.assert_allclose(train_loss.result().numpy(), hist["loss"][0], rtol=1e-5)
    np.testing.assert_allclose(train_accuracy.result().numpy(), hist["accuracy"][0], rtol=1e-6)
