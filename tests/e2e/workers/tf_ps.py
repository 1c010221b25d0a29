"""A TensorFlow ParameterServerStrategy job for `dgt-run --distribution tensorflow
--parameter-server-count 1 --tf-chief`: TF_CONFIG says which task this process is.

The ps and the workers start a TensorFlow server and serve until the chief is done: the chief
writes DONE_DIR/done at its end, and they exit 0 once that file exists (at most 120 s). (A real
job would have its launcher stop them; here every node shares this machine's file system.)

The chief (the coordinator) keeps a linear model's variables (2 weights and a bias, zero) on the
ps and schedules STEPS training steps on the workers through a ClusterCoordinator, one at a
time (each joined before the next), so the updates apply in order: step s is full-batch SGD on
the mean squared error over batch(s). It prints one JSON line with its TF_CONFIG, the devices of
the variables and their final values. The data are small integers
and the learning rate a power of two, so every value is exact in float32 and the test compares
it exactly with the same steps in rational numbers. Keras 3 has no ParameterServerStrategy
support, hence plain variables.

With "--solo" it prints the batches as JSON instead (nothing of TensorFlow is imported).

Usage: tf_ps.py DONE_DIR | tf_ps.py --solo
"""
import json
import os
import sys
import time

STEPS = 3
LEARNING_RATE = 0.125


def batch(step):
    """The (x, y) rows of step `step`: 4 rows of 2 features."""
    return [([((step + i) % 3) - 1, ((2 * step + i + 1) % 3) - 1], (3 * step + i) % 4 - 1)
            for i in range(4)]


if sys.argv[1] == "--solo":
    print(json.dumps({"steps": STEPS, "lr": LEARNING_RATE,
                      "batches": [batch(s) for s in range(STEPS)]}))
    sys.exit(0)

done_file = os.path.join(sys.argv[1], "done")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")
import tensorflow as tf  # noqa: E402

resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
config = json.loads(os.environ["TF_CONFIG"])

if resolver.task_type in ("ps", "worker"):
    server = tf.distribute.Server(resolver.cluster_spec(), job_name=resolver.task_type,
                                  task_index=resolver.task_id, protocol="grpc", start=True)
    deadline = time.monotonic() + 120
    while not os.path.exists(done_file):
        if time.monotonic() > deadline:
            print(f"{resolver.task_type} {resolver.task_id}: no {done_file} within 120 s",
                  file=sys.stderr, flush=True)
            sys.exit(4)
        time.sleep(0.2)
    print(json.dumps({"rank": int(os.environ["RANK"]), "tf_config": config}), flush=True)
    sys.exit(0)

try:
    strategy = tf.distribute.ParameterServerStrategy(resolver)
    coordinator = tf.distribute.coordinator.ClusterCoordinator(strategy)
    with strategy.scope():
        w = tf.Variable(tf.zeros([2, 1]), name="w")
        b = tf.Variable(0.0, name="b")

    @tf.function
    def train_step(x, y):
        def replica_step(x, y):
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(tf.square(tf.matmul(x, w) + b - y))
            grad_w, grad_b = tape.gradient(loss, [w, b])
            w.assign_sub(LEARNING_RATE * grad_w)
            b.assign_sub(LEARNING_RATE * grad_b)

        strategy.run(replica_step, args=(x, y))

    for s in range(STEPS):
        rows = batch(s)
        x = tf.constant([r[0] for r in rows], dtype=tf.float32)
        y = tf.constant([[r[1]] for r in rows], dtype=tf.float32)
        coordinator.schedule(train_step, args=(x, y))
        coordinator.join()
    values = [w.numpy().ravel().tolist(), [float(b.numpy())]]
    print(json.dumps({"rank": int(os.environ["RANK"]), "tf_config": config,
                      "devices": [w.device, b.device],
                      "weights": values}), flush=True)
finally:
    with open(done_file, "w") as f:
        f.write("done\n")
