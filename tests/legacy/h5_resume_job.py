"""The CosmoFlow-like TF 2.4.4 job of tools/gen_h5_resume_job.py, both targets.

Its recorded run (tests/fixtures/legacy/<case>.json and the H5 checkpoints
next to it) and its model as the job's code builds it, through `tf.keras`
(Keras 3 or tf_keras, whichever the target is). Used by
tests/legacy/test_h5_resume.py and tests/targets/tf_keras/test_tf_keras_h5.py.
"""

import json

import numpy as np
import tensorflow as tf

from tests import testing

# Per-epoch losses and metrics of a float16 model after two epochs on
# another implementation of the same ops.
RTOL = 1e-2


def job(case):
  """The recorded `(meta, x, y, path of the epoch-2 H5 file)` of `case`."""
  with open(testing.fixture_path("legacy", case + ".json")) as f:
    meta = json.load(f)
  x = np.array(meta["x"], np.float32)
  y = np.array(meta["y"], np.float32)
  return meta, x, y, testing.fixture_path("legacy", case, "checkpoint-2.h5")


def resume(model, meta, x, y):
  """Fits on from the recorded epoch; returns the history."""
  return model.fit(x, y, batch_size=meta["batch_size"], epochs=meta["epochs"],
                   initial_epoch=meta["resume_epoch"], shuffle=False,
                   verbose=0).history


def assert_history(got, meta):
  """`got` has TF 2.4.4's resumed losses and metrics, within RTOL."""
  want = meta["resumed_history"]
  assert sorted(got) == sorted(want)
  for key, values in want.items():
    np.testing.assert_allclose(got[key], values, rtol=RTOL, err_msg=key)


def built_in_code(optimizer=None, loss="mean_squared_error"):
  """The job's model as its code builds it (layer names as in the file).

  Args:
    optimizer: What to compile with; by default the job's own
      LossScaleOptimizer of a momentum SGD.
    loss: The loss to compile with, as the target's test spells it.

  Returns:
    The compiled model.

  Example:
    >>> model = built_in_code()
  """
  k = tf.keras
  inputs = k.Input((4, 4, 4, 1), name="cube")
  h = k.layers.Conv3D(4, 2, strides=2, name="conv")(inputs)
  h = k.layers.LeakyReLU(name="act")(h)
  h = k.layers.Flatten(name="flat")(h)
  h = k.layers.Dense(8, activation="relu", name="fc1")(h)
  h = k.layers.Dense(2, activation="tanh", name="fc2")(h)
  outputs = k.layers.Activation("linear", dtype="float32", name="out")(h)
  outputs = k.layers.Lambda(lambda t: t * 1.2, dtype="float32",
                            name="scale_1p2")(outputs)
  model = k.Model(inputs, outputs, name="cosmoflow_tiny")
  model.compile(
      optimizer=optimizer or k.mixed_precision.LossScaleOptimizer(
          k.optimizers.SGD(learning_rate=0.05, momentum=0.9),
          initial_scale=2.0 ** 15, dynamic_growth_steps=3),
      loss=loss, metrics=["mean_absolute_error"])
  return model
