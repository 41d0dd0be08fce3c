"""tf.keras.mixed_precision (issue 32, point 10), as TensorFlow's "Mixed
precision" guide writes it (only the import changed, synthetic data): the
mixed policies are accepted with one warning and compute in float32, so the
model trains to the same weights as under 'float32'; tf.config's logical
devices."""
import warnings

import numpy as np
import pytest

import strata as tf
from strata import keras
from strata.keras import layers
from strata.keras import mixed_precision


def _build_and_fit(x_train, y_train):
    tf.random.set_seed(8)
    inputs = keras.Input(shape=(784,), name='digits')
    x = layers.Dense(64, activation='relu', name='dense_1')(inputs)
    x = layers.Dense(64, activation='relu', name='dense_2')(x)
    x = layers.Dense(10, name='dense_logits')(x)
    outputs = layers.Activation('softmax', dtype='float32', name='predictions')(x)
    model = keras.Model(inputs=inputs, outputs=outputs)
    model.compile(loss='sparse_categorical_crossentropy', optimizer=keras.optimizers.RMSprop(),
                  metrics=['accuracy'])
    history = model.fit(x_train, y_train, batch_size=64, epochs=2, validation_split=0.2, verbose=0)
    return model, history


def test_mixed_precision_guide():
    from strata import _util
    saved = _util._state["seed"]
    rng = np.random.default_rng(1)
    x_train = rng.random((512, 784), dtype=np.float32)
    y_train = rng.integers(0, 10, 512)
    ref, ref_hist = _build_and_fit(x_train, y_train)
    mixed_precision._state["warned"] = False
    with pytest.warns(RuntimeWarning, match="float32 only"):
        policy = mixed_precision.Policy('mixed_float16')
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # once only
        mixed_precision.set_global_policy(policy)
        assert policy.compute_dtype == 'float32' and policy.variable_dtype == 'float32'
        assert mixed_precision.global_policy().name == 'mixed_float16'
        model, history = _build_and_fit(x_train, y_train)
        layers.Dense(3, dtype=tf.float32)
        layers.Dense(3, dtype='mixed_float16')
    assert history.history == ref_hist.history
    assert all((a == b).all() for a, b in zip(model.get_weights(), ref.get_weights()))
    opt = keras.optimizers.Adam()
    assert mixed_precision.LossScaleOptimizer(opt) is opt
    with pytest.raises(ValueError, match="float16"):
        mixed_precision.set_global_policy('float16')
    with pytest.raises(NotImplementedError, match="float32 only"):
        layers.Dense(3, dtype='float64')
    mixed_precision.set_global_policy('float32')
    _util._state["seed"] = saved


def test_config_devices():
    assert [d.device_type for d in tf.config.list_logical_devices('CPU')] == ['CPU']
    assert tf.config.list_logical_devices('GPU') == []
    cpus = tf.config.list_physical_devices('CPU')
    with pytest.raises(NotImplementedError, match="MirroredStrategy"):
        tf.config.set_logical_device_configuration(cpus[0], [tf.config.LogicalDeviceConfiguration()] * 2)
