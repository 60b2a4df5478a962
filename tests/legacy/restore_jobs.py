"""Keras 3 twins of the TF 2.4.4 job of tools/gen_restore_failure_fixtures.py.

Used by the restore tests of both targets' Keras 3 side: the same custom layer
(`self.w = self.add_weight(...)`), nested in a layer and a subclassed model,
with the same names, so that TF 2.4's checkpoints of it map onto these.
"""

import json

import keras
import numpy as np
import tensorflow as tf

from tests import testing

X = np.ones((2, 4), np.float32)


def outcomes():
  """What TF 2.4.4 did (tests/fixtures/restore_failures/tf24_outcomes.json)."""
  with open(testing.fixture_path("restore_failures",
                                 "tf24_outcomes.json")) as f:
    return json.load(f)


def fixture_dir(name):
  return testing.fixture_path("restore_failures", name)


def model_classes(layer_base, model_base, matmul, relu):
  """The fixture job's `Lin`, `Block` and `Net`, for one Keras target.

  Args:
    layer_base: The target's `Layer` class (Keras 3's or tf_keras's).
    model_base: The target's `Model` class.
    matmul: The matrix product the target's job code calls.
    relu: The activation the target's job code calls.

  Returns:
    A `(Lin, Block, Net)` tuple of classes.

  Example:
    >>> Lin, Block, Net = model_classes(tf.keras.layers.Layer, tf.keras.Model,
    ...                                 tf.matmul, tf.nn.relu)
  """

  class Lin(layer_base):
    """A custom layer holding its weights as `self.w = self.add_weight(...)`."""

    def __init__(self, units, **kwargs):
      super().__init__(**kwargs)
      self.units = units

    def build(self, input_shape):
      self.w = self.add_weight(name="w", shape=(input_shape[-1], self.units),
                               initializer="glorot_uniform")
      self.b = self.add_weight(name="b", shape=(self.units,),
                               initializer="zeros")

    def call(self, x):
      return matmul(x, self.w) + self.b

  class Block(layer_base):

    def __init__(self, width, **kwargs):
      super().__init__(**kwargs)
      self.lin = Lin(width, name="lin")

    def call(self, x):
      return relu(self.lin(x))

  class Net(model_base):
    """The fixture job's model: `block.lin` (width) and `head` (1 unit)."""

    def __init__(self, width=3):
      super().__init__(name="net")
      self.block = Block(width, name="block")
      self.head = Lin(1, name="head")

    def call(self, x):
      return self.head(self.block(x))

  return Lin, Block, Net


Lin, Block, Net = model_classes(keras.layers.Layer, keras.Model,
                                keras.ops.matmul, keras.ops.relu)


def optimizer():
  """The fixture job's optimizer, through the job's own `tf.keras` spelling."""
  return tf.keras.mixed_precision.LossScaleOptimizer(
      keras.optimizers.Adam(0.01), initial_scale=2.0**10,
      dynamic_growth_steps=2000)


def step(model, opt):
  """The fixture job's training step (loss = sum(model(X)))."""
  with tf.GradientTape() as tape:
    loss = tf.reduce_sum(model(X))
    scaled = opt.get_scaled_loss(loss)
  grads = opt.get_unscaled_gradients(
      tape.gradient(scaled, model.trainable_variables))
  opt.apply_gradients(zip(grads, model.trainable_variables))


def saved_weight(record, model, variable):
  """The recorded value of `model`'s `variable` (by its TF 2.4 name)."""
  for layer, name in ((model.head, "net/head/"),
                      (model.block.lin, "net/block/lin/")):
    for attr in ("w", "b"):
      if getattr(layer, attr) is variable:
        return np.asarray(record["saved_weights"][f"{name}{attr}:0"],
                          np.float32)
  raise KeyError(variable.path)
