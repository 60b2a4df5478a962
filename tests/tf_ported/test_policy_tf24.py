"""TF 2.4's Keras dtype-policy unit tests, ported to the package.

Original: tensorflow/python/keras/mixed_precision/policy_test.py (TF r2.4),
which tested `Policy`, the experimental `PolicyV1`, the global policy and
policy (de)serialization. Here `Policy`, `PolicyV1` (the experimental
`Policy`), `global_policy` and `set_policy` are reached through
`tf.keras.mixed_precision[.experimental]` after `install()`; `policy_scope`,
`serialize` and `deserialize`, which TF exported nowhere, come from the
package's `policy` module. Inputs, expected values and assertions are the
original's. TF ran every case in a TF1 graph and eagerly; policies are not
graph state, so the graph half runs inside `tf.Graph().as_default()`. TF
mocked `tf_logging.warn`; here the TF logger's messages are captured.

Not ported: the original's V1 dtype behavior case. TF 2.4 refused global
policies under the V1 dtype behavior (`disable_v2_dtype_behavior`), which
Keras 3 does not have; global policies can always be set, in a
`tf.compat.v1` graph too (the "graph" cases here).
"""

import contextlib

import pytest
import tensorflow as tf

from tests import testing
from tf_mixed_precision_compat import policy as policy_module

MODES = ("graph", "eager")


def _policy(*args, **kwargs):
  return tf.keras.mixed_precision.Policy(*args, **kwargs)


def _policy_v1(*args, **kwargs):
  return tf.keras.mixed_precision.experimental.Policy(*args, **kwargs)


def _global_name():
  return tf.keras.mixed_precision.global_policy().name


def _context(mode):
  return tf.Graph().as_default() if mode == "graph" else (
      contextlib.nullcontext())


@pytest.fixture(name="mode", params=MODES)
def _mode(request):
  with _context(request.param):
    yield request.param


def test_dtype_attributes(mode):
  del mode
  for dtype in ("int32", "bool", "float16", "float32"):
    policy = _policy(dtype)
    assert policy.name == dtype
    assert policy.compute_dtype == dtype
    assert policy.variable_dtype == dtype
  for dtype in ("float16", "bfloat16"):
    policy = _policy("mixed_" + dtype)
    assert policy.name == "mixed_" + dtype
    assert policy.compute_dtype == dtype
    assert policy.variable_dtype == "float32"
  policy = _policy("_infer")
  assert policy.compute_dtype is None
  assert policy.variable_dtype is None


def test_repr(mode):
  del mode
  for name in ("float32", "int8", "mixed_float16", "mixed_bfloat16",
               "_infer"):
    assert repr(_policy(name)) == f'<Policy "{name}">'
  for name in ("float32", "int8", "mixed_bfloat16", "_infer"):
    assert repr(_policy_v1(name)) == f'<PolicyV1 "{name}", loss_scale=None>'
  assert (repr(_policy_v1("float16", loss_scale=2)) ==
          '<PolicyV1 "float16", loss_scale=FixedLossScale(2.0)>')
  assert repr(_policy_v1("mixed_float16")).startswith(
      '<PolicyV1 "mixed_float16", loss_scale=DynamicLossScale(')


@pytest.mark.parametrize("name,error,message", [
    ("abc", ValueError, "Cannot convert value abc to a mixed precision "
     "Policy."),
    (tf.float16, TypeError, "'name' must be a string, not a DType. Instead, "
     "pass DType.name. Got: float16"),
    (5, TypeError, "'name' must be a string, but got: 5"),
    ("infer_float32_vars", ValueError, "Policies ending in '_float32_vars' "
     "have been removed from TensorFlow. Please use the 'mixed_float16' or "
     "'mixed_bfloat16' policy instead. Got policy name: "
     "'infer_float32_vars'"),
    ("float16_with_float32_vars", ValueError, "Policies ending in "
     "'_float32_vars' have been removed from TensorFlow. Please use the "
     "'mixed_float16' policy instead. Got policy name: "
     "'float16_with_float32_vars'"),
    ("bfloat16_with_float32_vars", ValueError, "Policies ending in "
     "'_float32_vars' have been removed from TensorFlow. Please use the "
     "'mixed_bfloat16' policy instead. Got policy name: "
     "'bfloat16_with_float32_vars'"),
    ("int8_with_float32_vars", ValueError, "Policies ending in "
     "'_float32_vars' have been removed from TensorFlow. Got policy name: "
     "'int8_with_float32_vars'"),
], ids=["string", "dtype", "int", "infer_float32_vars", "float16_vars",
        "bfloat16_vars", "int8_vars"])
def test_policy_errors(mode, name, error, message):
  del mode
  with pytest.raises(error) as info:
    _policy(name)
  assert message in str(info.value)


def test_loss_scale(mode):
  del mode
  exp = tf.mixed_precision.experimental
  assert _policy_v1("float32").loss_scale is None
  assert _policy_v1("float32", loss_scale=None).loss_scale is None
  ls = exp.DynamicLossScale()
  assert _policy_v1("float32", loss_scale=ls).loss_scale is ls
  assert isinstance(_policy_v1("float32", loss_scale="dynamic").loss_scale,
                    exp.DynamicLossScale)
  assert isinstance(_policy_v1("mixed_float16").loss_scale,
                    exp.DynamicLossScale)
  assert _policy_v1("mixed_float16", loss_scale=None).loss_scale is None
  assert _policy_v1("mixed_bfloat16").loss_scale is None


def test_global_policy(mode):
  del mode
  set_policy = tf.keras.mixed_precision.experimental.set_policy
  assert _global_name() == "float32"
  try:
    set_policy("mixed_float16")
    assert _global_name() == "mixed_float16"
    with tf.Graph().as_default():  # Not per graph.
      assert _global_name() == "mixed_float16"
    set_policy("_infer")
    assert _global_name() == "_infer"
    policy = _policy("mixed_bfloat16")
    set_policy(policy)
    assert tf.keras.mixed_precision.global_policy() is policy
  finally:
    set_policy(None)


@pytest.mark.parametrize("policy", ["int32", "complex64"])
def test_global_policy_dtype_error(mode, policy):
  del mode
  expected = ("set_policy can only be used to set the global policy to "
              'floating-point policies, such as "float32" and '
              f'"mixed_float16", but got policy: {policy}')
  with pytest.raises(ValueError) as info:
    tf.keras.mixed_precision.experimental.set_policy(
        policy if policy == "int32" else _policy(policy))
  assert expected in str(info.value)


def test_loss_scale_warning(mode):
  del mode
  expected = ("Creating a Policy with a loss scale is only useful for float16 "
              "policies. You passed loss_scale=2.0 for policy float32. "
              "Consider not passing any loss_scale instead.")
  with testing.capture_tf_log() as messages:
    _policy_v1("float32", loss_scale=2.)
  assert messages and messages[-1] == expected

  for name in ("float16", "mixed_float16"):
    with testing.capture_tf_log() as messages:
      # The first call logs the once-only warnings (which capture_tf_log
      # re-arms); the second logs nothing.
      _policy_v1(name, loss_scale=2.)
      del messages[:]
      _policy_v1(name, loss_scale=2.)
    assert not messages


def test_device_compatibility_warning():
  # TF ran this eagerly only. No GPU here, so the check warns.
  with testing.capture_tf_log() as messages:
    _policy("mixed_float16")
  if tf.config.list_physical_devices("GPU"):
    assert not messages
  else:
    assert any(m.startswith("Mixed precision compatibility check "
                            "(mixed_float16): WARNING") for m in messages)


def test_policy_scope(mode):
  del mode
  with policy_module.policy_scope("mixed_float16"):
    assert _global_name() == "mixed_float16"
    with policy_module.policy_scope("_infer"):
      assert _global_name() == "_infer"
    assert _global_name() == "mixed_float16"
  assert _global_name() == "float32"


def test_config(mode):
  del mode
  for name in ("float16", "float32", "int16", "mixed_float16",
               "mixed_bfloat16", "_infer"):
    policy = _policy(name)
    restored = tf.keras.mixed_precision.Policy.from_config(policy.get_config())
    # TF compared strings, as its policies had no __eq__.
    assert str(policy) == str(restored)


def test_serialization(mode):
  del mode
  serialize = policy_module.serialize
  deserialize = policy_module.deserialize
  # Policies equivalent to one dtype serialize to its name.
  for name in ("float16", "float32", "int8", "string", "bool"):
    policy = _policy(name)
    config = serialize(policy)
    assert config == name
    assert str(deserialize(config)) == str(policy)

  # "_infer" serializes to None.
  policy = _policy("_infer")
  config = serialize(policy)
  assert config is None
  assert str(deserialize(config)) == str(policy)

  class MyPolicy(tf.keras.mixed_precision.Policy):
    pass

  # Other policies serialize to a class name and config.
  for policy in (_policy("mixed_float16"), _policy("mixed_bfloat16"),
                 MyPolicy("float32")):
    config = serialize(policy)
    assert config == {"class_name": type(policy).__name__,
                      "config": {"name": policy.name}}
    restored = deserialize(config, custom_objects={"MyPolicy": MyPolicy})
    assert str(restored) == str(policy)

  # V1 policies carry their loss scale.
  for name in ("float32", "mixed_float16", "mixed_bfloat16"):
    for loss_scale in (2., None):
      policy = _policy_v1(name, loss_scale=loss_scale)
      expected_loss_scale = None
      if policy.loss_scale:
        expected_loss_scale = {"class_name": "FixedLossScale",
                               "config": {"loss_scale_value": 2.}}
      assert serialize(policy) == {
          "class_name": type(policy).__name__,
          "config": {"name": policy.name, "loss_scale": expected_loss_scale},
      }


def test_error_if_graph_rewrite_enabled(mode):
  del mode
  try:
    tf.train.experimental.enable_mixed_precision_graph_rewrite(
        tf.keras.optimizers.SGD(1.))
    with pytest.raises(ValueError, match='cannot be set to "mixed_float16", '
                       ".* the mixed precision graph rewrite has already been "
                       "enabled"):
      tf.keras.mixed_precision.experimental.set_policy("mixed_float16")
    with policy_module.policy_scope("float64"):
      pass  # Policies that are not mixed are allowed.
  finally:
    tf.train.experimental.disable_mixed_precision_graph_rewrite()

