"""TF 2.3/2.4 job code reproduces real TF 2.3.4/2.4.4 per step, on both targets.

The scenarios (scenarios.py) run unchanged after `install()`; their per-step
loss scale, counter, skipped steps and iterations must equal what the real
TF 2.4.4 and 2.3.4 recorded for the same code
(tools/gen_legacy_keras_trajectories.py). The default run tests the Keras 3
target, `TF_USE_LEGACY_KERAS=1` the tf_keras one.
"""

import json
import os

import pytest

from tests.targets.both import scenarios
from tf_mixed_precision_compat import keras_target

_FIXTURES = os.path.join(os.path.dirname(__file__), "..", "..", "fixtures",
                         "legacy_keras")
# Keras 3 optimizers cannot run in a tf.compat.v1 Session (their variables
# are not graph tensors; `sess.run` refuses them), so a TF1 session job
# whose loss-scale optimizer wraps a Keras optimizer needs tf_keras.
_TF_KERAS_ONLY = {"graph_session": "Keras 3 optimizers do not run in "
                                   "tf.compat.v1 Sessions; use tf_keras"}


def _recorded(version):
  with open(os.path.join(_FIXTURES, f"trajectories_tf{version}.json")) as f:
    return json.load(f)


pytestmark = pytest.mark.usefixtures("installed")


@pytest.mark.parametrize("name", sorted(scenarios.SCENARIOS))
def test_matches_tf24_and_tf23(name):
  if name in _TF_KERAS_ONLY and keras_target.active() != keras_target.TF_KERAS:
    pytest.skip(_TF_KERAS_ONLY[name])
  got = scenarios.SCENARIOS[name]()
  tf24 = _recorded("24")
  assert (tf24["steps"], tuple(tf24["poisoned"])) == (scenarios.STEPS,
                                                       scenarios.POISONED)
  assert got == tf24["scenarios"][name]
  assert any(step["skipped"] for step in got)
  tf23 = _recorded("23")["scenarios"][name]
  assert got == tf23


def test_keras3_session_job_fails_loudly_not_silently():
  if keras_target.active() == keras_target.TF_KERAS:
    pytest.skip("the tf_keras target runs this job (test above)")
  with pytest.raises(TypeError, match="Variable"):
    scenarios.SCENARIOS["graph_session"]()
