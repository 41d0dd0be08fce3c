"""A custom training loop with strategy.run over a distributed dataset, as
TensorFlow's tutorial writes it. Strata has no tf.GradientTape: the step
function, called once per replica on its slice of the global batch, calls
model.train_on_batch, which computes the gradients of the replica's examples
(loss scaled by the global batch, as tf.nn.compute_average_loss) and applies
the all-reduced update with the other replicas: fit's step, exactly.

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
    images, labels = inputs  # this replica's slice of the global batch
    # this replica's share of the global batch's mean loss and accuracy
    loss, acc = model.train_on_batch(images, labels)
    return loss, acc


for epoch in range(epochs):
    total_loss = total_acc = 0.0
    batches = 0
    for batch in train_dist_dataset:
        per_replica_loss, per_replica_acc = strategy.run(train_step, args=(batch,))
        total_loss += strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica_loss, axis=None)
        total_acc += strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica_acc, axis=None)
        batches += 1
    test_loss, test_acc = model.evaluate(x_test, y_test, verbose=0)
    print("Epoch {}, Loss: {:.4f}, Accuracy: {:.4f}, Test Loss: {:.4f}, Test Accuracy: {:.4f}".format(
        epoch + 1, total_loss / batches, total_acc / batches, test_loss, test_acc))
