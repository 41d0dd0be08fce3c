"""tf.GradientTape outside strategy.run (issue 32): a plain eager custom
loop, as TensorFlow's "Custom training: walkthrough" tutorial and the
"Writing a training loop from scratch" guide write it (only the import
changed; synthetic data in place of the downloads, fewer epochs). The model
call, tape.gradient and optimizer.apply_gradients run in Strata's engine
(strata/_eager.py); the loop gives fit's weights within 1e-6 on the same
batches, one device and MirroredStrategy x2; gradients read as tensors
(.numpy(), tf.linalg.global_norm, tf.clip_by_global_norm) and changed ones
are applied as given. The tape also differentiates tf ops on tf.Variables
and watched tensors (the autodiff guide's first examples)."""
import numpy as np
import pytest

import strata as tf


@pytest.fixture(autouse=True)
def _restore_seed():
    from strata import _util
    saved = _util._state["seed"]
    yield
    _util._state["seed"] = saved


def _iris_like(n=128, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, 4)).astype(np.float32) + 3.0
    y = (x[:, 0] + 0.5 * x[:, 2] > 4.5).astype(np.int32) + (x[:, 3] > 3.5).astype(np.int32)
    return x, y


def _walkthrough_model():
    return tf.keras.Sequential([
        tf.keras.layers.Dense(10, activation=tf.nn.relu, input_shape=(4,)),  # input shape required
        tf.keras.layers.Dense(10, activation=tf.nn.relu),
        tf.keras.layers.Dense(3)
    ])


def test_custom_training_walkthrough_matches_fit():
    x_train, y_train = _iris_like()
    batch_size = 32
    train_dataset = tf.data.Dataset.from_tensor_slices((x_train, y_train)).batch(batch_size)
    features, labels = next(iter(train_dataset))
    tf.random.set_seed(3)
    model = _walkthrough_model()
    predictions = model(features)
    assert predictions.shape == (32, 3)
    assert np.allclose(tf.reduce_sum(tf.nn.softmax(predictions[:5]), axis=1).numpy(), 1.0, atol=1e-6)

    loss_object = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)

    def loss(model, x, y, training):
        # training=training is needed only if there are layers with different
        # behavior during training versus inference (e.g. Dropout).
        y_ = model(x, training=training)
        return loss_object(y_true=y, y_pred=y_)

    l = loss(model, features, labels, training=False)
    assert np.isfinite(l.numpy())

    def grad(model, inputs, targets):
        with tf.GradientTape() as tape:
            loss_value = loss(model, inputs, targets, training=True)
        return loss_value, tape.gradient(loss_value, model.trainable_variables)

    optimizer = tf.keras.optimizers.SGD(learning_rate=0.01)
    loss_value, grads = grad(model, features, labels)
    assert [g.shape for g in grads] == [v.shape for v in model.trainable_variables]
    before = model.get_weights()
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
    after = model.get_weights()
    np.testing.assert_allclose(after[0], before[0] - 0.01 * grads[0].numpy(), atol=1e-6)
    assert loss(model, features, labels, training=True).numpy() < loss_value.numpy()

    train_loss_results, train_accuracy_results = [], []
    num_epochs = 3
    for epoch in range(num_epochs):
        epoch_loss_avg = tf.keras.metrics.Mean()
        epoch_accuracy = tf.keras.metrics.SparseCategoricalAccuracy()
        for x, y in train_dataset:
            loss_value, grads = grad(model, x, y)
            optimizer.apply_gradients(zip(grads, model.trainable_variables))
            epoch_loss_avg.update_state(loss_value)
            epoch_accuracy.update_state(y, model(x, training=True))
        train_loss_results.append(epoch_loss_avg.result())
        train_accuracy_results.append(epoch_accuracy.result())

    # the same steps with fit: one step on the first batch, then the epochs
    tf.random.set_seed(3)
    ref = _walkthrough_model()
    ref.compile(tf.keras.optimizers.SGD(learning_rate=0.01), loss_object, metrics=["accuracy"])
    ref.fit(x_train[:32], y_train[:32], batch_size=32, epochs=1, shuffle=False, verbose=0)
    ref.compile(tf.keras.optimizers.SGD(learning_rate=0.01), loss_object, metrics=["accuracy"])
    ref.fit(x_train, y_train, batch_size=batch_size, epochs=num_epochs, shuffle=False, verbose=0)
    for a, b in zip(model.get_weights(), ref.get_weights()):
        np.testing.assert_allclose(a, b, atol=1e-6, rtol=0)
    assert train_loss_results[-1] < train_loss_results[0]

    test_accuracy = tf.keras.metrics.Accuracy()
    logits = model(x_train, training=False)
    prediction = tf.math.argmax(logits, axis=1, output_type=tf.int64)
    test_accuracy(prediction, y_train)
    _, acc = ref.evaluate(x_train, y_train, verbose=0)
    np.testing.assert_allclose(test_accuracy.result().numpy(), acc, rtol=1e-6)


def _guide_model():
    inputs = tf.keras.Input(shape=(20,), name="digits")
    x1 = tf.keras.layers.Dense(16, activation="relu")(inputs)
    x2 = tf.keras.layers.Dense(16, activation="relu")(x1)
    outputs = tf.keras.layers.Dense(10, name="predictions")(x2)
    return tf.keras.Model(inputs=inputs, outputs=outputs)


def _digits(n=192, seed=1):
    rng = np.random.default_rng(seed)
    x = rng.random((n, 20), dtype=np.float32)
    return x, (x[:, :5].sum(1) * 2).astype(np.int64) % 10


@pytest.mark.parametrize("replicas", [1, 2])
def test_training_loop_from_scratch_matches_fit(replicas):
    """The guide's loop with @tf.function, Adam, a functional model; under MirroredStrategy x2 the model is made in the
    scope and the loop stays outside strategy.run (Strata splits each batch
    over the replicas as fit does)."""
    x_train, y_train = _digits()
    strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"]) if replicas == 2 else \
        tf.distribute.get_strategy()
    tf.random.set_seed(21)
    with strategy.scope():
        model = _guide_model()
        optimizer = tf.keras.optimizers.Adam(learning_rate=1e-3)
    loss_fn = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    train_acc_metric = tf.keras.metrics.SparseCategoricalAccuracy()
    batch_size = 64
    train_dataset = tf.data.Dataset.from_tensor_slices((x_train, y_train)).batch(batch_size)

    @tf.function
    def train_step(x, y):
        with tf.GradientTape() as tape:
            logits = model(x, training=True)
            loss_value = loss_fn(y, logits)
        grads = tape.gradient(loss_value, model.trainable_weights)
        optimizer.apply_gradients(zip(grads, model.trainable_weights))
        train_acc_metric.update_state(y, logits)
        return loss_value

    epochs = 2
    losses = []
    for epoch in range(epochs):
        total = 0.0
        for step, (x_batch_train, y_batch_train) in enumerate(train_dataset):
            total += float(train_step(x_batch_train, y_batch_train))
        losses.append(total / (step + 1))
        if epoch < epochs - 1:
            train_acc_metric.reset_state()

    tf.random.set_seed(21)
    with strategy.scope():
        ref = _guide_model()
        ref.compile(tf.keras.optimizers.Adam(learning_rate=1e-3), loss_fn, metrics=["accuracy"])
    hist = ref.fit(x_train, y_train, batch_size=batch_size, epochs=epochs, shuffle=False, verbose=0).history
    for a, b in zip(model.get_weights(), ref.get_weights()):
        np.testing.assert_allclose(a, b, atol=1e-6, rtol=0)
    np.testing.assert_allclose(losses, hist["loss"], rtol=1e-5)
    np.testing.assert_allclose(train_acc_metric.result().numpy(), hist["accuracy"][-1], rtol=1e-6)


def test_gradients_read_and_clipped():
    x, y = _digits(64)
    tf.random.set_seed(4)
    model = tf.keras.Sequential([tf.keras.layers.Dense(8, activation="relu", input_shape=(20,)),
                                 tf.keras.layers.Dense(10)])
    optimizer = tf.keras.optimizers.SGD(learning_rate=0.5)
    loss_fn = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    with tf.GradientTape() as tape:
        loss_value = loss_fn(y, model(x, training=True))
    grads = tape.gradient(loss_value, model.trainable_variables)
    norm = tf.linalg.global_norm(grads)
    assert float(norm) > 0 and all(isinstance(g, tf.Tensor) for g in grads)
    np.testing.assert_allclose(float(norm), np.sqrt(sum((g.numpy().astype(np.float64) ** 2).sum()
                                                        for g in grads)), rtol=1e-6)
    clipped, gn = tf.clip_by_global_norm(grads, float(norm) / 4)
    np.testing.assert_allclose(float(gn), float(norm), rtol=1e-7)
    np.testing.assert_allclose(float(tf.linalg.global_norm(clipped)), float(norm) / 4, rtol=1e-5)
    before = model.get_weights()
    optimizer.apply_gradients(zip(clipped, model.trainable_variables))
    for w0, w1, g in zip(before, model.get_weights(), clipped):
        np.testing.assert_allclose(w1, w0 - 0.5 * g.numpy(), atol=1e-6)
    # a numeric check of the engine's gradient: finite differences of the loss in float64
    w = model.get_weights()
    with tf.GradientTape() as tape:
        loss_value = loss_fn(y, model(x, training=True))
    g_bias = tape.gradient(loss_value, model.trainable_variables)[3].numpy()
    eps = 1e-2
    for j in (0, 7):
        vals = []
        for sgn in (1, -1):
            w2 = [a.copy() for a in w]
            w2[3][j] += sgn * eps
            model.set_weights(w2)
            vals.append(float(loss_fn(y, model(x))))
        np.testing.assert_allclose((vals[0] - vals[1]) / (2 * eps), g_bias[j], atol=2e-4)


def test_refusals_and_ordering():
    x, y = _digits(32)
    model = tf.keras.Sequential([tf.keras.layers.Dense(10, input_shape=(20,))])
    loss_fn = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    with tf.GradientTape() as tape:
        loss_value = loss_fn(y, model(x, training=True))
    alone = [g.numpy() for g in tape.gradient(loss_value, model.trainable_variables)]
    with tf.GradientTape() as tape:
        loss_value = loss_fn(y, model(x, training=True))
        model(x[:7], training=True)  # a second forward: the first call is run again for its backward
    again = tape.gradient(loss_value, model.trainable_variables)
    for a, b in zip(alone, again):
        np.testing.assert_array_equal(a, b.numpy())
    bn = tf.keras.Sequential([tf.keras.layers.BatchNormalization(input_shape=(20,)), tf.keras.layers.Dense(10)])
    with tf.GradientTape() as tape:
        loss_value = loss_fn(y, bn(x, training=True))
        bn(x[:7], training=True)
    with pytest.raises(NotImplementedError, match="BatchNormalization statistics twice"):
        tape.gradient(loss_value, bn.trainable_variables)
    with tf.GradientTape() as tape:
        loss_value = loss_fn(y, model(x, training=True))
    model.get_weights()  # another verb ends the model's run
    with pytest.raises(NotImplementedError, match="used by another verb"):
        tape.gradient(loss_value, model.trainable_variables)
    with tf.GradientTape() as tape:
        loss_value = loss_fn(y, model(x, training=True))
    grads = tape.gradient(loss_value, model.trainable_variables)
    with pytest.raises(NotImplementedError, match="all of a model's trainable variables"):
        tf.keras.optimizers.SGD().apply_gradients(zip(grads[:1], model.trainable_variables[:1]))
    with pytest.raises(RuntimeError, match="only be used to compute one set"):
        tape.gradient(loss_value, model.trainable_variables)
    model.compile("adam", loss_fn)
    with tf.GradientTape() as tape:
        loss_value = loss_fn(y, model(x, training=True))
    grads = tape.gradient(loss_value, model.trainable_variables)
    with pytest.raises(NotImplementedError, match="compiled with"):
        tf.keras.optimizers.SGD().apply_gradients(zip(grads, model.trainable_variables))
    model.optimizer.apply_gradients(zip(grads, model.trainable_variables))
    assert model.evaluate(x, y, verbose=0) > 0  # fit / evaluate still work after the loop


def test_autodiff_guide_variables_and_watch():
    x = tf.Variable(3.0)
    with tf.GradientTape() as tape:
        y = x ** 2
    assert float(tape.gradient(y, x)) == 6.0

    w = tf.Variable(tf.random.normal((3, 2)), name='w')
    b = tf.Variable(tf.zeros(2, dtype=tf.float32), name='b')
    xs = [[1., 2., 3.]]
    with tf.GradientTape(persistent=True) as tape:
        y = xs @ w + b
        loss = tf.reduce_mean(y ** 2)
    [dl_dw, dl_db] = tape.gradient(loss, [w, b])
    yv = np.array(xs, np.float32) @ w.numpy() + b.numpy()
    np.testing.assert_allclose(dl_db.numpy(), (2 * yv / 2).reshape(-1), rtol=1e-6)
    np.testing.assert_allclose(dl_dw.numpy(), np.array(xs).T @ (2 * yv / 2), rtol=1e-6)
    assert tape.gradient(loss, {'w': w, 'b': b})['b'].shape == (2,)

    x0 = tf.constant(3.0)
    with tf.GradientTape() as g:
        g.watch(x0)
        y = x0 * x0
    assert float(g.gradient(y, x0)) == 6.0

    layer_w = tf.Variable(np.ones((3, 2), np.float32))
    with tf.GradientTape() as tape:
        h = tf.nn.relu(tf.matmul(tf.constant([[1.0, -2.0, 3.0]]), layer_w) - 1.0)
        out = tf.reduce_sum(tf.nn.sigmoid(h) + tf.square(h))
    g = tape.gradient(out, layer_w).numpy()
    hv = 1.0  # relu(1 - 2 + 3 - 1) = 1 for both columns
    s = 1 / (1 + np.exp(-hv))
    np.testing.assert_allclose(g, np.array([[1.0], [-2.0], [3.0]]) * (s * (1 - s) + 2 * hv) * np.ones((1, 2)),
                               rtol=1e-6)
    with tf.GradientTape() as tape:
        y = tf.sort(layer_w, axis=0)
        z = tf.reduce_sum(y)
    with pytest.raises(NotImplementedError, match="does not differentiate"):
        tape.gradient(z, layer_w)
    opt = tf.keras.optimizers.SGD(learning_rate=0.1)
    opt.apply_gradients([(tf.constant(g), layer_w)])
    np.testing.assert_allclose(layer_w.numpy(), 1.0 - 0.1 * g, rtol=1e-6)


def test_dropout_under_mirrored_matches_fit():
    """Dropout's masks are keyed by (seed, step, layer, replica): under
    MirroredStrategy x2 the eager loop splits each batch as fit does, so a
    model with Dropout trained by the tape gets fit's weights too."""
    x, y = _digits(128)
    strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])

    def make():
        inputs = tf.keras.Input(shape=(20,))
        h = tf.keras.layers.Dropout(0.25)(tf.keras.layers.Dense(16, activation="relu")(inputs))
        return tf.keras.Model(inputs, tf.keras.layers.Dense(10)(h))
    loss_fn = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    tf.random.set_seed(2)
    with strategy.scope():
        model = make()
        optimizer = tf.keras.optimizers.SGD(0.1)
    for i in range(0, 128, 64):
        with tf.GradientTape() as tape:
            loss = loss_fn(y[i:i + 64], model(x[i:i + 64], training=True))
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
    tf.random.set_seed(2)
    with strategy.scope():
        ref = make()
    ref.compile(tf.keras.optimizers.SGD(0.1), loss_fn)
    ref.fit(x, y, batch_size=64, shuffle=False, verbose=0)
    for a, b in zip(model.get_weights(), ref.get_weights()):
        np.testing.assert_allclose(a, b, atol=1e-6, rtol=0)
    tf.random.set_seed(2)
    with strategy.scope():
        plain = make()
    plain.compile(tf.keras.optimizers.SGD(0.1), loss_fn)
    plain.fit(x, y, batch_size=64, shuffle=False, verbose=0, epochs=1)
    assert any(np.abs(a - b).max() > 1e-4 for a, b in zip(plain.get_weights(),
                                                          make().get_weights()))  # training moved them


def test_dropout_on_one_device_matches_fit():
    """One device (the default strategy): fit runs each batch as per-thread
    slices on a multi-core CPU (src/distribute/one_device.c) and Dropout's
    masks are keyed by (seed, step, layer, slice); the tape loop's model call
    runs the same slices on the same threads (src/distribute/custom_loop.c),
    so a model with Dropout trained by the tape gets fit's weights bytes;
    the C API's st_replica_compute_gradients (strategy.run +
    train_on_batch) does too."""
    x, y = _digits(192)

    def make():
        inputs = tf.keras.Input(shape=(20,))
        h = tf.keras.layers.Dropout(0.5)(tf.keras.layers.Dense(32, activation="relu")(inputs))
        return tf.keras.Model(inputs, tf.keras.layers.Dense(10)(h))
    loss_fn = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    tf.random.set_seed(9)
    model = make()
    optimizer = tf.keras.optimizers.SGD(0.1)
    for i in range(0, 192, 64):
        with tf.GradientTape() as tape:
            loss = loss_fn(y[i:i + 64], model(x[i:i + 64], training=True))
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
    tf.random.set_seed(9)
    ref = make()
    ref.compile(tf.keras.optimizers.SGD(0.1), loss_fn)
    ref.fit(x, y, batch_size=64, shuffle=False, verbose=0)
    for a, b in zip(model.get_weights(), ref.get_weights()):
        np.testing.assert_allclose(a, b, atol=1e-6, rtol=0)
    # the masks matter: without them (inference calls) the step is another one
    tf.random.set_seed(9)
    plain = make()
    plain.compile(tf.keras.optimizers.SGD(0.1), loss_fn)
    plain.train_on_batch(x[:64], y[:64])
    tf.random.set_seed(9)
    masked = make()
    opt2 = tf.keras.optimizers.SGD(0.1)
    with tf.GradientTape() as tape:
        loss = loss_fn(y[:64], masked(x[:64], training=False))
    opt2.apply_gradients(zip(tape.gradient(loss, masked.trainable_variables), masked.trainable_variables))
    assert any(np.abs(a - b).max() > 1e-4 for a, b in zip(plain.get_weights(), masked.get_weights()))


def test_gradient_through_two_models():
    """The generator's step of the DCGAN tutorial, one discriminator call:
    the discriminator's backward gives the gradient with respect to its input
    (the generator's output) and the generator's backward continues from it;
    checked against finite differences. Both models train by their own
    optimizers; the discriminator's step calls it twice (the earlier call is
    run again for its backward, the two calls' gradients summed)."""
    tf.random.set_seed(3)
    generator = tf.keras.Sequential([tf.keras.layers.Dense(6, activation="tanh", input_shape=(3,)),
                                     tf.keras.layers.Dense(4)])
    discriminator = tf.keras.Sequential([tf.keras.layers.Dense(5, activation="relu", input_shape=(4,)),
                                         tf.keras.layers.Dense(1)])
    noise = np.random.default_rng(0).normal(size=(8, 3)).astype(np.float32)
    cross_entropy = tf.keras.losses.BinaryCrossentropy(from_logits=True)

    def generator_loss(fake_output):
        return cross_entropy(tf.ones_like(fake_output), fake_output)
    with tf.GradientTape() as gen_tape:
        generated_images = generator(noise, training=True)
        fake_output = discriminator(generated_images, training=True)
        gen_loss = generator_loss(fake_output)
    gradients_of_generator = gen_tape.gradient(gen_loss, generator.trainable_variables)
    w = generator.get_weights()

    def loss_at(bias):
        generator.set_weights(w[:3] + [bias])
        return float(generator_loss(discriminator(generator(noise))))
    for j in range(4):
        e = np.zeros(4, np.float32)
        e[j] = 1e-3
        np.testing.assert_allclose((loss_at(w[3] + e) - loss_at(w[3] - e)) / 2e-3,
                                   gradients_of_generator[3].numpy()[j], atol=5e-5)
    generator.set_weights(w)
    generator_optimizer = tf.keras.optimizers.Adam(1e-4)
    discriminator_optimizer = tf.keras.optimizers.Adam(1e-4)
    with tf.GradientTape() as gen_tape, tf.GradientTape() as disc_tape:
        fake_output = discriminator(generator(noise, training=True), training=True)
        gen_loss = generator_loss(fake_output)
        disc_loss = cross_entropy(tf.zeros_like(fake_output), fake_output)
    g_gen = gen_tape.gradient(gen_loss, generator.trainable_variables)
    g_disc = disc_tape.gradient(disc_loss, discriminator.trainable_variables)  # a second backward: fine
    d_before = discriminator.get_weights()
    np.testing.assert_allclose(g_gen[3].numpy(), gradients_of_generator[3].numpy(), rtol=1e-6)
    generator_optimizer.apply_gradients(zip(g_gen, generator.trainable_variables))
    discriminator_optimizer.apply_gradients(zip(g_disc, discriminator.trainable_variables))
    assert all((a != b).any() for a, b in zip(w, generator.get_weights()))
    assert all((a != b).any() for a, b in zip(d_before, discriminator.get_weights()))
    images = noise[:, :1] * np.ones((1, 4), np.float32)

    def discriminator_loss(real_output, fake_output):
        real_loss = cross_entropy(tf.ones_like(real_output), real_output)
        fake_loss = cross_entropy(tf.zeros_like(fake_output), fake_output)
        return real_loss + fake_loss
    with tf.GradientTape() as disc_tape:  # the tutorial's step: the discriminator called twice
        real_output = discriminator(images, training=True)
        fake_output = discriminator(generator(noise, training=True), training=True)
        disc_loss = discriminator_loss(real_output, fake_output)
    g_disc = disc_tape.gradient(disc_loss, discriminator.trainable_variables)
    wd, fake = discriminator.get_weights(), generator(noise)

    def disc_loss_at(kernel):  # the first layer's: its gradient depends on each call's activations
        discriminator.set_weights([kernel] + wd[1:])
        return float(discriminator_loss(discriminator(images), discriminator(fake)))
    for i, j in ((0, 0), (2, 3), (3, 1)):
        e = np.zeros_like(wd[0])
        e[i, j] = 1e-2
        np.testing.assert_allclose((disc_loss_at(wd[0] + e) - disc_loss_at(wd[0] - e)) / 2e-2,
                                   g_disc[0].numpy()[i, j], rtol=5e-3, atol=1e-4)


def test_one_runner_thread_per_model_ends_with_it():
    """The eager loop's engine runs go to one thread per model (_eager.py's
    _Runner), kept across steps and ended when the model is collected."""
    import gc
    import threading
    import time
    x, y = _digits(64)
    model = tf.keras.Sequential([tf.keras.layers.Dense(10, input_shape=(20,))], name="runner_probe")
    opt = tf.keras.optimizers.SGD(0.1)
    loss_fn = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    for i in range(0, 64, 16):
        with tf.GradientTape() as tape:
            loss = loss_fn(y[i:i + 16], model(x[i:i + 16], training=True))
        opt.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))

    def runners():
        return [t for t in threading.enumerate() if t.name == "strata-eager-runner_probe"]
    assert len(runners()) == 1
    del model, opt, tape, loss
    gc.collect()
    for _ in range(100):
        if not runners():
            break
        time.sleep(0.02)
    assert runners() == []
