"""One worker of a 2-worker MultiWorkerMirroredStrategy run with our optimizer.

Run by tests/reliability/test_multiworker.py, once per worker, with TF_CONFIG
set. Only worker 1 injects an overflow (its loss times inf) on the steps given
by --overflow_steps; gradients are all-reduced, so both workers must skip the
same steps. Writes what it ends with (variables, slots, iterations, loss
scale, counter, bit for bit as hex) and the per-step trajectory as JSON.

Usage: multiworker_train.py OUTPUT_JSON --steps N --overflow_steps 3,7
"""

import argparse
import json
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # pylint: disable=g-import-not-at-top,wrong-import-position
import tensorflow as tf  # pylint: disable=g-import-not-at-top,wrong-import-position


def _hex(value):
  return np.asarray(value).tobytes().hex()


def main():
  parser = argparse.ArgumentParser()
  parser.add_argument("output")
  parser.add_argument("--steps", type=int, required=True)
  parser.add_argument("--overflow_steps", default="")
  args = parser.parse_args()
  overflow = {int(s) for s in args.overflow_steps.split(",") if s}
  task = json.loads(os.environ["TF_CONFIG"])["task"]["index"]

  # The strategy must exist before any other TensorFlow op runs.
  strategy = tf.distribute.MultiWorkerMirroredStrategy()
  import keras  # pylint: disable=g-import-not-at-top
  import tf_mixed_precision_compat as mp  # pylint: disable=g-import-not-at-top

  with strategy.scope():
    w = tf.Variable(tf.reshape(tf.range(6, dtype=tf.float32) / 10., [3, 2]),
                    name="w")
    b = tf.Variable([0.5, -0.5], name="b")
    opt = mp.LossScaleOptimizer(
        keras.optimizers.Adam(0.01), initial_scale=2.**10,
        dynamic_growth_steps=3)
    opt.build([w, b])

  @tf.function
  def train_step(x, y, poison):

    def replica_fn(x, y, poison):
      with tf.GradientTape() as tape:
        pred = tf.matmul(x, w) + b
        loss = tf.reduce_mean(tf.square(pred - y)) * poison
        scaled = opt.get_scaled_loss(loss)
      grads = opt.get_unscaled_gradients(tape.gradient(scaled, [w, b]))
      opt.apply_gradients(zip(grads, [w, b]))

    strategy.run(replica_fn, args=(x, y, poison))

  # Each worker its own data: the all-reduce makes the updates agree.
  rng = np.random.RandomState(100 + task)
  trajectory = []
  for step in range(args.steps):
    x = tf.constant(rng.uniform(-1, 1, (4, 3)).astype(np.float32))
    y = tf.constant(rng.uniform(-1, 1, (4, 2)).astype(np.float32))
    poison = np.inf if (task == 1 and step in overflow) else 1.
    before = _hex(w.numpy())
    train_step(x, y, tf.constant(poison, tf.float32))
    trajectory.append({
        "applied": _hex(w.numpy()) != before,
        "scale": float(opt.loss_scale.numpy()),
        "counter": int(opt.dynamic_counter.numpy()),
    })

  result = {
      "task": task,
      "trajectory": trajectory,
      "final": {
          "w": _hex(w.numpy()),
          "b": _hex(b.numpy()),
          "optimizer": [[v.name, _hex(v.numpy())] for v in opt.variables],
          "iterations": int(opt.iterations.numpy()),
          "scale": _hex(opt.loss_scale.numpy()),
          "counter": int(opt.dynamic_counter.numpy()),
          "finite": bool(np.isfinite(w.numpy()).all() and
                         np.isfinite(b.numpy()).all()),
      },
  }
  with open(args.output, "w") as f:
    json.dump(result, f)


if __name__ == "__main__":
  main()
