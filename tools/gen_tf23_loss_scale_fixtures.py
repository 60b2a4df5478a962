"""Records TF 2.3.4's loss scales: trajectories and checkpoints.

Run under the reference environment (Python 3.8, tensorflow-cpu==2.3.4):

    .ref/tf23/bin/python tools/gen_tf23_loss_scale_fixtures.py

Writes, under tests/fixtures/loss_scale/:
  trajectories.json   per-step (should_apply, scale, good_steps) for scripted
                      gradient sequences, eagerly and in a graph session;
  eager_ckpt/         tf.train.Checkpoint(loss_scale=DynamicLossScale) saved
                      eagerly mid-trajectory (scale and counter non-default);
  graph_ckpt/         the same object graph saved from a tf.compat.v1 session;
  fixed_ckpt/         a checkpoint holding a FixedLossScale next to a variable;
  checkpoints.json    the values each checkpoint holds and its variable keys.

Keep this file Python 3.8 compatible.
"""

import json
import os
import shutil
import sys

import numpy as np
import tensorflow as tf

OUT = os.path.join(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests",
    "fixtures", "loss_scale")

INF, NAN = float("inf"), float("nan")

# Each case: DynamicLossScale arguments and a list of steps; a step is a list
# of gradient entries, each a list of floats, or None for a None gradient. A
# {"sparse": [...]} entry is an IndexedSlices with those values.
CASES = {
    "grow_and_overflow": {
        "args": {"initial_loss_scale": 16., "increment_period": 2,
                 "multiplier": 2.},
        "dtype": "float32",
        "steps": [[[1., 2.]], [[3.]], [[INF]], [[1.]], [[NAN, 1.]], [[1.]],
                  [[1.]], [[1.], None], [[2.]], [[1.]], [[1.]]],
    },
    "floor_at_one": {
        "args": {"initial_loss_scale": 4., "increment_period": 3,
                 "multiplier": 2.},
        "dtype": "float32",
        "steps": [[[INF]]] * 4 + [[[1.]]] * 3 + [[[NAN]]],
    },
    "growth_stops_before_inf": {
        "args": {"initial_loss_scale": 2.**126, "increment_period": 1,
                 "multiplier": 2.},
        "dtype": "float32",
        "steps": [[[1.]]] * 4 + [[[INF]]] + [[[1.]]] * 2,
    },
    "multiplier_three_float16_sparse": {
        "args": {"initial_loss_scale": 9., "increment_period": 2,
                 "multiplier": 3.},
        "dtype": "float16",
        "steps": [[{"sparse": [1., 2.]}, [1.]], [[65504.]],
                  [{"sparse": [INF]}, [1.]], [[1.]], [None, [0.5]],
                  [[70000.]], [[1.]]],
    },
}


def make_grads(step, dtype):
  grads = []
  for entry in step:
    if entry is None:
      grads.append(None)
    elif isinstance(entry, dict):
      values = tf.constant(entry["sparse"], dtype=dtype)
      n = len(entry["sparse"])
      grads.append(tf.IndexedSlices(values, tf.range(n), tf.constant([n])))
    else:
      grads.append(tf.constant(entry, dtype=dtype))
  return grads


def encode(step):
  def enc(x):
    if isinstance(x, float) and not np.isfinite(x):
      return "inf" if x > 0 else ("-inf" if x < 0 else "nan")
    return x
  out = []
  for entry in step:
    if entry is None:
      out.append(None)
    elif isinstance(entry, dict):
      out.append({"sparse": [enc(v) for v in entry["sparse"]]})
    else:
      out.append([enc(v) for v in entry])
  return out


def eager_trajectory(case):
  ls = tf.mixed_precision.experimental.DynamicLossScale(**case["args"])
  record = []
  for step in case["steps"]:
    _, apply = ls.update(make_grads(step, case["dtype"]))
    record.append([bool(apply), float(ls().numpy()),
                   int(ls._num_good_steps.numpy())])
  return record


def graph_trajectory(case):
  record = []
  with tf.Graph().as_default(), tf.compat.v1.Session() as sess:
    ls = tf.mixed_precision.experimental.DynamicLossScale(**case["args"])
    ops = [ls.update(make_grads(step, case["dtype"])) for step in case["steps"]]
    sess.run(tf.compat.v1.global_variables_initializer())
    for update_op, apply in ops:
      _, applied = sess.run([update_op, apply])
      scale, good = sess.run([ls(), ls._num_good_steps])
      record.append([bool(applied), float(scale), int(good)])
  return record


def checkpoint_keys(prefix):
  return sorted(name for name, _ in tf.train.list_variables(prefix))


def main():
  assert tf.__version__ == "2.3.4", tf.__version__
  if os.path.exists(OUT):
    shutil.rmtree(OUT)
  os.makedirs(OUT)

  trajectories = {}
  for name, case in sorted(CASES.items()):
    eager = eager_trajectory(case)
    graph = graph_trajectory(case)
    assert eager == graph, (name, eager, graph)
    trajectories[name] = {
        "args": case["args"], "dtype": case["dtype"],
        "steps": [encode(s) for s in case["steps"]], "record": eager}
  with open(os.path.join(OUT, "trajectories.json"), "w") as f:
    json.dump(trajectories, f, indent=1, sort_keys=True)

  checkpoints = {}
  # Eager: scale 1024 -> overflow (512), then 2 good steps of 3.
  ls = tf.mixed_precision.experimental.DynamicLossScale(
      initial_loss_scale=1024., increment_period=3, multiplier=2.)
  for g in [INF, 1., 1.]:
    ls.update([tf.constant(g)])
  prefix = tf.train.Checkpoint(loss_scale=ls).write(
      os.path.join(OUT, "eager_ckpt", "ckpt"))
  checkpoints["eager_ckpt"] = {
      "prefix": os.path.relpath(prefix, OUT),
      "current_loss_scale": float(ls().numpy()),
      "good_steps": int(ls._num_good_steps.numpy()),
      "keys": checkpoint_keys(prefix)}

  # Graph: scale 2**20 -> three growths/overflows; saved from the session.
  with tf.Graph().as_default(), tf.compat.v1.Session() as sess:
    ls = tf.mixed_precision.experimental.DynamicLossScale(
        initial_loss_scale=2.**20, increment_period=2, multiplier=4.)
    g = tf.compat.v1.placeholder(tf.float32, [])
    update_op, _ = ls.update([g])
    sess.run(tf.compat.v1.global_variables_initializer())
    for value in [1., 1., NAN, 1.]:
      sess.run(update_op, {g: value})
    ckpt = tf.train.Checkpoint(loss_scale=ls)
    prefix = ckpt.write(os.path.join(OUT, "graph_ckpt", "ckpt"))
    scale, good = sess.run([ls(), ls._num_good_steps])
  checkpoints["graph_ckpt"] = {
      "prefix": os.path.relpath(prefix, OUT),
      "current_loss_scale": float(scale), "good_steps": int(good),
      "keys": checkpoint_keys(prefix)}

  fixed = tf.mixed_precision.experimental.FixedLossScale(128)
  v = tf.Variable(3.5)
  prefix = tf.train.Checkpoint(loss_scale=fixed, v=v).write(
      os.path.join(OUT, "fixed_ckpt", "ckpt"))
  checkpoints["fixed_ckpt"] = {"prefix": os.path.relpath(prefix, OUT),
                               "v": 3.5, "keys": checkpoint_keys(prefix)}

  with open(os.path.join(OUT, "checkpoints.json"), "w") as f:
    json.dump(checkpoints, f, indent=1, sort_keys=True)
  print("wrote", OUT, file=sys.stderr)


if __name__ == "__main__":
  main()
