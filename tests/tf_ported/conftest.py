"""Set-up for the ported TF 2.4 unit tests.

Every test here runs with the package installed (the ported tests reach the
classes through `tf.*` as TF 2.4's users did) and leaves the install state
and Keras' global dtype policy as it found them.
"""

import keras
import pytest

import tf_mixed_precision_compat as mp


@pytest.fixture(autouse=True)
def _installed_for_test():
  was_installed = mp.installed()
  policy = keras.config.dtype_policy()
  if not was_installed:
    mp.install()
  try:
    yield
  finally:
    if not was_installed:
      mp.uninstall()
    keras.config.set_dtype_policy(policy)
