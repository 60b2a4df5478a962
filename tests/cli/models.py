"""Keras 3 model functions for the CLI tests (`--model tests.cli.models:...`).

Plain Keras 3 code, no package import: the convert verification imports
them in an interpreter where the package cannot be imported.
"""

import keras


def demo_model():
  """The TF 2.3.4 demo job's model (tests/fixtures/legacy/demo_tf23)."""
  policy = "mixed_float16"
  return keras.Sequential([
      keras.Input((8,)),
      keras.layers.Dense(32, activation="relu", dtype=policy, name="dense"),
      keras.layers.Dense(16, activation="relu", dtype=policy, name="dense_1"),
      keras.layers.Dense(1, dtype=policy, name="dense_2"),
      keras.layers.Activation("linear", dtype="float32", name="predictions"),
  ], name="regression")


def demo_model_narrow():
  """The demo model with its middle layer 8 wide instead of 16."""
  policy = "mixed_float16"
  return keras.Sequential([
      keras.Input((8,)),
      keras.layers.Dense(32, activation="relu", dtype=policy),
      keras.layers.Dense(8, activation="relu", dtype=policy),
      keras.layers.Dense(1, dtype=policy),
  ])


def seq_model():
  """The `seq` fixtures' model (ckpt_tf2X_seq_*): Dense 6, Dense 1."""
  policy = "mixed_float16"
  return keras.Sequential([
      keras.Input((4,)),
      keras.layers.Dense(6, activation="relu", dtype=policy, name="hidden"),
      keras.layers.Dense(1, dtype=policy, name="logits"),
      keras.layers.Activation("linear", dtype="float32", name="out"),
  ], name="seq")
