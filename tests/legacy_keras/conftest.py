"""The tf_keras target's tests: `tf.keras` must be tf_keras here.

Run with `TF_USE_LEGACY_KERAS=1 python -m pytest tests/legacy_keras`. TF reads
the variable when `tf.keras` is first resolved, so it cannot be set from here;
without it this folder refuses to run instead of testing Keras 3.
"""

import os

import pytest

if os.environ.get("TF_USE_LEGACY_KERAS") != "1":
  raise pytest.UsageError(
      "tests/legacy_keras needs TF_USE_LEGACY_KERAS=1 in the environment "
      "before TensorFlow is imported: TF_USE_LEGACY_KERAS=1 python -m pytest "
      "tests/legacy_keras")
