"""TF 2.3/2.4 job code on tf_keras reproduces real TF 2.3.4/2.4.4 per step.

The scenarios (scenarios.py) run unchanged after `install()`; their per-step
loss scale, counter, skipped steps and iterations must equal what the real
TF 2.4.4 and 2.3.4 recorded for the same code
(tools/gen_legacy_keras_trajectories.py).
"""

import json
import os

import pytest

import tf_mixed_precision_compat as mp
from tests.legacy_keras import scenarios

_FIXTURES = os.path.join(os.path.dirname(__file__), "..", "fixtures",
                         "legacy_keras")


def _recorded(version):
  with open(os.path.join(_FIXTURES, f"trajectories_tf{version}.json")) as f:
    return json.load(f)


@pytest.fixture(autouse=True)
def _installed():
  mp.install()
  try:
    yield
  finally:
    mp.uninstall()


@pytest.mark.parametrize("name", sorted(scenarios.SCENARIOS))
def test_matches_tf24_and_tf23(name):
  got = scenarios.SCENARIOS[name]()
  tf24 = _recorded("24")
  assert (tf24["steps"], tuple(tf24["poisoned"])) == (scenarios.STEPS,
                                                       scenarios.POISONED)
  assert got == tf24["scenarios"][name]
  assert any(step["skipped"] for step in got)
  tf23 = _recorded("23")["scenarios"][name]
  assert got == tf23
