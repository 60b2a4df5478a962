"""Writes a TF 2.4.4 checkpoint of the layouts `convert` must carry over.

Run under the TF 2.4.4 reference interpreter:

    .ref/tf24/bin/python tools/gen_convert_layouts.py

Writes tests/fixtures/convert/layouts_tf24/: a `fit` job of a mixed_float16
Sequential model whose layers Keras 3 names otherwise (DepthwiseConv2D's
`depthwise_kernel`), compiled with a metric, trained by
`LossScaleOptimizer(SGD(WarmUp(...), momentum=0.9), initial_scale=1024,
dynamic_growth_steps=5)`: a learning-rate schedule of the job's own code (a
linear warm-up, then exponential decay), which TF 2.x does not store.
Saved by a `CheckpointManager` of `tf.train.Checkpoint(model=model,
optimizer=model.optimizer)` after two epochs. `job.json` records every
value the objects held at the save, in `model.weights` order, the slots by
weight index, and the learning rate the schedule gave at the save.

Writes tests/fixtures/convert/blocks_tf24/: a custom-loop job of a
subclassed model holding its layers in a Python list and a dict and its
loss metric as an attribute (`self.tracker = Mean()`), trained by TF 2.4's
`LossScaleOptimizer(Adam)` for 9 steps, saved the same way; `job.json`
likewise.

Writes tests/fixtures/convert/tfops_tf24/: a functional model with
TensorFlow ops between its layers (Keras 2 made each a layer, counted in
the checkpoint's `layer-N`; Keras 3 makes none), trained by `fit` with
`LossScaleOptimizer(SGD(momentum=0.9))` for 6 steps, saved the same way.

Writes tests/fixtures/convert/adamw_tf24/: a custom loop trained by
`LossScaleOptimizer(AdamWeightDecay(...))`, Model Garden's (and TTS's) Adam
with decoupled weight decay (`lr * rate * var` taken from every variable
whose name no exclusion pattern matches, before Adam's update), in our
words; float32 compute, so the continued steps compare tightly. 6 steps,
saved, then 4 more recorded (`continued`: the loss of each, the weights
after them) for the resumed run to match.

tests/cli/job_layouts/builder.py is these jobs' model and optimizer code in
Keras 3.
"""

import json
import os
import re
import shutil

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # pylint: disable=g-import-not-at-top
import tensorflow as tf  # pylint: disable=g-import-not-at-top

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "tests", "fixtures", "convert", "layouts_tf24")


class WarmUp(tf.keras.optimizers.schedules.LearningRateSchedule):
  """Linear warm-up to `peak` over `steps`, then `after` from there."""

  def __init__(self, peak, steps, after):
    super().__init__()
    self.peak, self.steps, self.after = peak, steps, after

  def __call__(self, step):
    step = tf.cast(step, tf.float32)
    return tf.where(step < self.steps, self.peak * step / self.steps,
                    self.after(step - self.steps))

  def get_config(self):
    return {"peak": self.peak, "steps": self.steps}


def _model():
  tf.keras.mixed_precision.set_global_policy("mixed_float16")
  return tf.keras.Sequential([
      tf.keras.Input((6, 6, 2)),
      tf.keras.layers.DepthwiseConv2D(3, depth_multiplier=2),
      tf.keras.layers.BatchNormalization(),
      tf.keras.layers.Flatten(),
      tf.keras.layers.Dense(4, activation="relu"),
      tf.keras.layers.Dense(1),
      tf.keras.layers.Activation("linear", dtype="float32"),
  ])


class Blocks(tf.keras.Model):
  """Dense blocks held in a list, a head in a dict, and a loss tracker."""

  def __init__(self):
    super().__init__()
    self.blocks = [tf.keras.layers.Dense(5, activation="relu"),
                   tf.keras.layers.Dense(3, activation="relu")]
    self.heads = {"main": tf.keras.layers.Dense(1)}
    self.out = tf.keras.layers.Activation("linear", dtype="float32")
    self.tracker = tf.keras.metrics.Mean(name="loss")

  def call(self, x):
    for block in self.blocks:
      x = block(x)
    return self.out(self.heads["main"](x))


def _scaled_step(model, opt, x, y):
  """One custom-loop step as TF 2.4's guide wrote it; returns the loss."""
  with tf.GradientTape() as tape:
    loss = tf.reduce_mean(tf.square(model(x) - y))
    scaled = opt.get_scaled_loss(loss)
  grads = opt.get_unscaled_gradients(
      tape.gradient(scaled, model.trainable_variables))
  opt.apply_gradients(zip(grads, model.trainable_variables))
  return loss


def blocks_job():
  """The custom-loop job of `Blocks`; returns its record."""
  tf.keras.mixed_precision.set_global_policy("mixed_float16")
  tf.random.set_seed(12)
  rng = np.random.RandomState(12)
  x = rng.normal(size=(9, 4, 6)).astype("float32")
  y = rng.normal(size=(9, 4, 1)).astype("float32")
  model = Blocks()
  opt = tf.keras.mixed_precision.LossScaleOptimizer(
      tf.keras.optimizers.Adam(0.01), initial_scale=256,
      dynamic_growth_steps=4)
  for xb, yb in zip(x, y):
    model.tracker.update_state(_scaled_step(model, opt, xb, yb))
  out = os.path.join(os.path.dirname(OUT), "blocks_tf24")
  return out, model, opt


def tfops_job():
  """A functional model with TF ops between its Dense layers, fit."""
  tf.keras.mixed_precision.set_global_policy("mixed_float16")
  tf.random.set_seed(13)
  rng = np.random.RandomState(13)
  x = rng.normal(size=(24, 4)).astype("float32")
  y = rng.normal(size=(24, 1)).astype("float32")
  inputs = tf.keras.Input((4,))
  h = tf.keras.layers.Dense(6)(inputs)
  h = tf.nn.relu(h) * 0.5
  h = tf.keras.layers.Dense(6)(h)
  h = tf.keras.layers.Dense(6, activation="relu")(h)
  h = tf.keras.layers.Dense(1)(h)
  model = tf.keras.Model(inputs, tf.cast(h, tf.float32))
  opt = tf.keras.mixed_precision.LossScaleOptimizer(
      tf.keras.optimizers.SGD(0.05, momentum=0.9), initial_scale=512,
      dynamic_growth_steps=4)
  model.compile(opt, loss="mse")
  model.fit(x, y, batch_size=4, epochs=1, shuffle=False, verbose=0)
  return os.path.join(os.path.dirname(OUT), "tfops_tf24"), model, opt


class AdamWeightDecay(tf.keras.optimizers.Adam):
  """Adam whose variables decay by `lr * weight_decay_rate * var` first,
  but those a pattern of `exclude_from_weight_decay` matches by name."""

  def __init__(self, learning_rate, weight_decay_rate,
               exclude_from_weight_decay=None, **kwargs):
    super().__init__(learning_rate, name="AdamWeightDecay", **kwargs)
    self.weight_decay_rate = weight_decay_rate
    self._exclude = exclude_from_weight_decay or []

  def _decay(self, var, apply_state):
    if any(re.search(p, var.name) for p in self._exclude):
      return tf.no_op()
    lr = apply_state[(var.device, var.dtype.base_dtype)]["lr_t"]
    return var.assign_sub(lr * var * self.weight_decay_rate)

  def _resource_apply_dense(self, grad, var, apply_state=None):
    with tf.control_dependencies([self._decay(var, apply_state)]):
      return super()._resource_apply_dense(grad, var, apply_state)


def _adamw_batch(i):
  rng = np.random.RandomState(200 + i)
  x = rng.normal(size=(8, 5)).astype("float32")
  return x, (x @ np.linspace(-1.0, 1.0, 5)[:, None]).astype("float32")


def adamw_job():
  """The AdamWeightDecay custom loop; saves after 6 steps, records 4 more."""
  tf.keras.mixed_precision.set_global_policy("float32")
  tf.random.set_seed(14)
  model = tf.keras.Sequential([tf.keras.Input((5,)),
                               tf.keras.layers.Dense(4, activation="tanh"),
                               tf.keras.layers.Dense(1)])
  opt = tf.keras.mixed_precision.LossScaleOptimizer(
      AdamWeightDecay(0.01, 0.1, exclude_from_weight_decay=["bias"]),
      initial_scale=128, dynamic_growth_steps=3)

  def step(i):
    return float(_scaled_step(model, opt, *_adamw_batch(i)).numpy())

  for i in range(6):
    step(i)
  out = os.path.join(os.path.dirname(OUT), "adamw_tf24")
  _save(out, model, opt)
  losses = [step(i) for i in range(6, 10)]
  path = os.path.join(out, "job.json")
  with open(path) as f:
    record = json.load(f)
  record["continued"] = {"losses": losses, "weights": [
      w.numpy().tolist() for w in model.weights]}
  with open(path, "w") as f:
    json.dump(record, f, indent=1, sort_keys=True)
    f.write("\n")


def _slots(opt, model):
  inner = opt.inner_optimizer
  return {str(i): {name: inner.get_slot(v, name).numpy().tolist()
                   for name in inner.get_slot_names()}
          for i, v in enumerate(model.trainable_weights)}


def _save(out, model, opt, extra=None):
  """Saves as the jobs did; writes `job.json` with every value held."""
  shutil.rmtree(out, ignore_errors=True)
  ckpt = tf.train.Checkpoint(model=model, optimizer=opt)
  prefix = tf.train.CheckpointManager(ckpt, out, max_to_keep=1).save()
  inner = opt.inner_optimizer
  metric_variables = {id(v) for m in model.submodules
                      if isinstance(m, tf.keras.metrics.Metric)
                      for v in m.variables}
  record = {
      "tensorflow_version": tf.__version__,
      "checkpoint": os.path.basename(prefix),
      # Keras 2 counted a metric attribute's total and count as weights.
      "weights": [[w.name, w.numpy().tolist()] for w in model.weights
                  if id(w) not in metric_variables],
      "metrics": [[w.name, w.numpy().tolist()] for w in model.weights
                  if id(w) in metric_variables],
      "slots": _slots(opt, model),
      "iterations": int(inner.iterations.numpy()),
      "loss_scale": float(opt.loss_scale.numpy()),
      "counter": int(opt.dynamic_counter.numpy()),
      "growth_steps": opt.dynamic_growth_steps,
      "variables": tf.train.list_variables(prefix),
      **(extra or {}),
  }
  with open(os.path.join(out, "job.json"), "w") as f:
    json.dump(record, f, indent=1, sort_keys=True)
    f.write("\n")
  print(os.path.basename(out), record["iterations"], record["loss_scale"],
        record["counter"])


def main():
  assert tf.__version__.startswith("2.4."), tf.__version__
  _save(*blocks_job())
  tf.keras.backend.clear_session()
  _save(*tfops_job())
  tf.keras.backend.clear_session()
  adamw_job()
  tf.keras.backend.clear_session()
  tf.random.set_seed(11)
  rng = np.random.RandomState(11)
  x = rng.normal(size=(24, 6, 6, 2)).astype("float32")
  y = rng.normal(size=(24, 1)).astype("float32")
  model = _model()
  schedule = WarmUp(0.05, 4, tf.keras.optimizers.schedules.ExponentialDecay(
      0.05, 5, 0.5))
  opt = tf.keras.mixed_precision.LossScaleOptimizer(
      tf.keras.optimizers.SGD(schedule, momentum=0.9),
      initial_scale=1024, dynamic_growth_steps=5)
  model.compile(opt, loss="mse", metrics=["mae"])
  model.fit(x, y, batch_size=4, epochs=2, shuffle=False, verbose=0)
  _save(OUT, model, opt, {"learning_rate": float(
      opt.inner_optimizer._decayed_lr(tf.float32).numpy())})  # pylint: disable=protected-access


if __name__ == "__main__":
  main()
