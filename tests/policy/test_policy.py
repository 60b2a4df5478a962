"""Tests of the dtype policies: classes, global policy, get_layer_policy."""

import json

from absl.testing import parameterized
import keras
import numpy as np
import pytest
import tensorflow as tf

from tests import testing
from tf_mixed_precision_compat import _deprecation
from tf_mixed_precision_compat import endpoints
from tf_mixed_precision_compat import _private_api
from tf_mixed_precision_compat import legacy
from tf_mixed_precision_compat import loss_scale as loss_scale_module
from tf_mixed_precision_compat import policy as policy_module
from tf_mixed_precision_compat.policy import Policy
from tf_mixed_precision_compat.policy import PolicyV1


@pytest.fixture(autouse=True)
def _restore_global_policy():
  previous = keras.config.dtype_policy()
  yield
  keras.config.set_dtype_policy(previous)


# --------------------------------------------------------------------------
# Policy


class PolicyTest(parameterized.TestCase):

  @parameterized.parameters(
      ("mixed_float16", "float16", "float32"),
      ("mixed_bfloat16", "bfloat16", "float32"),
      ("float16", "float16", "float16"),
      ("bfloat16", "bfloat16", "bfloat16"),
      ("float32", "float32", "float32"),
      ("float64", "float64", "float64"),
      ("int32", "int32", "int32"),
      ("complex64", "complex64", "complex64"),
      ("half", "float16", "float16"),  # TF's alias, canonicalised.
      ("_infer", None, None),
  )
  def test_dtypes(self, name, compute, variable):
    p = Policy(name)
    self.assertEqual(p.name, name)
    self.assertEqual(p.compute_dtype, compute)
    self.assertEqual(p.variable_dtype, variable)
    self.assertEqual(repr(p), f'<Policy "{name}">')
    self.assertEqual(p.get_config(), {"name": name})

  def test_is_a_keras_dtype_policy(self):
    self.assertIsInstance(Policy("float32"), keras.DTypePolicy)
    self.assertIsNone(Policy("mixed_float16").quantization_mode)

  @parameterized.parameters(
      ("mixed_float32", "Cannot convert value mixed_float32 to a mixed "
       "precision Policy. Valid policies include include 'mixed_float16', "
       "'mixed_bfloat16', and the name of any dtype such as 'float32'."),
      ("", "Cannot convert value  to a mixed precision Policy."),
      ("float16_with_float32_vars",
       "Policies ending in '_float32_vars' have been removed from TensorFlow. "
       "Please use the 'mixed_float16' policy instead. Got policy name: "
       "'float16_with_float32_vars'"),
      ("bfloat16_with_float32_vars", "Please use the 'mixed_bfloat16' policy "
       "instead. Got policy name: 'bfloat16_with_float32_vars'"),
      ("infer_float32_vars", "Please use the 'mixed_float16' or "
       "'mixed_bfloat16' policy instead. Got policy name: "
       "'infer_float32_vars'"),
      ("xyz_float32_vars", "removed from TensorFlow. Got policy name: "
       "'xyz_float32_vars'"),
  )
  def test_bad_names(self, name, message):
    with self.assertRaises(ValueError) as cm:
      Policy(name)
    self.assertIn(message, str(cm.exception))
    with self.assertRaises(ValueError):
      PolicyV1(name)

  def test_bad_types(self):
    with self.assertRaisesRegex(TypeError,
                                "^'name' must be a string, but got: 3$"):
      Policy(3)
    with self.assertRaisesRegex(TypeError, "but got: None"):
      Policy(None)  # Unlike keras.DTypePolicy, None is no name.
    with self.assertRaisesRegex(
        TypeError, "^'name' must be a string, not a DType. Instead, pass "
        "DType.name. Got: float32$"):
      Policy(tf.float32)
    with self.assertRaisesRegex(TypeError, "must be a string"):
      PolicyV1(tf.float16)

  def test_from_config_drops_loss_scale(self):
    p = Policy.from_config({
        "name": "mixed_float16",
        "loss_scale": {"class_name": "FixedLossScale",
                       "config": {"loss_scale_value": 4.0}}})
    self.assertIs(type(p), Policy)
    self.assertEqual(p.name, "mixed_float16")
    self.assertEqual(p.get_config(), {"name": "mixed_float16"})

  def test_equality_and_hash(self):
    self.assertEqual(Policy("float32"), Policy("float32"))
    self.assertNotEqual(Policy("float32"), Policy("float64"))
    self.assertNotEqual(Policy("float32"), keras.DTypePolicy("float32"))
    self.assertLen({Policy("float32"), Policy("float32")}, 1)
    self.assertNotEqual(PolicyV1("float32"), Policy("float32"))

  def test_dense_computes_in_float16_with_float32_variables(self):
    layer = keras.layers.Dense(4, dtype=Policy("mixed_float16"))
    y = layer(tf.ones((2, 3)))
    self.assertEqual(y.dtype, tf.float16)
    self.assertEqual(layer.kernel.dtype, "float32")
    self.assertEqual(layer.compute_dtype, "float16")
    self.assertEqual(layer.variable_dtype, "float32")
    self.assertIsInstance(layer.dtype_policy, Policy)

  def test_dense_in_tf_function(self):
    layer = keras.layers.Dense(4, dtype=Policy("mixed_bfloat16"))
    fn = tf.function(layer)
    self.assertEqual(fn(tf.ones((2, 3))).dtype, tf.bfloat16)
    self.assertEqual(layer.kernel.dtype, "float32")

  def test_dense_under_mirrored_strategy(self):
    strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    with strategy.scope():
      layer = keras.layers.Dense(4, dtype=Policy("mixed_float16"))
      layer.build((None, 3))
    self.assertEqual(layer.kernel.dtype, "float32")
    outputs = strategy.run(tf.function(layer), (tf.ones((2, 3)),))
    for value in strategy.experimental_local_results(outputs):
      self.assertEqual(value.dtype, tf.float16)

  def test_float64_dense(self):
    layer = keras.layers.Dense(2, dtype=Policy("float64"))
    self.assertEqual(layer(np.ones((1, 2))).dtype, tf.float64)
    self.assertEqual(layer.kernel.dtype, "float64")

  def test_infer_on_keras3_layer_uses_floatx(self):
    # Documented: Keras 3 has no dtype inference.
    layer = keras.layers.Dense(2, dtype=Policy("_infer"))
    self.assertEqual(layer(tf.ones((1, 3), tf.float64)).dtype, tf.float32)
    self.assertEqual(layer.kernel.dtype, "float32")

  def test_keras_serialization_round_trip(self):
    layer = keras.layers.Dense(2, dtype=Policy("mixed_float16"), name="d")
    config = layer.get_config()
    self.assertEqual(config["dtype"]["class_name"], "Policy")
    with legacy.deserialization_scope():
      restored = keras.layers.Dense.from_config(config)
    self.assertEqual(restored.compute_dtype, "float16")
    self.assertEqual(restored.variable_dtype, "float32")

  @parameterized.parameters("float32", "mixed_float16")
  def test_keras_file_of_a_model_under_our_global_policy_loads(self, name):
    # Without install() or custom objects: Keras 3 finds our classes by their
    # registered names ("Could not locate"/AttributeError before).
    policy_module.set_global_policy(name)
    inputs = keras.Input((3,))
    hidden = keras.layers.Dense(4, dtype=PolicyV1(name, loss_scale=8))(inputs)
    model = keras.Model(inputs, keras.layers.Dense(1)(hidden))
    path = self.create_tempfile("m.keras").full_path
    model.save(path)
    keras.config.set_dtype_policy("float32")
    loaded = keras.models.load_model(path)
    for layer, original in zip(loaded.layers[1:], model.layers[1:]):
      self.assertEqual(layer.compute_dtype, original.compute_dtype)
      self.assertEqual(layer.variable_dtype, original.variable_dtype)
    for a, b in zip(loaded.get_weights(), model.get_weights()):
      np.testing.assert_array_equal(a, b)


# --------------------------------------------------------------------------
# PolicyV1


class PolicyV1Test(parameterized.TestCase):

  def setUp(self):
    super().setUp()
    _deprecation.reset_for_testing()

  def test_auto_mixed_float16_is_dynamic(self):
    p = PolicyV1("mixed_float16")
    self.assertIsInstance(p.loss_scale, loss_scale_module.DynamicLossScale)
    self.assertEqual(p.loss_scale.get_config(), {
        "initial_loss_scale": 2.0**15, "increment_period": 2000,
        "multiplier": 2.0})
    self.assertEqual(p.get_config(), {"name": "mixed_float16"})
    self.assertEqual(
        repr(p), '<PolicyV1 "mixed_float16", loss_scale=DynamicLossScale('
        "current_loss_scale=32768.0, num_good_steps=0, initial_loss_scale="
        "32768.0, increment_period=2000, multiplier=2.0)>")
    self.assertIsInstance(p, Policy)
    self.assertEqual((p.compute_dtype, p.variable_dtype),
                     ("float16", "float32"))

  @parameterized.parameters("float32", "mixed_bfloat16", "float16", "_infer")
  def test_auto_other_names_have_no_loss_scale(self, name):
    p = PolicyV1(name)
    self.assertIsNone(p.loss_scale)
    self.assertEqual(repr(p), f'<PolicyV1 "{name}", loss_scale=None>')
    self.assertEqual(p.get_config(), {"name": name})

  def test_explicit_loss_scales(self):
    fixed = PolicyV1("mixed_float16", loss_scale=16)
    self.assertEqual(
        repr(fixed),
        '<PolicyV1 "mixed_float16", loss_scale=FixedLossScale(16.0)>')
    self.assertEqual(fixed.get_config(), {
        "name": "mixed_float16",
        "loss_scale": {"class_name": "FixedLossScale",
                       "config": {"loss_scale_value": 16.0}}})
    dynamic = PolicyV1("float16", loss_scale="dynamic")
    self.assertIsInstance(dynamic.loss_scale,
                          loss_scale_module.DynamicLossScale)
    none = PolicyV1("mixed_float16", loss_scale=None)
    self.assertIsNone(none.loss_scale)
    self.assertEqual(none.get_config(), {"name": "mixed_float16",
                                         "loss_scale": None})
    given = loss_scale_module.DynamicLossScale(initial_loss_scale=8)
    self.assertIs(PolicyV1("mixed_float16", loss_scale=given).loss_scale, given)
    compat = tf.compat.v1.mixed_precision.FixedLossScale(4)
    self.assertIs(PolicyV1("mixed_float16", loss_scale=compat).loss_scale,
                  compat)

  def test_config_round_trip(self):
    for p in (PolicyV1("mixed_float16"),
              PolicyV1("mixed_float16", loss_scale=32),
              PolicyV1("mixed_float16", loss_scale=None),
              PolicyV1("mixed_float16", loss_scale=loss_scale_module.
                       DynamicLossScale(initial_loss_scale=4,
                                        increment_period=3, multiplier=4))):
      restored = PolicyV1.from_config(p.get_config())
      self.assertEqual(restored.get_config(), p.get_config())
      self.assertEqual(repr(restored), repr(p))

  def test_bad_loss_scale(self):
    with self.assertRaisesRegex(
        ValueError, "Could not interpret loss scale identifier: foo"):
      PolicyV1("mixed_float16", loss_scale="foo")
    with self.assertRaises(ValueError):
      PolicyV1("mixed_float16", loss_scale=0.5)

  def test_logs(self):
    with testing.capture_tf_log() as messages:
      Policy("mixed_float16")
      # Only TF 2.4's device check (this machine has no GPU).
      self.assertLen(messages, 1)
      self.assertIn("Mixed precision compatibility check", messages[0])
      PolicyV1("float32", loss_scale=8)
      PolicyV1("mixed_bfloat16", loss_scale="dynamic")
      PolicyV1("float16", loss_scale=8)  # float16: no warning.
    warnings = [m for m in messages if "only useful" in m]
    self.assertEqual(warnings, [
        "Creating a Policy with a loss scale is only useful for float16 "
        "policies. You passed loss_scale=8 for policy float32. Consider not "
        "passing any loss_scale instead.",
        "Creating a Policy with a loss scale is only useful for float16 "
        "policies. You passed loss_scale='dynamic' for policy mixed_bfloat16. "
        "Consider not passing any loss_scale instead."])
    # TF 2.4.4's only deprecation warnings here were the loss scales'.
    self.assertTrue(any("FixedLossScale.__init__" in m and "deprecated" in m
                        for m in messages))

  def test_auto_policy_logs_dynamic_loss_scale_deprecation(self):
    with testing.capture_tf_log() as messages:
      PolicyV1("mixed_float16")
    messages = [m for m in messages if "compatibility check" not in m]
    self.assertLen(messages, 1)
    self.assertIn("DynamicLossScale.__init__", messages[0])
    self.assertIn("is deprecated", messages[0])

  def test_used_by_a_layer(self):
    layer = keras.layers.Dense(2, dtype=PolicyV1("mixed_float16", 4))
    self.assertEqual(layer(tf.ones((1, 3))).dtype, tf.float16)
    self.assertEqual(layer.kernel.dtype, "float32")

  def test_against_tf_recorded_formats(self):
    # Formats recorded by TF 2.4.4 (tests/fixtures/policy/policies_tf24.json).
    with open(testing.fixture_path("policy", "policies_tf24.json")) as f:
      recorded = json.load(f)["policies"]
    cases = {
        "experimental_mixed_float16": PolicyV1("mixed_float16"),
        "experimental_mixed_bfloat16": PolicyV1("mixed_bfloat16"),
        "experimental_float32": PolicyV1("float32"),
        "experimental_fixed": PolicyV1("mixed_float16", 16),
        "experimental_dynamic": PolicyV1("mixed_float16", "dynamic"),
        "experimental_none": PolicyV1("mixed_float16", None),
        "plain_mixed_float16": Policy("mixed_float16"),
        "plain_float64": Policy("float64"),
        "plain__infer": Policy("_infer"),
        "plain_int32": Policy("int32"),
    }
    self.assertEqual(set(cases), set(recorded))
    for key, p in cases.items():
      with self.subTest(key):
        self.assertEqual(repr(p), recorded[key]["repr"])
        self.assertEqual(p.get_config(), recorded[key]["config"])
        self.assertEqual(p.compute_dtype, recorded[key]["compute_dtype"])
        self.assertEqual(p.variable_dtype, recorded[key]["variable_dtype"])
        if "serialized" in recorded[key]:
          self.assertEqual(policy_module.serialize(p),
                           recorded[key]["serialized"])


# --------------------------------------------------------------------------
# Global policy


class GlobalPolicyTest(parameterized.TestCase):

  def test_default_follows_floatx(self):
    keras.config.set_dtype_policy(keras.config.floatx())
    p = policy_module.global_policy()
    self.assertIsInstance(p, Policy)
    self.assertEqual(repr(p), '<Policy "float32">')

  def test_set_global_policy_string(self):
    policy_module.set_global_policy("mixed_float16")
    p = policy_module.global_policy()
    self.assertIs(type(p), Policy)
    self.assertEqual(p.name, "mixed_float16")
    self.assertIs(policy_module.global_policy(), p)  # Stable object.
    self.assertIs(keras.config.dtype_policy(), p)
    layer = keras.layers.Dense(2)
    self.assertIs(layer.dtype_policy, p)
    self.assertEqual(layer(tf.ones((1, 3))).dtype, tf.float16)
    self.assertEqual(layer.kernel.dtype, "float32")
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
    self.assertEqual(model.dtype_policy.name, "mixed_float16")
    # Explicit layer dtypes still win.
    self.assertEqual(keras.layers.Dense(2, dtype="float64").compute_dtype,
                     "float64")

  def test_set_policy_is_set_global_policy(self):
    self.assertIs(policy_module.set_policy, policy_module.set_global_policy)

  def test_set_policy_v1_object(self):
    p = PolicyV1("mixed_float16", loss_scale=8)
    policy_module.set_policy(p)
    self.assertIs(policy_module.global_policy(), p)
    self.assertIs(keras.layers.Dense(1).dtype_policy, p)

  def test_set_none_restores_floatx(self):
    policy_module.set_global_policy("mixed_float16")
    policy_module.set_global_policy(None)
    self.assertEqual(repr(policy_module.global_policy()), '<Policy "float32">')
    self.assertEqual(keras.layers.Dense(1).compute_dtype, "float32")

  def test_keras_policy_converted(self):
    keras.config.set_dtype_policy("mixed_bfloat16")
    p = policy_module.global_policy()
    self.assertIs(type(p), Policy)
    self.assertEqual(p.name, "mixed_bfloat16")
    policy_module.set_global_policy(keras.DTypePolicy("float64"))
    self.assertIs(type(keras.config.dtype_policy()), Policy)
    self.assertEqual(policy_module.global_policy().name, "float64")

  def test_quantized_keras_policy_converted_by_dtypes(self):
    quantized = keras.dtype_policies.QuantizedDTypePolicy(
        "int8", "mixed_bfloat16")
    try:
      keras.config.set_dtype_policy(quantized)
    except ValueError as e:
      # Keras 3.16 refuses a quantized global policy; a layer's policy may
      # still be one (`quantize()`), and converts the same way.
      self.assertIn("cannot be quantized", str(e))
      self.assertEqual(
          policy_module._as_our_policy(quantized).name, "mixed_bfloat16")  # pylint: disable=protected-access
      return
    p = policy_module.global_policy()
    self.assertEqual(p.name, "mixed_bfloat16")

  @parameterized.parameters("int32", "complex64", "bool")
  def test_non_floating_refused(self, name):
    policy_module.set_global_policy("float64")
    with self.assertRaisesRegex(
        ValueError, "set_policy can only be used to set the global policy to "
        'floating-point policies, such as "float32" and "mixed_float16", but '
        f"got policy: {name}$"):
      policy_module.set_global_policy(name)
    self.assertEqual(policy_module.global_policy().name, "float64")

  def test_bad_arguments(self):
    with self.assertRaisesRegex(TypeError, "must be a string"):
      policy_module.set_global_policy(3)
    with self.assertRaisesRegex(ValueError, "Cannot convert value"):
      policy_module.set_global_policy("mixed_float32")
    self.assertEqual(policy_module.global_policy().name, "float32")

  def test_infer_allowed(self):
    policy_module.set_global_policy("_infer")
    self.assertEqual(policy_module.global_policy().name, "_infer")

  def test_refused_while_graph_rewrite_enabled(self):
    _private_api.set_graph_rewrite_enabled(True)  # As enable_... does.
    try:
      with self.assertRaises(ValueError) as cm:
        policy_module.set_global_policy("mixed_float16")
      policy_module.set_global_policy("float64")  # Not mixed: allowed.
    finally:
      _private_api.set_graph_rewrite_enabled(False)
    self.assertTrue(str(cm.exception).startswith(
        'The global dtype policy cannot be set to "mixed_float16", because the '
        "mixed precision graph rewrite has already been enabled.\nAt most, one "
        "of the following can be called:\n\n  1. tf.train.experimental."
        "enable_mixed_precision_graph_rewrite() (You called this first)\n"))
    self.assertEqual(policy_module.global_policy().name, "float64")

  def test_allowed_while_only_grappler_option_on(self):
    # TF 2.3.4 and 2.4.4 both set a mixed policy with Grappler's option on
    # (jobs such as OpenNMT-tf's do): only the rewrite functions refuse it.
    tf.config.optimizer.set_experimental_options(
        {"auto_mixed_precision": True})
    try:
      policy_module.set_global_policy("mixed_float16")
      self.assertEqual(policy_module.global_policy().name, "mixed_float16")
      with policy_module.policy_scope("mixed_bfloat16"):
        self.assertEqual(policy_module.global_policy().name, "mixed_bfloat16")
    finally:
      tf.config.optimizer.set_experimental_options(
          {"auto_mixed_precision": False})
      policy_module.set_global_policy("float32")

  def test_policy_scope(self):
    policy_module.set_global_policy("float64")
    outer = keras.config.dtype_policy()
    with policy_module.policy_scope("mixed_float16"):
      self.assertEqual(policy_module.global_policy().name, "mixed_float16")
      self.assertEqual(keras.layers.Dense(1).compute_dtype, "float16")
      with policy_module.policy_scope(PolicyV1("float32", None)):
        self.assertEqual(repr(policy_module.global_policy()),
                         '<PolicyV1 "float32", loss_scale=None>')
      self.assertEqual(policy_module.global_policy().name, "mixed_float16")
    self.assertIs(keras.config.dtype_policy(), outer)

  def test_policy_scope_restores_on_error(self):
    outer = keras.config.dtype_policy()
    with self.assertRaisesRegex(RuntimeError, "boom"):
      with policy_module.policy_scope("mixed_float16"):
        raise RuntimeError("boom")
    self.assertIs(keras.config.dtype_policy(), outer)


# --------------------------------------------------------------------------
# get_layer_policy


class GetLayerPolicyTest(parameterized.TestCase):

  def test_our_policy_returned_as_is(self):
    p = PolicyV1("mixed_float16", loss_scale=2)
    self.assertIs(
        policy_module.get_layer_policy(keras.layers.Dense(1, dtype=p)), p)

  @parameterized.parameters("mixed_float16", "mixed_bfloat16", "float64",
                            "float16")
  def test_keras_policies_converted(self, name):
    for dtype in (name, keras.DTypePolicy(name)):
      p = policy_module.get_layer_policy(keras.layers.Dense(1, dtype=dtype))
      self.assertIs(type(p), Policy)
      self.assertEqual(p.name, name)

  def test_global_default(self):
    with policy_module.policy_scope("mixed_float16"):
      layer = keras.layers.Dense(1)
    self.assertEqual(repr(policy_module.get_layer_policy(layer)),
                     '<Policy "mixed_float16">')

  def test_model(self):
    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    self.assertEqual(policy_module.get_layer_policy(model).name, "float32")

  @parameterized.parameters(3, "dense", None)
  def test_non_layers(self, value):
    with self.assertRaisesRegex(
        ValueError, f"^get_policy can only be called on a layer, but got: "
        f"{value}$"):
      policy_module.get_layer_policy(value)


# --------------------------------------------------------------------------
# serialize / deserialize


class SerializationTest(parameterized.TestCase):

  def test_serialize(self):
    self.assertEqual(policy_module.serialize(Policy("float16")), "float16")
    self.assertIsNone(policy_module.serialize(Policy("_infer")))
    self.assertEqual(policy_module.serialize(Policy("mixed_float16")),
                     {"class_name": "Policy",
                      "config": {"name": "mixed_float16"}})
    self.assertEqual(policy_module.serialize(PolicyV1("float32")),
                     {"class_name": "PolicyV1", "config": {"name": "float32"}})
    with self.assertRaisesRegex(ValueError, "policy must be a Policy"):
      policy_module.serialize("float32")

  @parameterized.parameters(
      (None, "_infer"),
      ("float64", "float64"),
      ("mixed_float16", "mixed_float16"),
      ({"class_name": "Policy", "config": {"name": "mixed_float16"}},
       "mixed_float16"),
      ({"class_name": "PolicyV1", "config": {
          "name": "mixed_float16",
          "loss_scale": {"class_name": "DynamicLossScale", "config": {
              "initial_loss_scale": 2.0, "increment_period": 3,
              "multiplier": 2.0}}}}, "mixed_float16"),
      ({"class_name": "Policy", "config": {"name": "float32",
                                           "loss_scale": None}}, "float32"),
      ({"class_name": "DTypePolicy", "config": {"name": "mixed_bfloat16"}},
       "mixed_bfloat16"),
  )
  def test_deserialize_restores_plain_policy(self, config, name):
    p = policy_module.deserialize(config)
    self.assertIs(type(p), Policy)
    self.assertEqual(p.name, name)

  def test_deserialize_custom_objects(self):
    p = policy_module.deserialize(
        {"class_name": "PolicyV1", "config": {"name": "float16",
                                              "loss_scale": 8}},
        custom_objects={"PolicyV1": PolicyV1})
    self.assertIs(type(p), PolicyV1)
    self.assertEqual(repr(p),
                     '<PolicyV1 "float16", loss_scale=FixedLossScale(8.0)>')

  @parameterized.parameters(
      ({"class_name": "Nope", "config": {"name": "float32"}},
       "Unknown dtype policy: Nope"),
      (3, "Could not interpret dtype policy config: 3"),
      ({"class_name": "Policy"}, "Could not interpret"),
  )
  def test_deserialize_errors(self, config, message):
    with self.assertRaisesRegex(ValueError, message):
      policy_module.deserialize(config)

  def test_custom_objects_is_a_fresh_dict(self):
    objects = legacy.custom_objects()
    objects["Policy"] = None
    self.assertIs(legacy.custom_objects()["Policy"], Policy)
    self.assertIs(legacy.custom_objects()["PolicyV1"], Policy)

  def test_keras3_model_round_trip(self):
    inputs = keras.Input((3,))
    h = keras.layers.Dense(4, dtype=Policy("mixed_float16"), name="a")(inputs)
    out = keras.layers.Dense(
        1, dtype=PolicyV1("mixed_float16", loss_scale=8), name="b")(h)
    model = keras.Model(inputs, out)
    restored = legacy.model_from_json(model.to_json())
    for name in ("a", "b"):
      layer = restored.get_layer(name)
      self.assertEqual(layer.compute_dtype, "float16")
      self.assertEqual(layer.variable_dtype, "float32")
      self.assertIs(type(policy_module.get_layer_policy(layer)), Policy)

  def test_model_from_json_errors(self):
    with self.assertRaisesRegex(ValueError, "not valid JSON"):
      legacy.model_from_json("{nope")
    with self.assertRaisesRegex(ValueError, "must be a dict"):
      legacy.model_from_json("[1]")

  def test_without_our_objects_keras_rejects(self):
    config = {"name": "d", "units": 1,
              "dtype": {"class_name": "Policy",
                        "config": {"name": "mixed_float16"}}}
    with self.assertRaisesRegex(Exception, "quantization_mode|Policy"):
      keras.layers.Dense.from_config(config)
    with legacy.deserialization_scope():
      self.assertEqual(keras.layers.Dense.from_config(config).compute_dtype,
                       "float16")


# --------------------------------------------------------------------------
# Endpoints


class EndpointsTest(parameterized.TestCase):

  @parameterized.parameters(
      ("keras.mixed_precision.Policy", Policy),
      ("keras.mixed_precision.experimental.Policy", PolicyV1),
      ("keras.mixed_precision.global_policy", policy_module.global_policy),
      ("keras.mixed_precision.experimental.global_policy",
       policy_module.global_policy),
      ("keras.mixed_precision.set_global_policy", policy_module.set_policy),
      ("keras.mixed_precision.experimental.set_policy",
       policy_module.set_policy),
      ("keras.mixed_precision.experimental.get_layer_policy",
       policy_module.get_layer_policy),
  )
  def test_v2_paths(self, path, symbol):
    spec = endpoints.lookup("v2", path)
    self.assertIs(spec.symbol, symbol)
    # TF 2.3.4/2.4.4 exported none of these under tf.compat.v1.
    self.assertEqual(spec.v1, ())
    self.assertEqual(spec.deprecated, ())

  def test_matches_tf_reference_dump(self):
    with open(testing.fixture_path("tf_endpoints.json")) as f:
      dump = json.load(f)["tf24"]["symbols"]
    ours = {
        "Policy": Policy, "PolicyV1": PolicyV1,
        "global_policy": policy_module.global_policy,
        "set_policy": policy_module.set_policy,
        "get_layer_policy": policy_module.get_layer_policy,
    }
    seen = set()
    for key, entry in dump.items():
      if not key.startswith("tensorflow.python.keras.mixed_precision."):
        continue
      if entry["name"] not in ours:
        continue
      spec = [s for s in endpoints.all_specs()
              if s.symbol is ours[entry["name"]]][0]
      self.assertEqual(sorted(spec.v2), sorted(entry["keras_api_names"]))
      self.assertEqual(sorted(spec.v1), sorted(entry["keras_api_names_v1"]))
      seen.add(entry["name"])
    self.assertEqual(seen, set(ours))
