"""The model and data every migrated job trains (shared, so runs agree).

Batch 4 holds values large enough that float16 gradients overflow, so each
job skips one step and halves its loss scale.
"""

import json

import numpy as np
import tensorflow as tf


def make_model():
  """A seeded two-layer model; its output float32, as TF's guide advised."""
  return tf.keras.Sequential([
      tf.keras.Input((4,)),
      tf.keras.layers.Dense(8, activation='relu', kernel_initializer=(
          tf.keras.initializers.GlorotUniform(seed=1))),
      tf.keras.layers.Dense(1, dtype='float32', kernel_initializer=(
          tf.keras.initializers.GlorotUniform(seed=2))),
  ])


def batch(i, size=8):
  rng = np.random.RandomState(100 + i)
  x = rng.normal(size=(size, 4)).astype("float32")
  y = (x @ np.arange(1.0, 5.0, dtype="float32")[:, None]).astype("float32")
  if i == 4:
    x *= 1e4
  return x, y


def save(path, **results):
  with open(path, "w") as f:
    json.dump(results, f)
