"""`convert --model` builders of the reductions that save and resume.

Written as docs/migration.md tells a user whose script trains at import: the
job's model code copied into a module that only builds it (Keras 3, no
package import). One function per reduction of tests/cli/reductions.
"""

import keras


def mlcommons_resnet_runnable():
  """`resnet()` of mlcommons_resnet_runnable.py, under its policy."""
  keras.mixed_precision.set_global_policy("mixed_float16")
  regularizer = keras.regularizers.l2(1e-4)
  return keras.Sequential([
      keras.Input(shape=(4,)),
      keras.layers.Dense(8, activation="relu",
                         kernel_regularizer=regularizer),
      keras.layers.Dense(2, kernel_regularizer=regularizer),
      keras.layers.Activation("softmax", dtype="float32")])


def model_garden_detection_base_model():
  """`DetectionModel.build_model()`'s model, under its bfloat16 policy."""
  keras.mixed_precision.set_global_policy("mixed_bfloat16")
  return keras.Sequential([
      keras.Input(shape=(4,)),
      keras.layers.Dense(8, activation="relu"),
      keras.layers.Dense(1, dtype="float32")])
