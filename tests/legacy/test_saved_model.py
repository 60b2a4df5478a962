"""legacy.load_model on TF 2.3.4 / 2.4.4 H5 files and SavedModels.

The fixtures (tests/fixtures/legacy/h5_*, sm_*, lambda_*) were written by
tools/gen_legacy_saved_models.py under the real TensorFlow versions, with
every number the original model and optimizer held.
"""

import glob
import json
import logging
import os
import shutil
from unittest import mock

from absl.testing import parameterized
import h5py
import keras
import numpy as np
import pytest
import tensorflow as tf

from tests import testing
import tf_mixed_precision_compat as mp
from tf_mixed_precision_compat import legacy
from tf_mixed_precision_compat.legacy import _saved_model
from tf_mixed_precision_compat.optimizers.loss_scale_optimizer import (
    LossScaleOptimizer)

H5 = sorted(os.path.basename(p) for p in
            glob.glob(testing.fixture_path("legacy", "h5_*.h5")))
SAVED_MODELS = sorted(
    os.path.basename(p) for p in glob.glob(testing.fixture_path(
        "legacy", "sm_tf*")) if os.path.isdir(p))
SLOTS = {"momentum": "momentum", "m": "momentum", "v": "velocity"}


def _record(name):
  with open(testing.fixture_path(
      "legacy", os.path.splitext(name)[0] + ".json")) as f:
    return json.load(f)


def _check_weights_and_slots(model, record):
  opt = model.optimizer
  for key, value in record["weights"].items():
    layer, weight = key.split("/")
    variable = getattr(model.get_layer(layer), weight)
    np.testing.assert_array_equal(variable.numpy(),
                                  np.asarray(value, np.float32), err_msg=key)
  for key, slots in record["slots"].items():
    layer, weight = key.split("/")
    variable = getattr(model.get_layer(layer), weight)
    for tf_name, value in slots.items():
      np.testing.assert_array_equal(
          opt.get_slot(variable, SLOTS[tf_name]).numpy(),
          np.asarray(value, np.float32), err_msg=f"{key} {tf_name}")
  assert int(opt.iterations.numpy()) == record["iterations"]
  assert np.float32(opt.learning_rate.numpy()) == np.float32(
      record["hyperparameters"]["learning_rate"])


def _check_predictions(model, record):
  # float16 arithmetic differs between TF 2.x and Keras 3 kernels in the last
  # bits; the weights above are compared exactly.
  got = model.predict(np.asarray(record["probe_inputs"], np.float32),
                      verbose=0)
  np.testing.assert_allclose(got, np.asarray(record["predictions"]),
                             rtol=2e-3, atol=5e-3)


class H5Test(parameterized.TestCase):

  @parameterized.parameters(*H5)
  def test_keras3_alone_fails(self, name):
    # Keras 3.7-3.15 trip over the TF 2.x layer policy's missing
    # `quantization_mode`; Keras 3.16 no longer knows the class `Policy`.
    with self.assertRaisesRegex((AttributeError, TypeError),
                                "quantization_mode|Could not locate class "
                                "'Policy'"):
      keras.models.load_model(testing.fixture_path("legacy", name))

  @parameterized.parameters(*H5)
  def test_loads_weights_and_slots(self, name):
    record = _record(name)
    with self.assertLogs(tf.get_logger(), logging.WARNING) as logs:
      model = legacy.load_model(testing.fixture_path("legacy", name))
    self.assertIn("does not store the dynamic loss scale",
                  "\n".join(logs.output))
    opt = model.optimizer
    # TF 2.4.4 loaded the experimental class as LossScaleOptimizer too.
    self.assertIs(type(opt), LossScaleOptimizer)
    self.assertTrue(opt.dynamic)
    self.assertEqual(opt.dynamic_growth_steps, record["growth_steps"])
    # Not stored: the configured initial scale, counter 0.
    self.assertEqual(float(opt.loss_scale.numpy()), record["initial_scale"])
    self.assertEqual(int(opt.dynamic_counter.numpy()), 0)
    _check_weights_and_slots(model, record)
    _check_predictions(model, record)
    for layer in model.layers:
      if isinstance(layer, keras.layers.Dense):
        self.assertEqual(layer.compute_dtype, "float16")

  def test_fit_after_load(self):
    record = _record(H5[0])
    model = legacy.load_model(testing.fixture_path("legacy", H5[0]))
    model.fit(np.zeros((4, 4), np.float32), np.zeros((4, 1), np.float32),
              batch_size=4, epochs=1, verbose=0)
    self.assertEqual(int(model.optimizer.iterations.numpy()),
                     record["iterations"] + 1)
    self.assertEqual(int(model.optimizer.dynamic_counter.numpy()), 1)


def _installed(load):
  """`load`, called with the package installed (uninstalled afterwards)."""

  def installed_load(path):
    mp.install()
    try:
      return load(path)
    finally:
      mp.uninstall()

  return installed_load


class SavedModelTest(parameterized.TestCase):

  @parameterized.parameters(*SAVED_MODELS)
  def test_load_saved_model_serves_it(self, name):
    record = _record(name)
    path = testing.fixture_path("legacy", name)
    registered = _saved_model.serving_enabled()
    for load in (legacy.load_saved_model, _installed(tf.saved_model.load)):
      loaded = load(path)
      # Outside install(), the package leaves TF's loader registry as it was.
      self.assertEqual(_saved_model.serving_enabled(), registered)
      got = loaded(tf.constant(record["probe_inputs"], tf.float32)).numpy()
      # TF 2.21's float16 kernels may round the last bit differently from
      # TF 2.3/2.4's: at most two float16 ulps apart.
      expected = np.asarray(record["reloaded_predictions"], np.float32)
      ulp = np.spacing(np.abs(expected).astype(np.float16)).astype(np.float32)
      self.assertTrue(np.all(np.abs(got - expected) <= 2 * ulp),
                      (got, expected))
      serving = loaded.signatures["serving_default"]
      out = list(serving(tf.constant(record["probe_inputs"])).values())[0]
      np.testing.assert_array_equal(out.numpy(), got)

  @parameterized.parameters(*SAVED_MODELS)
  def test_keras3_alone_fails(self, name):
    with self.assertRaisesRegex(ValueError, "File format not supported"):
      keras.models.load_model(testing.fixture_path("legacy", name))

  @parameterized.parameters(*SAVED_MODELS)
  def test_restores_everything(self, name):
    record = _record(name)
    model, report = legacy.load_model(testing.fixture_path("legacy", name),
                                      return_report=True)
    opt = model.optimizer
    self.assertIsInstance(opt, LossScaleOptimizer)
    _check_weights_and_slots(model, record)
    _check_predictions(model, record)
    self.assertEqual(float(opt.loss_scale.numpy()), record["loss_scale"])
    self.assertEqual(int(opt.dynamic_counter.numpy()), record["counter"])
    self.assertEqual(report.loss_scale, record["loss_scale"])
    self.assertEqual(report.counter, record["counter"])
    self.assertEqual(report.unmatched_checkpoint, [])
    self.assertEqual(report.unmatched_objects, [])
    # All the SavedModel's variables are accounted for (metric states are
    # bookkeeping).
    keys = {k for k, _ in report.matched} | set(report.ignored)
    self.assertEqual(keys, {n for n, _ in record["variables"]} -
                     {"_CHECKPOINTABLE_OBJECT_GRAPH"})

  @parameterized.parameters(*SAVED_MODELS)
  def test_fit_continues_the_loss_scale_trajectory(self, name):
    record = _record(name)
    model = legacy.load_model(testing.fixture_path("legacy", name))
    opt = model.optimizer
    growth = record["growth_steps"]
    steps_to_growth = growth - record["counter"]
    # Finite steps (zero targets, small inputs): the counter continues from
    # the restored value and the scale doubles exactly when it reaches the
    # growth period.
    for i in range(1, steps_to_growth + 1):
      model.fit(np.zeros((4, 4), np.float32), np.zeros((4, 1), np.float32),
                batch_size=4, epochs=1, verbose=0)
      if i < steps_to_growth:
        self.assertEqual(int(opt.dynamic_counter.numpy()),
                         record["counter"] + i)
        self.assertEqual(float(opt.loss_scale.numpy()), record["loss_scale"])
    self.assertEqual(float(opt.loss_scale.numpy()), 2 * record["loss_scale"])
    self.assertEqual(int(opt.dynamic_counter.numpy()), 0)
    self.assertEqual(int(opt.iterations.numpy()),
                     record["iterations"] + steps_to_growth)


class SafeModeTest(parameterized.TestCase):

  @parameterized.parameters("sm_lambda_tf23", "sm_lambda_tf24")
  def test_lambda_refused_without_running_code(self, name):
    with mock.patch("marshal.loads") as loads:
      with self.assertRaisesRegex(ValueError, "safe_mode=False") as cm:
        legacy.load_model(testing.fixture_path("legacy", name))
    loads.assert_not_called()
    self.assertIn(name, str(cm.exception))
    self.assertIn("Lambda", str(cm.exception))

  @parameterized.product(name=["lambda_tf23.h5", "lambda_tf24.h5"],
                         safe_mode=[True, False])
  def test_old_lambda_bytecode_refused_unread(self, name, safe_mode):
    # Python 3.8 bytecode: no safe_mode makes it loadable here, so the
    # error names the way out instead, and nothing is unmarshalled.
    with mock.patch("marshal.loads") as loads:
      with self.assertRaisesRegex(ValueError, "Python 3.8") as cm:
        legacy.load_model(testing.fixture_path("legacy", name),
                          safe_mode=safe_mode)
    loads.assert_not_called()
    for part in (name, "Lambda layer 'double'", "load_weights"):
      self.assertIn(part, str(cm.exception))

  def test_unsafe_still_guarded_by_keras(self):
    # safe_mode=False lets the config past our check; Keras 3's own switch
    # (keras.config.enable_unsafe_deserialization) still governs bytecode.
    with self.assertRaisesRegex(ValueError, "lambda_tf23.h5"):
      legacy.load_model(testing.fixture_path("legacy", "lambda_tf23.h5"),
                        safe_mode=False)

  @pytest.fixture(autouse=True)
  def _tmp(self, tmp_path):
    self.tmp = str(tmp_path)

  def _edited_h5(self, edit):
    path = os.path.join(self.tmp, "edited.h5")
    shutil.copy(testing.fixture_path("legacy", H5[0]), path)
    with h5py.File(path, "r+") as f:
      config = json.loads(f.attrs["model_config"])
      edit(config)
      f.attrs["model_config"] = json.dumps(config)
    return path

  def test_unknown_class_refused(self):
    def edit(config):
      config["config"]["layers"][1]["class_name"] = "Evil"
    with self.assertRaisesRegex(ValueError, "unknown layer class 'Evil'"):
      legacy.load_model(self._edited_h5(edit))

  def test_foreign_module_refused(self):
    def edit(config):
      config["config"]["layers"][1]["config"]["kernel_initializer"] = {
          "module": "os", "class_name": "system", "config": {}}
    with self.assertRaisesRegex(ValueError, "names the Python module 'os'"):
      legacy.load_model(self._edited_h5(edit))


class CorruptedFileTest(parameterized.TestCase):

  @pytest.fixture(autouse=True)
  def _tmp(self, tmp_path):
    self.tmp = str(tmp_path)

  def _truncate(self, path, fraction=0.5):
    with open(path, "rb") as f:
      data = f.read()
    with open(path, "wb") as f:
      f.write(data[:int(len(data) * fraction)])

  def test_truncated_h5(self):
    path = os.path.join(self.tmp, "model.h5")
    shutil.copy(testing.fixture_path("legacy", H5[0]), path)
    self._truncate(path)
    with self.assertRaisesRegex((OSError, ValueError), "model.h5"):
      legacy.load_model(path)

  def test_not_a_model(self):
    path = os.path.join(self.tmp, "garbage.h5")
    with open(path, "wb") as f:
      f.write(b"\x00garbage" * 100)
    with self.assertRaisesRegex(OSError, "garbage.h5"):
      legacy.load_model(path)

  @parameterized.parameters("saved_model.pb",
                            "variables/variables.data-00000-of-00001",
                            "variables/variables.index")
  def test_truncated_saved_model(self, part):
    path = os.path.join(self.tmp, "sm")
    shutil.copytree(testing.fixture_path("legacy", SAVED_MODELS[0]), path)
    self._truncate(os.path.join(path, part), 0.6)
    with self.assertRaisesRegex(ValueError, "sm"):
      legacy.load_model(path)

  def test_missing_path(self):
    with self.assertRaisesRegex(FileNotFoundError, "nope.h5"):
      legacy.load_model(os.path.join(self.tmp, "nope.h5"))

  def test_directory_not_saved_model(self):
    with self.assertRaisesRegex(ValueError, "not a SavedModel"):
      legacy.load_model(self.tmp)

  def test_bad_arguments(self):
    with self.assertRaisesRegex(TypeError, "safe_mode"):
      legacy.load_model(testing.fixture_path("legacy", H5[0]), safe_mode="no")
    with self.assertRaisesRegex(TypeError, "custom_objects"):
      legacy.load_model(testing.fixture_path("legacy", H5[0]),
                        custom_objects=[1])
