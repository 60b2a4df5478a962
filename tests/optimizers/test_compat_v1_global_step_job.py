"""A TF 2.3-era `tf.compat.v1` job that increments `global_step` itself.

The job (tools/gen_v1_global_step_job.py, shared with this test): an
AdamW-like subclass of `tf.compat.v1.train.AdamOptimizer` wrapped in the v1
`MixedPrecisionLossScaleOptimizer` with a dynamic loss scale, a learning rate
computed from `global_step` outside the optimizer, and `apply_gradients`
built under `control_dependencies([global_step.assign_add(1)])`; one step
overflows. Its variables after every step must be TF 2.4.4's and TF 2.3.4's
(recorded fixtures), with this package's optimizer as with TF 2.21's own
`tf.compat.v1.mixed_precision.MixedPrecisionLossScaleOptimizer`. Also with
TF1 behaviour (`tf.compat.v1.disable_v2_behavior()`, as TF1-style scripts
ran: reference variables, control flow v1), in a fresh interpreter since it
is process-wide.
"""

import importlib.util
import json
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from tests import testing
from tf_mixed_precision_compat.optimizers.compat_v1_optimizer import (
    MixedPrecisionLossScaleOptimizer)

_ROOT = testing.REPO_ROOT
_FIXTURES = os.path.join(_ROOT, "tests", "fixtures", "v1_optimizer")


def _job_module():
  path = os.path.join(_ROOT, "tools", "gen_v1_global_step_job.py")
  spec = importlib.util.spec_from_file_location("gen_v1_global_step_job",
                                                path)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


_JOB = _job_module()


def _recorded(version, tf1=False):
  name = f"global_step_job_tf{version}{'_tf1' if tf1 else ''}.json"
  with open(os.path.join(_FIXTURES, name)) as f:
    return json.load(f)


def _ours(inner):
  return MixedPrecisionLossScaleOptimizer(inner, "dynamic")


def _tf_own(inner):
  return tf.compat.v1.mixed_precision.MixedPrecisionLossScaleOptimizer(
      inner, "dynamic")


def _assert_steps_equal(actual, expected):
  assert len(actual) == len(expected)
  for step, (got, want) in enumerate(zip(actual, expected)):
    for value, recorded in zip(got, want):
      np.testing.assert_allclose(value, recorded, rtol=1e-6, atol=0,
                                 err_msg=f"step {step}")


@pytest.mark.parametrize("tf1", [False, True], ids=["tf2", "tf1"])
def test_fixtures_cover_the_job(tf1):
  for version in ("24", "23"):
    record = _recorded(version, tf1)
    assert record["tensorflow"].startswith(f"2.{version[1]}.")
    assert record["tf1_behavior"] is tf1
    assert sorted(record["variants"]) == sorted(_JOB.VARIANTS)
    assert record["step_factors"] == _JOB.STEP_FACTORS


@pytest.mark.parametrize("variant", _JOB.VARIANTS)
def test_ours_ends_with_tf24_and_tf23_weights(variant):
  steps = _JOB.run_job(_ours, variant)
  _assert_steps_equal(steps, _recorded("24")["variants"][variant])
  _assert_steps_equal(steps, _recorded("23")["variants"][variant])
  if "gs" not in variant.split(","):
    # The job increments global_step on every step, the skipped one too.
    assert [s[-1] for s in steps] == list(
        range(1, len(_JOB.STEP_FACTORS) + 1))


@pytest.mark.parametrize("variant", ["plain", "lrfirst,sparse,none"])
def test_tf_own_v1_optimizer_agrees(variant):
  if not hasattr(tf.compat.v1, "mixed_precision") or not hasattr(
      tf.compat.v1.mixed_precision, "MixedPrecisionLossScaleOptimizer"):
    pytest.skip("this TensorFlow no longer ships its own v1 optimizer")
  _assert_steps_equal(_JOB.run_job(_tf_own, variant),
                      _recorded("24")["variants"][variant])


_TF1_SCRIPT = """
import importlib.util, json, sys
import tensorflow as tf
tf.compat.v1.disable_v2_behavior()
from tf_mixed_precision_compat.optimizers.compat_v1_optimizer import (
    MixedPrecisionLossScaleOptimizer)
spec = importlib.util.spec_from_file_location("job", sys.argv[1])
job = importlib.util.module_from_spec(spec)
spec.loader.exec_module(job)
own = tf.compat.v1.mixed_precision.MixedPrecisionLossScaleOptimizer
makers = {"ours": lambda o: MixedPrecisionLossScaleOptimizer(o, "dynamic"),
          "tf_own": lambda o: own(o, "dynamic")}
print(json.dumps({name: {v: job.run_job(make, v) for v in job.VARIANTS}
                  for name, make in makers.items()}))
"""


def test_tf1_behaviour_job_ends_with_tf24_and_tf23_weights():
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=_ROOT)
  proc = subprocess.run(
      [sys.executable, "-c", _TF1_SCRIPT,
       os.path.join(_ROOT, "tools", "gen_v1_global_step_job.py")],
      cwd=_ROOT, env=env, capture_output=True, text=True, timeout=900,
      check=False)
  assert proc.returncode == 0, proc.stderr[-3000:]
  results = json.loads(proc.stdout.strip().splitlines()[-1])
  for version in ("24", "23"):
    recorded = _recorded(version, tf1=True)["variants"]
    for variant in _JOB.VARIANTS:
      _assert_steps_equal(results["ours"][variant], recorded[variant])
      _assert_steps_equal(results["tf_own"][variant], recorded[variant])
