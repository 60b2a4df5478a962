"""Test-session set-up: two logical CPUs, configured before TF initialises.

Every stateful behaviour is tested under a 2-replica MirroredStrategy, which
needs the logical devices to exist before TensorFlow's runtime starts; pytest
imports this file before any test module, so this is the place.
"""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

# tests/targets/tf_keras/ needs `tf.keras` to be tf_keras, which TF decides at
# import from TF_USE_LEGACY_KERAS; CI runs it as a second pytest invocation
# with the variable set (see .ci/run), and the default run leaves it out.
collect_ignore = ([] if os.environ.get("TF_USE_LEGACY_KERAS") == "1" else
                  ["targets/tf_keras"])

from absl import flags  # pylint: disable=g-import-not-at-top,wrong-import-position
import pytest  # pylint: disable=g-import-not-at-top,wrong-import-position
import tensorflow as tf  # pylint: disable=g-import-not-at-top,wrong-import-position

from tests import testing  # pylint: disable=g-import-not-at-top,wrong-import-position

_CPU = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(
    _CPU, [tf.config.LogicalDeviceConfiguration()] * 2)

NUM_REPLICAS = 2

# absltest helpers such as `create_tempdir` read absl flags, which pytest never
# parses; the defaults are what we want.
flags.FLAGS.mark_as_parsed()

# Parallel runs (`-n 2 --dist loadfile`, README's test command): each test
# file runs whole on one worker, so module- and class-level fixtures are
# built once and a file's tests keep their order. The files below take the
# longest, so they are handed out first: started last, one of them would
# leave the other worker idle at the end.
_LONGEST_FIRST = (
    "tests/end_to_end/test_benchmark.py",
    "tests/optimizers/test_step_peak_memory.py",
    "tests/optimizers/test_gated_apply.py",
    "tests/install/test_import_forms.py",
    "tests/end_to_end/test_examples.py",
    "tests/targets/both/test_examples.py",
    "tests/reliability/test_properties.py",
)


def pytest_configure(config):
  if config.getoption("dist", "no") == "loadfile":
    # Hand files out in the order collected (below), not by test count.
    config.option.loadscopereorder = False


def pytest_collection_modifyitems(config, items):
  del config
  if not os.environ.get("PYTEST_XDIST_WORKER"):
    return
  rank = {path: i for i, path in enumerate(_LONGEST_FIRST)}
  items.sort(key=lambda item: rank.get(item.nodeid.split("::")[0],
                                       len(rank)))


@pytest.fixture(autouse=True)
def _fresh_collective_keys():
  """Gives every test's MirroredStrategy its own collective keys.

  Each new MirroredStrategy restarts TF's collective group/instance keys at
  the same values; when two strategies in one process all-reduce tensors of
  different shapes under the same keys, the runtime aborts ("Shape mismatch
  in the collective instance"). TF's own tests move the key base per test.
  """
  tf.distribute.MirroredStrategy._collective_key_base += 100  # pylint: disable=protected-access
  yield


@pytest.fixture(autouse=True)
def _keras_global_dtype_policy_restored():
  """Keeps one test's global policy from deciding another's layer dtypes."""
  import keras  # pylint: disable=g-import-not-at-top
  previous = keras.config.dtype_policy()
  yield
  keras.config.set_dtype_policy(previous)


@pytest.fixture
def mirrored_strategy():
  """A MirroredStrategy over the two logical CPUs."""
  strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
  assert strategy.num_replicas_in_sync == NUM_REPLICAS
  return strategy


@pytest.fixture
def tf_log():
  """Messages logged to TF's logger during the test (see testing.py)."""
  with testing.capture_tf_log() as messages:
    yield messages


@pytest.fixture
def installed():
  """The package installed for the test, uninstalled afterwards."""
  import tf_mixed_precision_compat as mp  # pylint: disable=g-import-not-at-top
  mp.install()
  try:
    yield
  finally:
    mp.uninstall()
