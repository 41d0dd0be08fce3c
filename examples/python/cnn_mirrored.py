"""Fashion-MNIST CNN under MirroredStrategy with callbacks, evaluate and
predict: TensorFlow code, run on Strata with `import strata as tf`.

    PYTHONPATH=build/python python3 examples/python/cnn_mirrored.py [N_EXAMPLES] [EPOCHS]
"""
import os
import sys
import tempfile

import strata as tf
import numpy as np

n = int(sys.argv[1]) if len(sys.argv) > 1 else 60000
epochs = int(sys.argv[2]) if len(sys.argv) > 2 else 3

(x_train, y_train), (x_test, y_test) = tf.keras.datasets.fashion_mnist.load_data()
x_test, y_test = x_test[:max(1000, n // 6)], y_test[:max(1000, n // 6)]  # all 10,000 for the full set
x_train = x_train[:n].reshape(-1, 28, 28, 1).astype("float32") / 255.0
y_train = y_train[:n]
x_test = x_test.reshape(-1, 28, 28, 1).astype("float32") / 255.0

strategy = tf.distribute.MirroredStrategy()
print("Number of devices: {}".format(strategy.num_replicas_in_sync))
BATCH_SIZE = 64 * strategy.num_replicas_in_sync

with strategy.scope():
    model = tf.keras.Sequential([
        tf.keras.layers.Conv2D(32, 3, activation="relu", input_shape=(28, 28, 1)),
        tf.keras.layers.MaxPooling2D(),
        tf.keras.layers.Conv2D(64, 3, activation="relu"),
        tf.keras.layers.MaxPooling2D(),
        tf.keras.layers.Flatten(),
        tf.keras.layers.Dropout(0.2),
        tf.keras.layers.Dense(128, activation="relu"),
        tf.keras.layers.Dense(10),
    ])
    model.compile(loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  optimizer=tf.keras.optimizers.Adam(),
                  metrics=["accuracy"])
model.summary()


def decay(epoch):
    return 1e-3 if epoch < 3 else 1e-4


class PrintLR(tf.keras.callbacks.Callback):
    def on_epoch_end(self, epoch, logs=None):
        print("\nLearning rate for epoch {} is {}".format(epoch + 1, model.optimizer.learning_rate))


out = tempfile.mkdtemp(prefix="strata-example-")
callbacks = [
    tf.keras.callbacks.TensorBoard(log_dir=os.path.join(out, "logs")),
    tf.keras.callbacks.ModelCheckpoint(filepath=os.path.join(out, "ckpt_{epoch}.weights.h5")),
    tf.keras.callbacks.LearningRateScheduler(decay),
    tf.keras.callbacks.EarlyStopping(monitor="val_loss", patience=2),
    PrintLR(),
]
history = model.fit(x_train, y_train, batch_size=BATCH_SIZE, epochs=epochs, validation_split=0.1,
                    callbacks=callbacks, verbose=2)
eval_loss, eval_acc = model.evaluate(x_test, y_test, verbose=0)
print("Eval loss: {:.4f}, Eval accuracy: {:.4f}".format(eval_loss, eval_acc))
pred = model.predict(x_test[:8], verbose=0)
print("predicted classes:", np.argmax(pred, axis=1), "true:", y_test[:8])
print("history keys:", sorted(history.history), "checkpoints in", out)
