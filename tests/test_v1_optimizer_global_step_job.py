"""A TF 2.3-era `tf.compat.v1` job that increments `global_step` itself.

The job (tools/gen_v1_global_step_job.py, shared with this test): an
AdamW-like subclass of `tf.compat.v1.train.AdamOptimizer` wrapped in the v1
`MixedPrecisionLossScaleOptimizer` with a dynamic loss scale, a learning rate
computed from `global_step` outside the optimizer, and `apply_gradients`
built under `control_dependencies([global_step.assign_add(1)])`; one step
overflows. Its variables after every step must be TF 2.4.4's and TF 2.3.4's
(recorded fixtures), with this package's optimizer as with TF 2.21's own
`tf.compat.v1.mixed_precision.MixedPrecisionLossScaleOptimizer`.
"""

import importlib.util
import json
import os

import numpy as np
import pytest
import tensorflow as tf

from tf_mixed_precision_compat.optimizers.v1_optimizer import (
    MixedPrecisionLossScaleOptimizer)

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_FIXTURES = os.path.join(_ROOT, "tests", "fixtures", "v1_optimizer")


def _job_module():
  path = os.path.join(_ROOT, "tools", "gen_v1_global_step_job.py")
  spec = importlib.util.spec_from_file_location("gen_v1_global_step_job",
                                                path)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


_JOB = _job_module()


def _recorded(version):
  with open(os.path.join(_FIXTURES, f"global_step_job_tf{version}.json")) as f:
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


def test_fixtures_cover_the_job():
  for version in ("24", "23"):
    record = _recorded(version)
    assert record["tensorflow"].startswith(f"2.{version[1]}.")
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
