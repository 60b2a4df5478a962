"""The tf_keras target's tests: `tf.keras` must be tf_keras here.

Run with `TF_USE_LEGACY_KERAS=1 python -m pytest tests/targets/tf_keras`. TF
reads
the variable when `tf.keras` is first resolved, so it cannot be set from here;
without it this folder refuses to run instead of testing Keras 3.
"""

import os

import pytest

if os.environ.get("TF_USE_LEGACY_KERAS") != "1":
  raise pytest.UsageError(
      "tests/targets/tf_keras needs TF_USE_LEGACY_KERAS=1 in the environment "
      "before TensorFlow is imported: TF_USE_LEGACY_KERAS=1 python -m pytest "
      "tests/targets/tf_keras")


@pytest.fixture
def installed_then_float32():
  """The package installed; tf.keras's global policy float32 again after.

  For tests that set a global mixed-precision policy on the tf_keras target.
  """
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  import tf_mixed_precision_compat as mp  # pylint: disable=g-import-not-at-top
  mp.install()
  try:
    yield
  finally:
    tf.keras.mixed_precision.set_global_policy("float32")
    mp.uninstall()
