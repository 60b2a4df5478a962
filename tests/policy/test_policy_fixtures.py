"""TF 2.3.4 / 2.4.4 layer and model configs load into Keras 3 with our policies.

The fixtures were written by tools/gen_policy_fixtures.py under the real
TF 2.3.4 and 2.4.4, together with the compute / variable dtypes every layer
had there.
"""

import json

from absl.testing import parameterized
import h5py
import keras
import numpy as np
import tensorflow as tf

from tests import testing
from tf_mixed_precision_compat import legacy
from tf_mixed_precision_compat import policy as policy_module
from tf_mixed_precision_compat.policy import Policy

VERSIONS = ("tf23", "tf24")
MODELS = ("sequential_mixed", "functional_mixed", "explicit_loss_scale",
          "string_dtype", "float32")


def _load(kind, version):
  with open(testing.fixture_path("policy", f"{kind}_{version}.json")) as f:
    return json.load(f)


def _check_layers(test, model, recorded_layers):
  test.assertEqual([layer.name for layer in model.layers],
                   [r["name"] for r in recorded_layers])
  for layer, recorded in zip(model.layers, recorded_layers):
    with test.subTest(layer=layer.name):
      if isinstance(layer, keras.layers.InputLayer):
        # Keras 3's InputLayer has no compute dtype of its own: the dtype TF
        # gave it is that of the tensor it produces.
        test.assertEqual(layer.dtype, recorded["compute_dtype"])
        test.assertEqual(layer.output.dtype, recorded["compute_dtype"])
        continue
      test.assertEqual(layer.compute_dtype, recorded["compute_dtype"])
      test.assertEqual(layer.variable_dtype, recorded["variable_dtype"])
      for weight in layer.weights:
        test.assertEqual(weight.dtype, recorded["variable_dtype"])
      ours = policy_module.get_layer_policy(layer)
      test.assertIs(type(ours), Policy)  # Never the experimental class.
      test.assertEqual(ours.name, recorded["policy_name"])


class ModelJsonTest(parameterized.TestCase):

  @parameterized.named_parameters(
      testing.named_product(version=VERSIONS, model=MODELS))
  def test_model_from_json(self, version, model):
    recorded = _load("models", version)["models"][model]
    restored = legacy.model_from_json(recorded["json"])
    _check_layers(self, restored, recorded["layers"])
    # The restored model computes each layer in the recorded dtype.
    first = restored.layers[0]
    input_dtype = (first.dtype if isinstance(first, keras.layers.InputLayer)
                   else "float32")
    x = tf.ones((2, 4), dtype=input_dtype)
    probe = keras.Model(restored.inputs,
                        [restored.get_layer(n).output
                         for n in sorted(recorded["output_dtypes"])])
    outputs = probe(x)
    for name, value in zip(sorted(recorded["output_dtypes"]), outputs):
      self.assertEqual(value.dtype.name, recorded["output_dtypes"][name], name)

  @parameterized.named_parameters(
      testing.named_product(version=VERSIONS, model=MODELS))
  def test_model_from_config_with_custom_objects(self, version, model):
    # The same through Keras 3's own entry points, given our custom objects.
    recorded = _load("models", version)["models"][model]
    config = json.loads(recorded["json"])
    cls = keras.Sequential if config["class_name"] == "Sequential" else (
        keras.Model)
    restored = cls.from_config(config["config"],
                               custom_objects=legacy.custom_objects())
    _check_layers(self, restored, recorded["layers"])

  @parameterized.parameters(*VERSIONS)
  def test_mixed_model_trains(self, version):
    recorded = _load("models", version)["models"]["functional_mixed"]
    model = legacy.model_from_json(recorded["json"])
    model.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
    before = [w.numpy().copy() for w in model.trainable_weights]
    # Targets of one: the last bias gets a gradient even when every relu of
    # the random first layer is dead for this input.
    model.fit(np.ones((4, 4), "float32"), np.ones((4, 1), "float32"),
              verbose=0, epochs=1, batch_size=2)
    after = [w.numpy() for w in model.trainable_weights]
    self.assertTrue(any(not np.array_equal(a, b)
                        for a, b in zip(before, after)))


class LayerConfigTest(parameterized.TestCase):

  def _cases(self):
    for version in VERSIONS:
      for key, record in _load("layers", version)["layers"].items():
        yield version, key, record

  def test_from_config_in_scope(self):
    count = 0
    for version, key, record in self._cases():
      with self.subTest(version=version, form=key):
        with legacy.deserialization_scope():
          layer = keras.layers.Dense.from_config(record["config"])
        self.assertEqual(layer.compute_dtype, record["compute_dtype"])
        self.assertEqual(layer.variable_dtype, record["variable_dtype"])
        out = layer(tf.ones((1, 3)))
        self.assertEqual(out.dtype.name, record["compute_dtype"])
        self.assertEqual(layer.kernel.dtype, record["variable_dtype"])
        count += 1
    self.assertEqual(count, 22)

  def test_policy_deserialize(self):
    for version, key, record in self._cases():
      with self.subTest(version=version, form=key):
        p = policy_module.deserialize(record["config"]["dtype"])
        self.assertIs(type(p), Policy)
        self.assertEqual(p.get_config(), {"name": p.name})  # Loss scale gone.
        self.assertEqual((p.compute_dtype, p.variable_dtype),
                         (record["compute_dtype"], record["variable_dtype"]))

  def test_tf23_policy_configs_become_tf24_ones(self):
    # TF 2.3 named its experimental class "Policy", TF 2.4 "PolicyV1"; both
    # configs restore to the same non-experimental policy.
    tf23 = _load("layers", "tf23")["layers"]["exp_fixed_ls"]["config"]["dtype"]
    tf24 = _load("layers", "tf24")["layers"]["exp_fixed_ls"]["config"]["dtype"]
    self.assertEqual(tf23["class_name"], "Policy")
    self.assertEqual(tf24["class_name"], "PolicyV1")
    self.assertIn("loss_scale", tf23["config"])
    self.assertEqual(repr(policy_module.deserialize(tf23)),
                     repr(policy_module.deserialize(tf24)))


class H5Test(parameterized.TestCase):

  @parameterized.parameters(*VERSIONS)
  def test_load_model(self, version):
    recorded = _load("models", version)["h5_layers"]
    path = testing.fixture_path("policy", f"model_{version}.h5")
    model = keras.models.load_model(path,
                                    custom_objects=legacy.custom_objects())
    _check_layers(self, model, [recorded[layer.name] for layer in model.layers])
    self.assertEqual(model(tf.ones((1, 3))).dtype, tf.float32)
    self.assertEqual(model.get_layer("dense").output.dtype, "float16")

  @parameterized.parameters(*VERSIONS)
  def test_model_config_attribute(self, version):
    recorded = _load("models", version)["h5_layers"]
    path = testing.fixture_path("policy", f"model_{version}.h5")
    with h5py.File(path, "r") as f:
      model_config = f.attrs["model_config"]
    if isinstance(model_config, bytes):
      model_config = model_config.decode("utf-8")
    model = legacy.model_from_json(model_config)
    _check_layers(self, model, [recorded[layer.name] for layer in model.layers])
