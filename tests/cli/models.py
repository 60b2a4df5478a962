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
      keras.layers.Dense(32, activation="relu", dtype=policy, name="dense"),
      keras.layers.Dense(8, activation="relu", dtype=policy, name="dense_1"),
      keras.layers.Dense(1, dtype=policy, name="dense_2"),
  ], name="narrow")


def seq_model():
  """The `seq` fixtures' model (ckpt_tf2X_seq_*): Dense 6, Dense 1."""
  policy = "mixed_float16"
  return keras.Sequential([
      keras.Input((4,)),
      keras.layers.Dense(6, activation="relu", dtype=policy, name="hidden"),
      keras.layers.Dense(1, dtype=policy, name="logits"),
      keras.layers.Activation("linear", dtype="float32", name="out"),
  ], name="seq")


class Net(keras.Model):
  """The `sub` fixtures' subclassed model (the generator's, in Keras 3): an
  encoder and a list of heads."""

  def __init__(self):
    super().__init__(name="net")
    self.encoder = keras.layers.Dense(5, activation="relu", name="encoder",
                                      dtype="mixed_float16")
    self.heads = [
        keras.layers.Dense(3, activation="relu", name="head0",
                           dtype="mixed_float16"),
        keras.layers.Dense(1, name="head1", dtype="mixed_float16")]
    self.out = keras.layers.Activation("linear", dtype="float32", name="out")

  def call(self, x):
    x = self.encoder(x)
    for head in self.heads:
      x = head(x)
    return self.out(x)


def sub_model():
  """The `sub` fixtures' model (ckpt_tf2X_sub_*), built."""
  model = Net()
  model(keras.ops.zeros((1, 4)))
  return model


def func_model():
  """The `func` fixtures' model (ckpt_tf2X_func_*): Dense, BatchNorm, Dense."""
  policy = "mixed_float16"
  x = keras.Input((4,), name="x")
  h = keras.layers.Dense(6, dtype=policy, name="d1")(x)
  h = keras.layers.BatchNormalization(dtype=policy, name="bn")(h)
  h = keras.layers.Activation("relu", dtype=policy, name="relu")(h)
  h = keras.layers.Dense(1, dtype=policy, name="d2")(h)
  out = keras.layers.Activation("linear", dtype="float32", name="out")(h)
  return keras.Model(x, out)


def func_model_swapped():
  """`func_model` with BatchNorm after the second Dense: another structure."""
  policy = "mixed_float16"
  x = keras.Input((4,), name="x")
  h = keras.layers.Dense(6, dtype=policy, name="d1")(x)
  h = keras.layers.Dense(1, dtype=policy, name="d2")(h)
  h = keras.layers.BatchNormalization(dtype=policy, name="bn")(h)
  return keras.Model(x, h)


def resume_func_model():
  """The `functional` model of tests/fixtures/resume (Dense 6, Dense 1)."""
  policy = "mixed_float16"
  x = keras.Input((4,), name="x")
  h = keras.layers.Dense(6, activation="relu", dtype=policy, name="d1")(x)
  h = keras.layers.Dense(1, dtype=policy, name="d2")(h)
  out = keras.layers.Activation("linear", dtype="float32", name="out")(h)
  return keras.Model(x, out, name="func")


def trainer_job_model():
  """tests/cli/job_trainer's model, its layers named as TF 2.3.4 named them."""
  policy = "mixed_float16"
  return keras.Sequential([
      keras.Input((6,)),
      keras.layers.Dense(16, activation="relu", dtype=policy, name="dense"),
      keras.layers.Dense(8, activation="relu", dtype=policy, name="dense_1"),
      keras.layers.Dense(1, dtype=policy, name="dense_2"),
      keras.layers.Activation("linear", dtype="float32", name="activation"),
  ])
