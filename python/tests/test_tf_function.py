"""tf.function (issue 32), as TensorFlow's "Better performance with
tf.function" guide writes it (only the import changed): Strata runs the
decorated function eagerly; input_signature is checked as TF checks it,
jit_compile / reduce_retracing and the other options are accepted, and it
decorates functions and methods, with and without arguments."""
import numpy as np
import pytest

import strata as tf


def test_guide_basics():
    @tf.function  # The decorator converts `add` into a `PolymorphicFunction`.
    def add(a, b):
        return a + b

    np.testing.assert_array_equal(add(tf.ones([2, 2]), tf.ones([2, 2])).numpy(), 2 * np.ones((2, 2)))
    v = tf.Variable(1.0)
    with tf.GradientTape() as tape:
        result = add(v, 1.0)
    assert float(tape.gradient(result, v)) == 1.0

    @tf.function
    def dense_layer(x, w, b):
        return add(tf.matmul(x, w), b)

    assert dense_layer(tf.ones([3, 2]), tf.ones([2, 2]), tf.ones([2])).shape == (3, 2)

    def inner_function(x, y, b):
        x = tf.matmul(x, y)
        x = x + b
        return x

    outer_function = tf.function(inner_function)
    x1 = tf.constant([[1.0, 2.0]])
    y1 = tf.constant([[2.0], [3.0]])
    b1 = tf.constant(4.0)
    assert float(outer_function(x1, y1, b1)[0, 0]) == 12.0
    assert outer_function.python_function is inner_function
    assert outer_function.get_concrete_function(x1, y1, b1)(x1, y1, b1).shape == (1, 1)


def test_input_signature_and_options():
    @tf.function(input_signature=(tf.TensorSpec(shape=[None], dtype=tf.int32),))
    def next_collatz(x):
        return tf.where(x % 2 == 0, x // 2, 3 * x + 1)

    np.testing.assert_array_equal(next_collatz(tf.constant([1, 2])).numpy(), [4, 1])
    with pytest.raises(ValueError, match="input_signature"):
        next_collatz(tf.constant([[1, 2], [3, 4]]))
    with pytest.raises(TypeError, match="dtype float32"):
        next_collatz(tf.constant([1.0, 2.0]))

    @tf.function(jit_compile=True, reduce_retracing=True)
    def f(x):
        return x * 2

    assert float(f(tf.constant(2.0))) == 4.0
    with pytest.raises(TypeError, match="unexpected keyword argument 'jit'"):
        tf.function(jit=True)

    class Doubler:
        scale = 2.0

        @tf.function
        def __call__(self, x):
            return x * self.scale

    assert float(Doubler()(tf.constant(3.0))) == 6.0
