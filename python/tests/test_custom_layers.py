"""Custom layers (issue 32), as TensorFlow's "Making new layers and models
via subclassing" guide writes them (only the import changed; synthetic data,
fewer steps): tf.keras.layers.Layer subclasses with build / add_weight /
call using tf ops, non-trainable weights, nested layers, add_loss, a
training argument. They run eagerly, layer by layer (keras/_custom.py): a
GradientTape differentiates the tf ops in call() (checked against finite
differences and against the gradient written out by hand), and a subclassed
tf.keras.Model that holds them trains with fit (the same weights as the
guide's tape loop on the same batches)."""
import numpy as np
import pytest

import strata as tf
from strata import keras


@pytest.fixture(autouse=True)
def _restore_seed():
    from strata import _util
    saved = _util._state["seed"]
    yield
    _util._state["seed"] = saved


class Linear(keras.layers.Layer):
    def __init__(self, units=32):
        super().__init__()
        self.units = units

    def build(self, input_shape):
        self.w = self.add_weight(
            shape=(input_shape[-1], self.units),
            initializer="random_normal",
            trainable=True,
        )
        self.b = self.add_weight(
            shape=(self.units,), initializer="random_normal", trainable=True
        )

    def call(self, inputs):
        return tf.matmul(inputs, self.w) + self.b


class MLPBlock(keras.layers.Layer):
    def __init__(self):
        super().__init__()
        self.linear_1 = Linear(32)
        self.linear_2 = Linear(32)
        self.linear_3 = Linear(1)

    def call(self, inputs):
        x = self.linear_1(inputs)
        x = tf.nn.relu(x)
        x = self.linear_2(x)
        x = tf.nn.relu(x)
        return self.linear_3(x)


def test_guide_layers_weights_and_state():
    class EagerLinear(keras.layers.Layer):
        def __init__(self, units=32, input_dim=32):
            super().__init__()
            self.w = self.add_weight(shape=(input_dim, units), initializer="random_normal", trainable=True)
            self.b = self.add_weight(shape=(units,), initializer="zeros", trainable=True)

        def call(self, inputs):
            return tf.matmul(inputs, self.w) + self.b

    x = tf.ones((2, 2))
    linear_layer = EagerLinear(4, 2)
    y = linear_layer(x)
    assert y.shape == (2, 4)
    assert linear_layer.weights == [linear_layer.w, linear_layer.b]
    np.testing.assert_allclose(y.numpy(), np.ones((2, 2)) @ linear_layer.w.numpy(), rtol=1e-6)

    class ComputeSum(keras.layers.Layer):
        def __init__(self, input_dim):
            super().__init__()
            self.total = self.add_weight(initializer="zeros", shape=(input_dim,), trainable=False)

        def call(self, inputs):
            self.total.assign_add(tf.reduce_sum(inputs, axis=0))
            return self.total

    my_sum = ComputeSum(2)
    my_sum(x)
    assert my_sum(x).numpy().tolist() == [4.0, 4.0]
    assert (len(my_sum.weights), len(my_sum.non_trainable_weights), len(my_sum.trainable_weights)) == (1, 1, 0)

    mlp = MLPBlock()
    y = mlp(tf.ones(shape=(3, 64)))  # The first call to the `mlp` will create the weights
    assert y.shape == (3, 1)
    assert len(mlp.weights) == 6 and len(mlp.trainable_weights) == 6
    assert mlp.name == "mlp_block" and mlp.linear_1.w.shape == (64, 32)


def test_tape_gradients_of_custom_layers():
    tf.random.set_seed(1)
    mlp = MLPBlock()
    rng = np.random.default_rng(0)
    x = rng.normal(size=(8, 5)).astype(np.float32)
    y = rng.normal(size=(8, 1)).astype(np.float32)
    loss_fn = keras.losses.MeanSquaredError()
    with tf.GradientTape() as tape:
        loss = loss_fn(y, mlp(x))
    grads = tape.gradient(loss, mlp.trainable_weights)
    assert [g.shape for g in grads] == [v.shape for v in mlp.trainable_weights]
    # the last layer's gradient written out: d mean((h3 - y)^2) / d w3 = h2^T (2 (h3 - y) / n)
    w = [v.numpy().astype(np.float64) for v in mlp.trainable_weights]
    h1 = np.maximum(x @ w[0] + w[1], 0)
    h2 = np.maximum(h1 @ w[2] + w[3], 0)
    d3 = 2 * (h2 @ w[4] + w[5] - y) / len(x)
    np.testing.assert_allclose(grads[4].numpy(), h2.T @ d3, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(grads[5].numpy(), d3.sum(0), rtol=1e-4, atol=1e-6)
    # and the first layer's against finite differences (float64 forward)

    def loss64(w0):
        h1 = np.maximum(x @ w0 + w[1], 0)
        h2 = np.maximum(h1 @ w[2] + w[3], 0)
        return np.mean((h2 @ w[4] + w[5] - y) ** 2)
    for i, j in ((0, 0), (3, 7), (4, 31)):
        e = np.zeros_like(w[0])
        e[i, j] = 1e-5
        np.testing.assert_allclose((loss64(w[0] + e) - loss64(w[0] - e)) / 2e-5, grads[0].numpy()[i, j],
                                   rtol=1e-3, atol=1e-6)


class ActivityRegularizationLayer(keras.layers.Layer):
    def __init__(self, rate=1e-2):
        super().__init__()
        self.rate = rate

    def call(self, inputs):
        self.add_loss(self.rate * tf.reduce_sum(inputs))
        return inputs


class CustomDropout(keras.layers.Layer):
    def __init__(self, rate, **kwargs):
        super().__init__(**kwargs)
        self.rate = rate

    def call(self, inputs, training=None):
        if training:
            return tf.nn.dropout(inputs, rate=self.rate)
        return inputs


class MLP(keras.Model):
    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.block = MLPBlock()
        self.reg = ActivityRegularizationLayer(1e-3)
        self.dense = keras.layers.Dense(3)

    def call(self, inputs):
        return self.dense(self.reg(self.block(inputs)))


def _data(n=96):
    rng = np.random.default_rng(2)
    x = rng.normal(size=(n, 6)).astype(np.float32)
    return x, (x[:, 0] + x[:, 1] > 0).astype(np.int32) + (x[:, 2] > 1).astype(np.int32)


def test_model_of_custom_layers_fit_equals_tape_loop():
    x_train, y_train = _data()
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    train_dataset = tf.data.Dataset.from_tensor_slices((x_train, y_train)).batch(32)

    tf.random.set_seed(7)
    model = MLP()
    optimizer = keras.optimizers.Adam(learning_rate=1e-2)
    for epoch in range(2):
        for x_batch_train, y_batch_train in train_dataset:
            with tf.GradientTape() as tape:
                logits = model(x_batch_train)
                loss_value = loss_fn(y_batch_train, logits)
                loss_value += sum(model.losses)  # Add extra losses created during this forward pass
            grads = tape.gradient(loss_value, model.trainable_weights)
            optimizer.apply_gradients(zip(grads, model.trainable_weights))
    assert len(model.losses) == 1 and len(model.trainable_weights) == 8

    tf.random.set_seed(7)
    ref = MLP()
    ref.compile(keras.optimizers.Adam(learning_rate=1e-2), loss_fn, metrics=["accuracy"])
    hist = ref.fit(x_train, y_train, batch_size=32, epochs=2, shuffle=False, verbose=0).history
    for a, b in zip(model.get_weights(), ref.get_weights()):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)
    assert hist["loss"][1] < hist["loss"][0] and set(hist) == {"loss", "accuracy"}
    loss, acc = ref.evaluate(x_train, y_train, batch_size=len(x_train), verbose=0)
    logits = ref(x_train)
    np.testing.assert_allclose(loss, float(loss_fn(y_train, logits)) + float(sum(ref.losses)), rtol=1e-6)
    np.testing.assert_allclose(acc, np.mean(np.argmax(logits.numpy(), 1) == y_train), rtol=1e-6)
    assert ref.predict(x_train[:5]).shape == (5, 3)
    with pytest.raises(NotImplementedError, match="save_weights"):
        ref.save("m.keras")


def test_training_argument():
    drop = CustomDropout(0.5)
    x = tf.ones((4, 100))
    assert (drop(x).numpy() == 1).all() and (drop(x, training=False).numpy() == 1).all()
    y = drop(x, training=True).numpy()
    assert set(np.unique(y)) == {0.0, 2.0} and 100 < (y == 0).sum() < 300
    v = tf.Variable(np.ones((4, 100), np.float32))
    with tf.GradientTape() as tape:
        out = tf.reduce_sum(drop(v * 3.0, training=True))
    g = tape.gradient(out, v).numpy()
    assert set(np.unique(g)) == {0.0, 6.0}


def test_sequential_of_custom_layers_runs_eagerly():
    x, y = _data(64)
    tf.random.set_seed(4)
    model = keras.Sequential([keras.layers.Dense(8, activation="relu", input_shape=(6,)), Linear(3)])
    assert isinstance(model, keras.Sequential) and len(model.layers) == 2
    model.compile(keras.optimizers.SGD(0.1), keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=["accuracy"])
    hist = model.fit(x, y, batch_size=16, epochs=3, verbose=0).history
    assert hist["loss"][-1] < hist["loss"][0]
    assert model.predict(x[:5]).shape == (5, 3) and len(model.trainable_weights) == 4
    with pytest.raises(NotImplementedError, match="argument class_weight, validation_split is not supported"):
        model.fit(x, y, validation_split=0.2, class_weight={0: 1.0}, verbose=0)
    model.add(keras.layers.Activation("softmax"))
    np.testing.assert_allclose(model.predict(x[:5]).sum(1), 1.0, rtol=1e-6)


def test_layers_without_an_eager_form_are_refused():
    with pytest.raises(NotImplementedError, match="Conv2D called on tensors"):
        keras.layers.Conv2D(2, 3)(tf.ones((1, 5, 5, 1)))


class Sampling(keras.layers.Layer):
    """Uses (z_mean, z_log_var) to sample z, the vector encoding a digit."""

    def call(self, inputs):
        z_mean, z_log_var = inputs
        batch = tf.shape(z_mean)[0]
        dim = tf.shape(z_mean)[1]
        epsilon = tf.keras.backend.random_normal(shape=(batch, dim))
        return z_mean + tf.exp(0.5 * z_log_var) * epsilon


class Encoder(keras.layers.Layer):
    """Maps MNIST digits to a triplet (z_mean, z_log_var, z)."""

    def __init__(self, latent_dim=32, intermediate_dim=64, name="encoder", **kwargs):
        super().__init__(name=name, **kwargs)
        self.dense_proj = keras.layers.Dense(intermediate_dim, activation="relu")
        self.dense_mean = keras.layers.Dense(latent_dim)
        self.dense_log_var = keras.layers.Dense(latent_dim)
        self.sampling = Sampling()

    def call(self, inputs):
        x = self.dense_proj(inputs)
        z_mean = self.dense_mean(x)
        z_log_var = self.dense_log_var(x)
        z = self.sampling((z_mean, z_log_var))
        return z_mean, z_log_var, z


class Decoder(keras.layers.Layer):
    """Converts z, the encoded digit vector, back into a readable digit."""

    def __init__(self, original_dim, intermediate_dim=64, name="decoder", **kwargs):
        super().__init__(name=name, **kwargs)
        self.dense_proj = keras.layers.Dense(intermediate_dim, activation="relu")
        self.dense_output = keras.layers.Dense(original_dim, activation="sigmoid")

    def call(self, inputs):
        x = self.dense_proj(inputs)
        return self.dense_output(x)


class VariationalAutoEncoder(keras.Model):
    """Combines the encoder and decoder into an end-to-end model for training."""

    def __init__(self, original_dim, intermediate_dim=64, latent_dim=32, name="autoencoder", **kwargs):
        super().__init__(name=name, **kwargs)
        self.original_dim = original_dim
        self.encoder = Encoder(latent_dim=latent_dim, intermediate_dim=intermediate_dim)
        self.decoder = Decoder(original_dim, intermediate_dim=intermediate_dim)

    def call(self, inputs):
        z_mean, z_log_var, z = self.encoder(inputs)
        reconstructed = self.decoder(z)
        # Add KL divergence regularization loss.
        kl_loss = -0.5 * tf.reduce_mean(z_log_var - tf.square(z_mean) - tf.exp(z_log_var) + 1)
        self.add_loss(kl_loss)
        return reconstructed


def test_guide_vae_end_to_end():
    original_dim = 49  # 7x7 "digits" (the guide: 784)
    rng = np.random.default_rng(5)
    x_train = (rng.random((256, original_dim)) < 0.3).astype("float32")
    tf.random.set_seed(11)
    vae = VariationalAutoEncoder(original_dim, 16, 4)
    optimizer = tf.keras.optimizers.Adam(learning_rate=1e-2)
    mse_loss_fn = tf.keras.losses.MeanSquaredError()
    loss_metric = tf.keras.metrics.Mean()
    train_dataset = tf.data.Dataset.from_tensor_slices(x_train)
    train_dataset = train_dataset.shuffle(buffer_size=1024).batch(64)
    epochs = 3
    firsts = []
    for epoch in range(epochs):
        for step, x_batch_train in enumerate(train_dataset):
            with tf.GradientTape() as tape:
                reconstructed = vae(x_batch_train)
                # Compute reconstruction loss
                loss = mse_loss_fn(x_batch_train, reconstructed)
                loss += sum(vae.losses)  # Add KLD regularization loss
            grads = tape.gradient(loss, vae.trainable_weights)
            optimizer.apply_gradients(zip(grads, vae.trainable_weights))
            loss_metric(loss)
            if step == 0:
                firsts.append(float(loss_metric.result()))
    assert len(vae.trainable_weights) == 10 and len(vae.losses) == 1
    assert float(loss_metric.result()) < firsts[0]

    vae = VariationalAutoEncoder(original_dim, 16, 4)
    vae.compile(tf.keras.optimizers.Adam(learning_rate=1e-2), loss=tf.keras.losses.MeanSquaredError())
    hist = vae.fit(x_train, x_train, epochs=3, batch_size=64, verbose=0).history
    assert hist["loss"][-1] < hist["loss"][0]


def test_functional_guide_custom_layer():
    """The functional API guide's "Extend the API using custom layers": a
    custom layer called on tf.keras.Input tensors; the model runs eagerly."""
    class CustomDense(keras.layers.Layer):
        def __init__(self, units=32):
            super().__init__()
            self.units = units

        def build(self, input_shape):
            self.w = self.add_weight(shape=(input_shape[-1], self.units), initializer="random_normal",
                                     trainable=True)
            self.b = self.add_weight(shape=(self.units,), initializer="random_normal", trainable=True)

        def call(self, inputs):
            return tf.matmul(inputs, self.w) + self.b

    inputs = keras.Input((4,))
    outputs = CustomDense(10)(inputs)
    model = keras.Model(inputs, outputs)
    assert outputs.shape == (None, 10) and len(model.trainable_weights) == 2

    x, y = _data(64)
    tf.random.set_seed(6)
    inp = keras.Input((6,))
    h = keras.layers.Dense(8, activation="relu")(inp)
    c = CustomDense(8)(h)
    merged = keras.layers.concatenate([keras.layers.add([h, c]), inp])
    out = keras.layers.Dense(3)(merged)
    model = keras.Model(inp, out)
    assert len(model.trainable_weights) == 6
    model.compile(keras.optimizers.Adam(0.01), keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    hist = model.fit(x, y, batch_size=16, epochs=3, verbose=0).history
    assert hist["loss"][-1] < hist["loss"][0]
    logits = model(x[:4])
    w = [v.numpy() for v in model.trainable_weights]  # Dense, CustomDense, Dense in call order
    h_np = np.maximum(x[:4] @ w[0] + w[1], 0)
    expect = np.concatenate([h_np + h_np @ w[2] + w[3], x[:4]], 1) @ w[4] + w[5]
    np.testing.assert_allclose(logits.numpy(), expect, rtol=1e-5, atol=1e-6)
