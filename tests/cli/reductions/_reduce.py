"""What every reduction shares: seeded data and weights, and its record.

Runs unchanged under TF 2.3.4/2.4.4 (Python 3.8), under TF 2.21 with the
package, and under TF 2.21 + Keras 3 alone (the migrated job), so the three
runs of one reduction see the same numbers. Not migrated: a harness, not the
job.

Example (the shape of every reduction's loop):

  log = Log(model)
  for i in range(STEPS):
    loss = train_step(*batch(i))
    log.step(loss, optimizer)
  log.save()
"""

import json
import os
import sys
import tempfile

import numpy as np
import tensorflow as tf

STEPS = 8
OVERFLOW = 3  # The batch whose float16 gradients overflow.
# The step a resumed run starts at: a job that saves and resumes restores
# the latest checkpoint of `model_dir()` there (tests/cli/
# test_reductions_resume.py: the old TF's checkpoint, converted).
START = int(os.environ.get("REDUCTION_START", "0"))


def model_dir():
  """Where a job keeps its checkpoints: `REDUCTION_MODEL_DIR` (the recorder
  keeps old TF's; a resumed run reads the converted one) or a fresh folder."""
  return os.environ.get("REDUCTION_MODEL_DIR") or tempfile.mkdtemp()


def batch(i, size=8, features=4):
  """Batch `i`: seeded, a linear target; batch OVERFLOW is 1e4 times larger."""
  rng = np.random.RandomState(100 + i)
  x = rng.normal(size=(size, features)).astype("float32")
  y = (x @ np.linspace(0.5, 2.0, features)[:, None]).astype("float32")
  if i == OVERFLOW:
    x *= 1e4
  return x, y


def seed(model, seed_value=0):
  """Sets every weight of `model` from a seeded generator (same on every TF).

  Keras 2 and Keras 3 initializers draw different numbers from one seed;
  numpy does not.
  """
  rng = np.random.RandomState(seed_value)
  model.set_weights([rng.uniform(-0.5, 0.5, np.shape(w)).astype(
      np.asarray(w).dtype) for w in model.get_weights()])


def two_cpus():
  """Splits the CPU in two logical devices, for a 2-replica strategy.

  Call before anything touches a device; returns the device names.
  """
  cpu = tf.config.list_physical_devices("CPU")[0]
  tf.config.set_logical_device_configuration(
      cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
  return ["/cpu:0", "/cpu:1"]


def _number(value):
  return float(np.asarray(tf.convert_to_tensor(value)))


def scale_state(opt):
  """(loss scale, counter or None) of `opt`; (None, None) if it scales none.

  Reads TF 2.3's `LossScale`, TF 2.4's tensor, Keras 3's
  `LossScaleOptimizer` (its `dynamic_scale`) and `tf.compat.v1`'s wrapper.
  """
  fixed = getattr(sys.modules["__main__"], "_FIXED_LOSS_SCALES", {})
  if id(opt) in fixed:  # A fixed scale `migrate` wrote in plain code.
    return fixed[id(opt)][1], None
  scale = getattr(opt, "loss_scale", None)
  if scale is None:
    scale = getattr(opt, "_loss_scale", None)  # tf.compat.v1's wrapper.
  if scale is not None:
    if callable(scale) and not tf.is_tensor(scale):  # A TF 2.3 LossScale.
      counter = getattr(scale, "_num_good_steps", None)
      return _number(scale()), None if counter is None else int(
          _number(counter))
    counter = opt.dynamic_counter if getattr(opt, "dynamic", False) else None
    return _number(scale), None if counter is None else int(_number(counter))
  if hasattr(opt, "dynamic_scale"):  # Keras 3's own wrapper.
    return _number(opt.dynamic_scale), int(_number(opt.step_counter))
  return None, None


def iterations(opt):
  """The steps `opt` counted: Keras 3's wrapper counts applied steps only."""
  if not hasattr(opt, "loss_scale") and hasattr(opt, "inner_optimizer"):
    opt = opt.inner_optimizer
  count = getattr(opt, "iterations", None)
  return None if count is None else int(_number(count))


def _values(variables):
  # v.numpy(): TF 2.3's AutoCastVariable is no array to numpy.
  return [np.array(v.numpy()) for v in variables]


class Log:
  """The per-step record of one run, written as JSON to `sys.argv[1]`."""

  def __init__(self, model):
    self.model = model
    self.steps = []
    self._last = _values(model.weights)

  def step(self, loss, opt):
    """Records one step: its loss, and `opt`'s state after it."""
    now = _values(self.model.weights)
    skipped = all(np.array_equal(a, b) for a, b in zip(self._last, now))
    self._last = now
    scale, counter = scale_state(opt)
    self.steps.append({
        "loss": _number(loss), "skipped": bool(skipped),
        "loss_scale": scale, "counter": counter,
        "iterations": iterations(opt)})

  def save(self):
    with open(sys.argv[1], "w") as f:
      json.dump({"steps": self.steps,
                 "weights": [w.tolist() for w in _values(self.model.weights)]},
                f)
