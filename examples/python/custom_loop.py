"""A custom training loop with strategy.run over a distributed dataset.
Strata has no tf.GradientTape: the step function calls
model.train_on_batch, which computes the gradients of the global batch on
every replica (each takes its share) and applies the all-reduced update.

    PYTHONPATH=build/python python3 examples/python/custom_loop.py [N_EXAMPLES] [EPOCHS]
"""
import sys

import strata as tf
import numpy as np

n = int(sys.argv[1]) if len(sys.argv) > 1 else 60000
epochs = int(sys.argv[2]) if len(sys.argv) > 2 else 2

(x_train, y_train), (x_test, y_test) = tf.keras.datasets.fashion_mnist.load_data()
x_test, y_test = x_test[:max(1000, n // 6)], y_test[:max(1000, n // 6)]  # all 10,000 for the full set
x_train = (x_train[:n] / np.float32(255)).astype("float32")[..., None]
y_train = y_train[:n]
x_test = (x_test / np.float32(255)).astype("float32")[..., None]

strategy = tf.distribute.MirroredStrategy()
GLOBAL_BATCH_SIZE = 128 * strategy.num_replicas_in_sync
train_dataset = tf.data.Dataset.from_tensor_slices((x_train, y_train)).shuffle(len(x_train)).batch(GLOBAL_BATCH_SIZE)
train_dist_dataset = strategy.experimental_distribute_dataset(train_dataset)

with strategy.scope():
    model = tf.keras.Sequential([
        tf.keras.layers.Conv2D(16, 3, activation="relu", input_shape=(28, 28, 1)),
        tf.keras.layers.MaxPooling2D(),
        tf.keras.layers.Flatten(),
        tf.keras.layers.Dense(64, activation="relu"),
        tf.keras.layers.Dense(10),
    ])
    model.compile(optimizer=tf.keras.optimizers.Adam(),
                  loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=["accuracy"])


def train_step(inputs):
    images, labels = inputs
    loss, acc = model.train_on_batch(images, labels)
    return loss * len(images), acc * len(images), len(images)


for epoch in range(epochs):
    total_loss = total_acc = seen = 0.0
    for batch in train_dist_dataset:
        loss_sum, acc_sum, count = strategy.run(train_step, args=(batch,))
        total_loss += strategy.reduce(tf.distribute.ReduceOp.SUM, loss_sum, axis=None)
        total_acc += acc_sum
        seen += count
    test_loss, test_acc = model.evaluate(x_test, y_test, verbose=0)
    print("Epoch {}, Loss: {:.4f}, Accuracy: {:.4f}, Test Loss: {:.4f}, Test Accuracy: {:.4f}".format(
        epoch + 1, total_loss / seen, total_acc / seen, test_loss, test_acc))
