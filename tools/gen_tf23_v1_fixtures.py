"""Records a TF 2.3.4 graph-mode run of MixedPrecisionLossScaleOptimizer.

Run under the reference environment (Python 3.8, tensorflow-cpu==2.3.4):

    .ref/tf23/bin/python tools/gen_tf23_v1_fixtures.py

Builds the graph described by `build_graph` (shared with the test suite and
with tools/check_v1_checkpoint_in_tf23.py through `tests/fixtures/v1_optimizer/
run.json`), runs it in a `tf.compat.v1.Session` with scripted gradients that
overflow on some steps, and writes under tests/fixtures/v1_optimizer/:

  run.json        the scripted gradients, the graph's hyperparameters, and per
                  step the loss scale, good_steps, global_step, the variables
                  and their Momentum slots after the step; plus the checkpoint's
                  variable names and values;
  tf23_saver/     a `tf.compat.v1.train.Saver` checkpoint of the graph after
                  the last step.

With `--restore DIR` it instead restores the Saver checkpoint in DIR (written
by tf_mixed_precision_compat on a newer TensorFlow) into the same graph, runs
one more scripted step, and prints the restored and stepped values as JSON on
stdout (used by tools/check_v1_checkpoint_in_tf23.py).

Keep this file Python 3.8 compatible.
"""

import argparse
import json
import os
import shutil
import sys

import numpy as np
import tensorflow as tf

OUT = os.path.join(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests",
    "fixtures", "v1_optimizer")

INF, NAN = float("inf"), float("nan")

# The loss is sum(w * gw) + b * gb, so the gradient of w is exactly the fed gw
# (times and then divided by the loss scale, both powers of two).
SPEC = {
    "w_init": [1.0, -2.0],
    "b_init": 0.5,
    "learning_rate": 0.125,
    "momentum": 0.5,
    "loss_scale": {"initial_loss_scale": 16.0, "increment_period": 2,
                   "multiplier": 2.0},
    # [gw, gb] per step.
    "steps": [
        [[1.0, 2.0], 0.5],
        [[0.25, -1.0], 1.0],
        [[INF, 1.0], 1.0],   # overflow: skipped, scale halves.
        [[1.0, 1.0], -2.0],
        [[0.5, 0.5], 0.5],
        [[-1.0, 3.0], NAN],  # NaN: skipped, scale halves.
        [[2.0, 0.0], 1.0],
        [[1.0, 1.0], 1.0],
        [[0.5, -0.5], 0.25],
    ],
}


def _encode(x):
  """JSON cannot hold inf/NaN; they are written as strings."""
  if isinstance(x, list):
    return [_encode(v) for v in x]
  if isinstance(x, float) and not np.isfinite(x):
    return repr(x)
  return x


def build_graph(optimizer_cls, loss_scale_cls):
  """Builds the training graph in the current default graph.

  Args:
    optimizer_cls: The MixedPrecisionLossScaleOptimizer class to use.
    loss_scale_cls: The DynamicLossScale class to use.

  Returns:
    A dict of the graph's tensors and ops.
  """
  gw = tf.compat.v1.placeholder(tf.float32, [2], name="gw")
  gb = tf.compat.v1.placeholder(tf.float32, [], name="gb")
  w = tf.compat.v1.get_variable(
      "w", initializer=tf.constant(SPEC["w_init"]), use_resource=True)
  b = tf.compat.v1.get_variable(
      "b", initializer=tf.constant(SPEC["b_init"]), use_resource=True)
  global_step = tf.compat.v1.train.get_or_create_global_step()
  loss = tf.reduce_sum(w * gw) + b * gb
  loss_scale = loss_scale_cls(**SPEC["loss_scale"])
  opt = optimizer_cls(
      tf.compat.v1.train.MomentumOptimizer(SPEC["learning_rate"],
                                           SPEC["momentum"]), loss_scale)
  train_op = opt.minimize(loss, global_step=global_step)
  return {
      "gw": gw, "gb": gb, "w": w, "b": b, "global_step": global_step,
      "train_op": train_op, "opt": opt, "loss_scale": loss_scale,
      "w_momentum": opt._optimizer.get_slot(w, "momentum"),  # pylint: disable=protected-access
      "b_momentum": opt._optimizer.get_slot(b, "momentum"),  # pylint: disable=protected-access
  }


def read_state(sess, g):
  """The recorded state of the graph `g` in `sess`."""
  scale = g["loss_scale"]()
  good_steps = g["loss_scale"]._num_good_steps  # pylint: disable=protected-access
  values = sess.run({
      "loss_scale": scale, "good_steps": good_steps,
      "global_step": g["global_step"], "w": g["w"], "b": g["b"],
      "w_momentum": g["w_momentum"], "b_momentum": g["b_momentum"]})
  return {k: np.asarray(v).tolist() for k, v in values.items()}


def feed(g, step):
  return {g["gw"]: step[0], g["gb"]: step[1]}


def checkpoint_contents(prefix):
  reader = tf.train.load_checkpoint(prefix)
  return {name: np.asarray(reader.get_tensor(name)).tolist()
          for name, _ in tf.train.list_variables(prefix)}


def record():
  """Runs the scripted steps and writes the fixtures."""
  mpo = tf.compat.v1.train.experimental.MixedPrecisionLossScaleOptimizer
  dls = tf.compat.v1.mixed_precision.experimental.DynamicLossScale
  ckpt_dir = os.path.join(OUT, "tf23_saver")
  shutil.rmtree(ckpt_dir, ignore_errors=True)
  os.makedirs(ckpt_dir)
  with tf.Graph().as_default():
    g = build_graph(mpo, dls)
    saver = tf.compat.v1.train.Saver()
    with tf.compat.v1.Session() as sess:
      sess.run(tf.compat.v1.global_variables_initializer())
      initial = read_state(sess, g)
      per_step = []
      for step in SPEC["steps"]:
        sess.run(g["train_op"], feed(g, step))
        per_step.append(read_state(sess, g))
      prefix = saver.save(sess, os.path.join(ckpt_dir, "model.ckpt"),
                          write_meta_graph=False)
      # Relative paths keep the committed fixture movable.
      tf.compat.v1.train.update_checkpoint_state(
          ckpt_dir, "model.ckpt", all_model_checkpoint_paths=["model.ckpt"])
      global_names = sorted(
          v.op.name for v in tf.compat.v1.global_variables())
  run = {
      "tensorflow_version": tf.__version__,
      "spec": _encode(SPEC),
      "initial": initial,
      "per_step": per_step,
      "global_variables": global_names,
      "checkpoint": checkpoint_contents(prefix),
  }
  with open(os.path.join(OUT, "run.json"), "w") as f:
    json.dump(run, f, indent=1, sort_keys=True)
    f.write("\n")
  print("wrote", OUT)


def restore(directory):
  """Restores our checkpoint in `directory` into TF 2.3.4 and steps once."""
  mpo = tf.compat.v1.train.experimental.MixedPrecisionLossScaleOptimizer
  dls = tf.compat.v1.mixed_precision.experimental.DynamicLossScale
  with tf.Graph().as_default():
    g = build_graph(mpo, dls)
    saver = tf.compat.v1.train.Saver()
    with tf.compat.v1.Session() as sess:
      saver.restore(sess, tf.train.latest_checkpoint(directory))
      restored = read_state(sess, g)
      sess.run(g["train_op"], feed(g, SPEC["steps"][0]))
      stepped = read_state(sess, g)
  json.dump({"restored": restored, "stepped": stepped}, sys.stdout)


def main():
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--restore", metavar="DIR",
                      help="restore the Saver checkpoint in DIR instead")
  args = parser.parse_args()
  if args.restore:
    restore(args.restore)
  else:
    record()


if __name__ == "__main__":
  main()
