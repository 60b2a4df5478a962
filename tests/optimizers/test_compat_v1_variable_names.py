"""The v1 loss-scale optimizer's graph names its variables as TF 2.3/2.4 did.

`tf.compat.v1.train.Saver` restores by variable name, so an old TF1-style job
resumes only if its graph's names are TF's. Adam's non-slot variables take
the name scope of the conditional apply, whose name depends on how many
conditionals the loss-scale update built before it (TF: one, so
`cond_1/beta1_power`). The graphs (`tools/gen_v1_variable_names.py`) need v2
behaviour disabled, which is process-wide, so they are built in a subprocess.
"""

import functools
import json
import os
import subprocess
import sys

import pytest

from tests import testing

_TOOL = os.path.join(testing.REPO_ROOT, "tools",
                     "gen_v1_variable_names.py")


@functools.lru_cache(maxsize=None)
def _ours():
  result = subprocess.run([sys.executable, _TOOL, "--ours"],
                          capture_output=True, text=True, check=False,
                          env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
  assert result.returncode == 0, result.stderr[-3000:]
  return json.loads(result.stdout.strip().splitlines()[-1])["cases"]


def _recorded(version):
  with open(testing.fixture_path("v1_optimizer",
                                 f"variable_names_tf{version}.json")) as f:
    return json.load(f)["cases"]


@pytest.mark.parametrize("version", ["23", "24"])
def test_variable_names_equal_tf(version):
  recorded = _recorded(version)
  ours = _ours()
  assert sorted(ours) == sorted(recorded)
  for case, names in recorded.items():
    assert ours[case] == names, case


def test_recording_covers_the_conditional_apply_name():
  # The cases must include the names that differ with the cond count, or the
  # comparison above could not fail on them.
  names = _recorded("24")
  assert "cond_1/beta1_power:0" in names["adam_dynamic_ref"]
  assert "train/cond_1/beta2_power:0" in names["adam_dynamic_scoped_ref"]
  assert "beta1_power:0" in names["adam_fixed_ref"]
