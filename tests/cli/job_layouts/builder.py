"""The Keras 3 builder of tools/gen_convert_layouts.py's TF 2.4.4 job.

What docs/migration.md tells a user to write for `convert --model`: the
job's model code, and, since the job's learning rate is a schedule TF 2.x
did not store, its optimizer too. It does not import the package.
"""

import keras
import tensorflow as tf


class WarmUp(keras.optimizers.schedules.LearningRateSchedule):
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


def make_model():
  """The job's model, built."""
  keras.mixed_precision.set_global_policy("mixed_float16")
  return keras.Sequential([
      keras.Input((6, 6, 2)),
      keras.layers.DepthwiseConv2D(3, depth_multiplier=2),
      keras.layers.BatchNormalization(),
      keras.layers.Flatten(),
      keras.layers.Dense(4, activation="relu"),
      keras.layers.Dense(1),
      keras.layers.Activation("linear", dtype="float32"),
  ])


def make_optimizer():
  """The job's optimizer: its schedule is its own code."""
  schedule = WarmUp(0.05, 4, keras.optimizers.schedules.ExponentialDecay(
      0.05, 5, 0.5))
  return keras.optimizers.LossScaleOptimizer(
      keras.optimizers.SGD(schedule, momentum=0.9), initial_scale=1024,
      dynamic_growth_steps=5)


def make_job():
  """`(model, optimizer)`: what `--model` takes when a schedule is there."""
  return make_model(), make_optimizer()


class Blocks(keras.Model):
  """The blocks job's model: Dense blocks in a list, a head in a dict, and
  a loss tracker."""

  def __init__(self):
    super().__init__()
    self.blocks = [keras.layers.Dense(5, activation="relu"),
                   keras.layers.Dense(3, activation="relu")]
    self.heads = {"main": keras.layers.Dense(1)}
    self.out = keras.layers.Activation("linear", dtype="float32")
    self.tracker = keras.metrics.Mean(name="loss")

  def call(self, x):
    for block in self.blocks:
      x = block(x)
    return self.out(self.heads["main"](x))


def make_blocks():
  """The blocks job's model, built."""
  keras.mixed_precision.set_global_policy("mixed_float16")
  model = Blocks()
  model(keras.ops.zeros((1, 6)))
  return model


def make_blocks_optimizer():
  return keras.optimizers.LossScaleOptimizer(
      keras.optimizers.Adam(0.01), initial_scale=256, dynamic_growth_steps=4)


def make_tfops():
  """The TF-ops job's model: Keras 3 makes no layers of the ops."""
  keras.mixed_precision.set_global_policy("mixed_float16")
  inputs = keras.Input((4,))
  h = keras.layers.Dense(6)(inputs)
  h = keras.ops.relu(h) * 0.5
  h = keras.layers.Dense(6)(h)
  h = keras.layers.Dense(6, activation="relu")(h)
  h = keras.layers.Dense(1)(h)
  return keras.Model(inputs, keras.ops.cast(h, "float32"))


def make_tfops_optimizer():
  return keras.optimizers.LossScaleOptimizer(
      keras.optimizers.SGD(0.05, momentum=0.9), initial_scale=512,
      dynamic_growth_steps=4)


def make_lambda():
  """tests/fixtures/legacy/lambda_tf2X.h5's model, its Lambda in code (the
  file's Python 3.8 bytecode does not load on Python 3.11)."""
  keras.mixed_precision.set_global_policy("mixed_float16")
  return keras.Sequential([
      keras.Input((4,)), keras.layers.Dense(2, name="d"),
      keras.layers.Lambda(lambda t: t * 2.0, name="double")],
                          name="with_lambda")


def make_adamw_model():
  """The AdamWeightDecay job's model (float32 compute)."""
  keras.mixed_precision.set_global_policy("float32")
  return keras.Sequential([keras.Input((5,)),
                           keras.layers.Dense(4, activation="tanh"),
                           keras.layers.Dense(1)])


def make_adamw_job():
  """`(model, optimizer)`: Keras 3's AdamW for Model Garden's
  AdamWeightDecay(0.01, weight_decay_rate=0.1,
  exclude_from_weight_decay=["bias"]): the same decoupled decay, before
  Adam's update, on the same variables (Keras 3 matches the patterns against
  a variable's own name, `bias`, TF 2.x against `dense/bias:0`; these
  agree)."""
  model = make_adamw_model()
  inner = keras.optimizers.AdamW(0.01, weight_decay=0.1)
  inner.exclude_from_weight_decay(var_names=["bias"])
  return model, keras.optimizers.LossScaleOptimizer(
      inner, initial_scale=128, dynamic_growth_steps=3)
