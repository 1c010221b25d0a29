"""A TensorFlow MultiWorkerMirroredStrategy job for `dgt-run --distribution tensorflow`.

Reads the cluster from TF_CONFIG (as set by dgt-run), trains a one-layer Keras model (2 inputs, 1
output, zero-initialised) with SGD for STEPS steps, global batch GLOBAL_BATCH, each worker feeding
its own examples (worker k, step s: the rows of examples(k, s)), and prints one JSON line: its
TF_CONFIG, the number of replicas in sync, the weights and their float32 bytes (hex).

The data are small integers and the learning rate a power of two, so every value of the training
is exact in float32: the result does not depend on the order of the all-reduce, and the test
compares it exactly with the same steps computed in rational numbers. A worker training alone
(a cluster that did not form) would see only its own examples and end elsewhere.

With "--solo" it prints each step's rows (both workers') as JSON instead, for the test's own
computation; nothing of TensorFlow is imported then.
"""
import json
import os
import sys

STEPS = 3
GLOBAL_BATCH = 4
LEARNING_RATE = 0.125


def examples(worker, step):
    """The (x, y) rows worker `worker` feeds at `step`: GLOBAL_BATCH / 2 rows of 2 features."""
    rows = []
    for i in range(GLOBAL_BATCH // 2):
        x = [((worker + step + i) % 3) - 1, ((2 * worker + step + 2 * i) % 3) - 1]
        y = (worker + 2 * step + i) % 4 - 1
        rows.append((x, y))
    return rows


if len(sys.argv) > 1 and sys.argv[1] == "--solo":
    # Each step's global batch: both workers' rows.
    print(json.dumps({"steps": STEPS, "lr": LEARNING_RATE,
                      "batches": [[row for w in range(2) for row in examples(w, s)]
                                  for s in range(STEPS)]}))
    sys.exit(0)

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
import keras  # noqa: E402

strategy = tf.distribute.MultiWorkerMirroredStrategy()


def dataset_fn(context):
    per_replica = context.get_per_replica_batch_size(GLOBAL_BATCH)
    rows = [r for s in range(STEPS) for r in examples(context.input_pipeline_id, s)]
    xs = np.array([x for x, _ in rows], dtype=np.float32)
    ys = np.array([[y] for _, y in rows], dtype=np.float32)
    return tf.data.Dataset.from_tensor_slices((xs, ys)).batch(per_replica)


with strategy.scope():
    model = keras.Sequential([
        keras.Input((2,)),
        keras.layers.Dense(1, kernel_initializer="zeros", bias_initializer="zeros"),
    ])
    optimizer = keras.optimizers.SGD(learning_rate=LEARNING_RATE)
    optimizer.build(model.trainable_variables)


def replica_step(x, y):
    with tf.GradientTape() as tape:
        # Mean squared error over the global batch (Keras' "mse" per example, averaged over all
        # workers' examples): the optimizer sums the replicas' gradients.
        per_example = tf.reduce_mean(tf.square(model(x, training=True) - y), axis=-1)
        loss = tf.nn.compute_average_loss(per_example, global_batch_size=GLOBAL_BATCH)
    grads = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(grads, model.trainable_variables))


@tf.function
def train_step(batch):
    strategy.run(replica_step, args=batch)


# Keras 3's fit() does not take a dataset distributed from a function (each worker's own
# examples), so the steps are the custom loop of TensorFlow's multi-worker guide.
batches = iter(strategy.distribute_datasets_from_function(dataset_fn))
for _ in range(STEPS):
    train_step(next(batches))
weights = model.get_weights()
print(json.dumps({
    "rank": int(os.environ["RANK"]),
    "tf_config": json.loads(os.environ["TF_CONFIG"]),
    "replicas": strategy.num_replicas_in_sync,
    "weights": [w.astype(np.float32).ravel().tolist() for w in weights],
    "raw": b"".join(w.astype("<f4").tobytes() for w in weights).hex(),
}), flush=True)
