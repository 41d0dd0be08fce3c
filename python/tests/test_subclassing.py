"""Subclassed models (issue 32, point 2), as TensorFlow's "quickstart for
experts" writes its model (only the import changed; fit in place of its
GradientTape loop: test_gradient_tape.py runs it): call() is traced once into the
engine's graph, so the model trains as the functional model of the same
layers does (the same weights bytes), saves and loads; a model holding custom
layers runs eagerly instead (test_custom_layers.py); tf.* ops inside call() on
Strata's layers only are refused naming what to do instead."""
import numpy as np
import pytest

import strata as tf
from strata.keras import Model
from strata.keras.layers import Conv2D, Dense, Dropout, Flatten


@pytest.fixture(autouse=True)
def _restore_seed(tmp_path, monkeypatch):
    from strata import _util
    saved = _util._state["seed"]
    monkeypatch.chdir(tmp_path)
    yield
    _util._state["seed"] = saved


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


def _data():
    rng = np.random.default_rng(0)
    x = rng.random((256, 12, 12), dtype=np.float32)
    y = (x[:, :6].mean((1, 2)) * 20).astype(np.int32) % 10
    return x[..., tf.newaxis].astype("float32"), y


def test_quickstart_for_experts_model_trains_as_functional():
    x_train, y_train = _data()
    train_ds = tf.data.Dataset.from_tensor_slices((x_train, y_train)).batch(32)
    tf.random.set_seed(5)
    model = MyModel()
    assert model.name == "my_model" and not model.built
    loss_object = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    model.compile(optimizer=tf.keras.optimizers.Adam(), loss=loss_object, metrics=["accuracy"])
    hist = model.fit(train_ds, epochs=2, verbose=0).history
    assert isinstance(model, MyModel) and [type(l).__name__ for l in model.layers][1:] == [
        "Conv2D", "Flatten", "Dense", "Dense"]

    tf.random.set_seed(5)
    inputs = tf.keras.Input(shape=(12, 12, 1))
    h = Dense(32, activation='relu')(Flatten()(Conv2D(8, 3, activation='relu')(inputs)))
    ref = tf.keras.Model(inputs, Dense(10)(h))
    ref.compile(optimizer=tf.keras.optimizers.Adam(), loss=loss_object, metrics=["accuracy"])
    assert ref.fit(train_ds, epochs=2, verbose=0).history == hist
    assert all((a == b).all() for a, b in zip(model.get_weights(), ref.get_weights()))

    predictions = model(x_train[:4], training=False)
    assert isinstance(predictions, tf.Tensor) and predictions.shape == (4, 10)
    test_loss = tf.keras.metrics.Mean(name='test_loss')
    test_loss(loss_object(y_train[:4], predictions))
    assert np.isfinite(test_loss.result().numpy())
    with tf.GradientTape() as tape:  # the experts' tape loop, unwrapped (test_eager_tape.py: fit's bytes)
        loss = loss_object(y_train[:4], model(x_train[:4], training=True))
    grads = tape.gradient(loss, model.trainable_variables)
    before = model.get_weights()
    model.optimizer.apply_gradients(zip(grads, model.trainable_variables))
    assert all((a != b).any() for a, b in zip(before, model.get_weights()))

    model.save("my_model.keras")
    back = tf.keras.models.load_model("my_model.keras")  # a functional model of the same graph
    assert back.evaluate(x_train, y_train, verbose=0) == model.evaluate(x_train, y_train, verbose=0)


def test_training_argument_build_and_strategy():
    class WithDropout(Model):
        def __init__(self, **kwargs):
            super().__init__(**kwargs)
            self.d1 = Dense(16, activation="relu")
            self.drop = Dropout(0.5)
            self.d2 = Dense(3)

        def call(self, inputs, training=None):
            x = self.d1(inputs)
            if training:
                x = self.drop(x)
            return self.d2(x)

    strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    with strategy.scope():
        m = WithDropout(name="dropper")
    with pytest.raises(ValueError, match="not yet been built"):
        m.summary()
    m.build((None, 5))
    assert m.built and m.name == "dropper" and "dropout" in [l.name for l in m.layers]
    assert m.distribute_strategy is strategy
    m.compile("sgd", tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    rng = np.random.default_rng(1)
    m.fit(rng.random((64, 5), dtype=np.float32), rng.integers(0, 3, 64), batch_size=16, verbose=0)
    a = m.predict(np.ones((2, 5), np.float32), verbose=0)
    np.testing.assert_array_equal(a, m.predict(np.ones((2, 5), np.float32), verbose=0))  # no dropout


def test_refusals_name_the_way_out():
    class Linear(tf.keras.layers.Layer):
        def __init__(self, units=32):
            super().__init__()
            self.units = units

        def build(self, input_shape):
            self.w = self.add_weight(shape=(input_shape[-1], self.units), initializer="random_normal",
                                     trainable=True)

        def call(self, inputs):
            return tf.matmul(inputs, self.w)

    class UsesLinear(Model):
        def __init__(self):
            super().__init__()
            self.linear = Linear(3)

        def call(self, x):
            return self.linear(x)

    class UsesOps(Model):
        def __init__(self):
            super().__init__()
            self.d = Dense(3)

        def call(self, x):
            return tf.nn.relu(self.d(x))

    assert UsesLinear().predict(np.zeros((2, 4), np.float32)).shape == (2, 3)  # eagerly (test_custom_layers.py)
    assert Linear(2)(tf.keras.Input(shape=(4,))).shape == (None, 2)  # recorded: its Model runs eagerly
    with pytest.raises(NotImplementedError, match="UsesOps.call: Strata traces call"):
        UsesOps().predict(np.zeros((2, 4), np.float32))
    with pytest.raises(ValueError, match="give inputs and outputs"):
        tf.keras.Model()
