"""Records TF 2.3.4's experimental Keras LossScaleOptimizer with any LossScale.

Run under the TF 2.3.4 reference interpreter:

    .ref/tf23/bin/python tools/gen_tf23_lso_v1_fixtures.py

Writes under tests/fixtures/keras_lso/:

* v1_tf23.json, per case (`"dynamic"`, a fixed 128, a `DynamicLossScale`
  with `multiplier=4`, the user `LossScale` subclass of
  tests/loss_scale/tf23_custom_loss_scale.py):
  - `calls`: `opt.loss_scale()` eagerly and returned from a `tf.function`,
    and the class name of `opt.loss_scale`;
  - `get_config` / `serialize` of the optimizer;
  - `trajectory_eager` / `trajectory_function`: after each of 10 steps of a
    custom loop (`get_scaled_loss`, `tape.gradient`,
    `get_unscaled_gradients`, `apply_gradients`; SGD with momentum; steps 3
    and 7 have a non-finite gradient): the variable, momentum slot,
    iterations, `opt.loss_scale()` read inside the step and after it, and
    the loss scale's variables;
  - `checkpoint`: `tf.train.list_variables` of `ckpt_v1_tf23_<case>/ckpt-1`,
    a `tf.train.Checkpoint(model=..., optimizer=...)` (the model a Keras
    layer whose weight `var` is the variable) saved after step 5 of
    the eager trajectory (its steps 6-10 are the resume reference).
"""

import json
import os
import shutil
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # pylint: disable=g-import-not-at-top
import tensorflow as tf  # pylint: disable=g-import-not-at-top

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests"))
import tf23_custom_loss_scale  # pylint: disable=g-import-not-at-top,wrong-import-position

OUT = os.path.join(ROOT, "tests", "fixtures", "keras_lso")
INF = float("inf")
NAN = float("nan")
# One gradient per step for a 2-element variable; steps 3 and 7 overflow.
GRADIENTS = [[0.5, -0.25], [1.0, 2.0], [INF, 1.0], [0.125, 0.5], [-1.0, 0.75],
             [0.25, 0.25], [NAN, 0.5], [2.0, -0.5], [0.5, 1.5], [-0.25, 1.0]]
SAVE_AFTER = 5


def _json_float(x):
  x = float(x)
  if np.isnan(x):
    return "nan"
  if np.isinf(x):
    return "inf" if x > 0 else "-inf"
  return x


def make_loss_scale(case):
  """The `loss_scale` argument of each case, for TF 2.3.4 or this package."""
  experimental = tf.mixed_precision.experimental
  if case == "dynamic":
    return "dynamic"
  if case == "fixed":
    return 128
  if case == "multiplier_4":
    return experimental.DynamicLossScale(initial_loss_scale=8,
                                         increment_period=2, multiplier=4)
  return tf23_custom_loss_scale.define(experimental.LossScale, tf)(1024.)


def _optimizer(case):
  return tf.keras.mixed_precision.experimental.LossScaleOptimizer(
      tf.keras.optimizers.SGD(0.1, momentum=0.9), make_loss_scale(case))


def _loss_scale_variables(opt):
  ls = opt.loss_scale
  return {v.name.split(":")[0].split("/")[-1]: _json_float(v.numpy())
          for v in getattr(ls, "_weights", {}).values()}


def _step_fn(opt, var):

  def step(grad):
    with tf.GradientTape() as tape:
      loss = tf.reduce_sum(var * grad)
      scaled = opt.get_scaled_loss(loss)
    (scaled_grad,) = tape.gradient(scaled, [var])
    (unscaled,) = opt.get_unscaled_gradients([scaled_grad])
    scale_in_step = opt.loss_scale()
    opt.apply_gradients([(unscaled, var)])
    return scale_in_step

  return step


def _record(opt, var, step, grads):
  rows = []
  for grad in grads:
    scale_in_step = step(tf.constant(grad, tf.float32))
    rows.append({
        "var": [_json_float(x) for x in var.numpy()],
        "momentum": [_json_float(x)
                     for x in opt.get_slot(var, "momentum").numpy()],
        "iterations": int(opt.iterations.numpy()),
        "scale_in_step": _json_float(scale_in_step),
        "loss_scale": _json_float(opt.loss_scale()),
        "loss_scale_variables": _loss_scale_variables(opt),
    })
  return rows


def _trajectory(case, function):
  opt = _optimizer(case)
  var = tf.Variable([1.0, -2.0])
  step = _step_fn(opt, var)
  if function:
    step = tf.function(step)
  return _record(opt, var, step, GRADIENTS)


def _checkpointed_trajectory(case):
  """Eager trajectory, saving a checkpoint after step SAVE_AFTER."""
  opt = _optimizer(case)
  holder = Holder()
  var = holder.var
  step = _step_fn(opt, var)
  rows = _record(opt, var, step, GRADIENTS[:SAVE_AFTER])
  directory = os.path.join(OUT, f"ckpt_v1_tf23_{case}")
  shutil.rmtree(directory, ignore_errors=True)
  prefix = tf.train.Checkpoint(model=holder, optimizer=opt).save(
      os.path.join(directory, "ckpt"))
  rows += _record(opt, var, step, GRADIENTS[SAVE_AFTER:])
  names = [[name, shape] for name, shape in tf.train.list_variables(prefix)]
  return rows, {"prefix": os.path.relpath(prefix, OUT), "variables": names}


class Holder(tf.keras.layers.Layer):
  """The job's model: a Keras layer whose one weight is the variable."""

  def __init__(self):
    super().__init__()
    self.var = self.add_weight(
        "var", shape=(2,), initializer=tf.keras.initializers.Constant(
            [1.0, -2.0]))


def _calls(case):
  opt = _optimizer(case)
  return {
      "eager": _json_float(opt.loss_scale()),
      "function": _json_float(tf.function(lambda: opt.loss_scale())()),
      "loss_scale_class": type(opt.loss_scale).__name__,
  }


def main():
  assert tf.__version__ == "2.3.4", tf.__version__
  data = {"tensorflow_version": tf.__version__, "gradients": [
      [_json_float(x) for x in g] for g in GRADIENTS], "save_after": SAVE_AFTER}
  for case in ("dynamic", "fixed", "multiplier_4", "custom"):
    opt = _optimizer(case)
    eager, checkpoint = _checkpointed_trajectory(case)
    data[case] = {
        "calls": _calls(case),
        "get_config": opt.get_config(),
        "serialize": tf.keras.optimizers.serialize(opt),
        "trajectory_eager": eager,
        "trajectory_function": _trajectory(case, function=True),
        "checkpoint": checkpoint,
    }
  with open(os.path.join(OUT, "v1_tf23.json"), "w") as f:
    json.dump(data, f, indent=1, sort_keys=True)
    f.write("\n")


if __name__ == "__main__":
  main()
