"""legacy.restore_checkpoint against TF 2.2.3 / 2.3.4 / 2.4.4 checkpoints.

The fixtures (tests/fixtures/legacy/ckpt_*, demo_tf23/) were written by
tools/gen_legacy_checkpoints.py under the real TensorFlow versions, together
with every number the original objects held.
"""

import glob
import json
import os
import shutil

from absl.testing import parameterized
import keras
import numpy as np
import pytest
import tensorflow as tf

from tests import testing
from tests.cli.models import Net
from tf_mixed_precision_compat import legacy
from tf_mixed_precision_compat.legacy import _layout
from tf_mixed_precision_compat.legacy import _match
from tf_mixed_precision_compat.legacy import _read_checkpoint
from tf_mixed_precision_compat.optimizers.loss_scale_optimizer import (
    LossScaleOptimizer)

CASES = sorted(
    os.path.basename(p)[:-len(".json")]
    for p in glob.glob(testing.fixture_path("legacy", "ckpt_*.json")))
# TF slot names -> Keras 3 slot names.
SLOTS = {"momentum": "momentum", "m": "momentum", "v": "velocity"}


def _load(case):
  path = (testing.fixture_path("legacy", "demo_tf23", "job.json")
          if case == "demo" else
          testing.fixture_path("legacy", case + ".json"))
  with open(path) as f:
    return json.load(f)


def _model(record):
  if record.get("model") == "subclassed":
    model = Net()
    model(tf.zeros((1, 4)))
    return model
  return legacy.model_from_json(record["model_json"])


def _optimizer(record):
  hypers = record["hyperparameters"]
  if record.get("optimizer", "sgd") == "sgd":
    inner = keras.optimizers.SGD(hypers["learning_rate"], momentum=0.9)
  else:
    inner = keras.optimizers.Adam(hypers["learning_rate"])
  if record["loss_scale_kind"] == "fixed":
    return LossScaleOptimizer(inner, dynamic=False,
                              initial_scale=record["initial_scale"])
  return LossScaleOptimizer(
      inner, initial_scale=record.get("initial_scale", 2**15),
      dynamic_growth_steps=record.get("growth_steps") or 2000)


def _location(case, record):
  if case == "demo":
    return testing.fixture_path("legacy", record["checkpoint_directory"])
  return testing.fixture_path("legacy", record["location"])


def _layer(model, name):
  for layer in model._flatten_layers(include_self=False):  # pylint: disable=protected-access
    if layer.name == name:
      return layer
  raise KeyError(name)


def check_restored(test, model, opt, record):
  """Every number the original recorded equals the restored one, exactly."""
  for key, value in record["weights"].items():
    layer_name, weight = key.split("/")
    variable = getattr(_layer(model, layer_name), weight)
    np.testing.assert_array_equal(variable.numpy(),
                                  np.asarray(value, np.float32), err_msg=key)
  for key, slots in record["slots"].items():
    layer_name, weight = key.split("/")
    variable = getattr(_layer(model, layer_name), weight)
    for tf_name, value in slots.items():
      np.testing.assert_array_equal(
          opt.get_slot(variable, SLOTS[tf_name]).numpy(),
          np.asarray(value, np.float32), err_msg=f"{key} {tf_name}")
  inner = opt.inner_optimizer
  test.assertEqual(int(inner.iterations.numpy()), record["iterations"])
  hypers = record["hyperparameters"]
  test.assertEqual(np.float32(inner.learning_rate.numpy()),
                   np.float32(hypers["learning_rate"]))
  for name in ("momentum", "beta_1", "beta_2"):
    if name in hypers:
      test.assertEqual(np.float32(getattr(inner, name)),
                       np.float32(hypers[name]))
  test.assertEqual(float(opt.loss_scale.numpy()), record["loss_scale"])
  if record["counter"] is None:
    test.assertFalse(opt.dynamic)
  else:
    test.assertEqual(int(opt.dynamic_counter.numpy()), record["counter"])


class RestoreCheckpointTest(parameterized.TestCase):

  def test_fixtures_cover_versions_models_and_optimizers(self):
    records = [_load(c) for c in CASES]
    self.assertEqual({r["tensorflow_version"] for r in records},
                     {"2.2.3", "2.3.4", "2.4.4"})
    self.assertEqual({r["model"] for r in records},
                     {"sequential", "functional", "subclassed"})
    self.assertEqual({r["optimizer"] for r in records}, {"sgd", "adam"})
    self.assertEqual({r["loss_scale_kind"] for r in records},
                     {"fixed", "dynamic"})
    self.assertEqual({r["saver"] for r in records}, {"manager", "checkpoint"})
    for r in records:
      if r["loss_scale_kind"] == "dynamic":
        # Mid-trajectory: the scale moved and the counter is not reset.
        self.assertNotEqual(r["loss_scale"], r["initial_scale"])

  @parameterized.parameters(*(CASES + ["demo"]))
  def test_restores_every_number(self, case):
    record = _load(case)
    model, opt = _model(record), _optimizer(record)
    report = legacy.restore_checkpoint(_location(case, record), model, opt)
    check_restored(self, model, opt, record)
    self.assertEqual(report.unmatched_checkpoint, [])
    self.assertEqual(report.unmatched_objects, [])
    self.assertEqual(report.iterations, record["iterations"])
    if record["counter"] is not None:
      self.assertEqual(report.loss_scale, record["loss_scale"])
      self.assertEqual(report.counter, record["counter"])
    # Every variable of the checkpoint is accounted for.
    keys = {k for k, _ in report.matched} | set(report.ignored)
    listed = {name for name, _ in record["variables"]} - {
        "_CHECKPOINTABLE_OBJECT_GRAPH"}
    self.assertEqual(keys, listed)

  def test_keras3_alone_cannot_restore_the_optimizer(self):
    record = _load("demo")
    model = _model(record)
    opt = keras.optimizers.SGD(0.002, momentum=0.9)
    opt.build(model.trainable_variables)
    status = tf.train.Checkpoint(model=model, optimizer=opt).restore(
        tf.train.latest_checkpoint(_location("demo", record)))
    self.assertEqual(int(opt.iterations.numpy()), 0)
    with self.assertRaises(AssertionError):
      status.assert_consumed()

  def test_manager_directory_uses_latest(self):
    record = _load("demo")
    model, opt = _model(record), _optimizer(record)
    report = legacy.restore_checkpoint(_location("demo", record), model, opt)
    self.assertTrue(report.source.endswith(record["latest_checkpoint"]))
    self.assertEqual(report.iterations, 40)
    # The older checkpoint of the same directory holds step 20.
    older = os.path.join(_location("demo", record), "ckpt-20")
    model2, opt2 = _model(record), _optimizer(record)
    report = legacy.restore_checkpoint(older, model2, opt2)
    self.assertEqual(report.iterations, 20)
    step20 = record["trajectory"][19]
    self.assertEqual(report.loss_scale, step20["loss_scale"])
    self.assertEqual(report.counter, step20["counter"])

  def test_mirrored_restore(self):
    strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    record = _load("demo")
    with strategy.scope():
      model, opt = _model(record), _optimizer(record)
    legacy.restore_checkpoint(_location("demo", record), model, opt)
    for v in (opt.dynamic_counter,
              opt._loss_scale.current_loss_scale):  # pylint: disable=protected-access
      values = {float(x.numpy()) for x in
                strategy.experimental_local_results(v)}
      self.assertLen(values, 1)
    self.assertEqual(
        [int(x.numpy()) for x in
         strategy.experimental_local_results(opt.dynamic_counter)],
        [record["counter"]] * 2)
    kernel = _layer(model, "dense").kernel
    for x in strategy.experimental_local_results(kernel.value):
      np.testing.assert_array_equal(
          x.numpy(), np.asarray(record["weights"]["dense/kernel"], np.float32))


def _step(model, opt, x, y):
  with tf.GradientTape() as tape:
    loss = tf.reduce_mean(tf.square(model(x) - y))
    scaled = opt.get_scaled_loss(loss)
  grads = opt.get_unscaled_gradients(
      tape.gradient(scaled, model.trainable_variables))
  opt.apply_gradients(zip(grads, model.trainable_variables))


class ContinueTest(parameterized.TestCase):
  """The restored state continues exactly: the next updates follow from it."""

  @parameterized.parameters("eager", "function", "mirrored")
  def test_demo_continues(self, mode):
    record = _load("demo")
    strategy = (tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
                if mode == "mirrored" else tf.distribute.get_strategy())
    with strategy.scope():
      model, opt = _model(record), _optimizer(record)
    legacy.restore_checkpoint(_location("demo", record), model, opt)
    x = np.zeros((4, 8), np.float32)
    finite_y = np.zeros((4, 1), np.float32)
    huge_y = np.full((4, 1), 60000., np.float32)

    def run(y):
      if mode == "eager":
        _step(model, opt, x, y)
      elif mode == "function":
        tf.function(_step)(model, opt, x, y)
      else:
        strategy.run(tf.function(_step), args=(model, opt, x, y))

    run(finite_y)
    self.assertEqual(int(opt.dynamic_counter.numpy()), record["counter"] + 1)
    self.assertEqual(int(opt.iterations.numpy()), record["iterations"] + 1)
    run(huge_y)  # Overflows in float16: the scale halves, counter resets.
    self.assertEqual(float(opt.loss_scale.numpy()), record["loss_scale"] / 2)
    self.assertEqual(int(opt.dynamic_counter.numpy()), 0)
    self.assertEqual(int(opt.iterations.numpy()), record["iterations"] + 2)


def _snapshot(model, opt):
  values = [v.numpy().copy() for v in model.weights]
  values += [v.numpy().copy() for v in opt.variables]
  if opt.dynamic:
    values += [opt.loss_scale.numpy(), opt.dynamic_counter.numpy()]
  return values


def _assert_unchanged(before, after):
  assert len(before) == len(after)
  for a, b in zip(before, after):
    np.testing.assert_array_equal(a, b)


class MismatchTest(parameterized.TestCase):

  def test_fixed_optimizer_for_dynamic_checkpoint(self):
    record = _load("demo")
    model = _model(record)
    opt = LossScaleOptimizer(keras.optimizers.SGD(0.002, momentum=0.9),
                             dynamic=False, initial_scale=8)
    opt.build(model.trainable_variables)
    before = _snapshot(model, opt)
    with self.assertRaises(legacy.RestoreError) as cm:
      legacy.restore_checkpoint(_location("demo", record), model, opt)
    self.assertIn("optimizer/loss_scale/current_loss_scale/.ATTRIBUTES/"
                  "VARIABLE_VALUE", cm.exception.unmatched_checkpoint)
    self.assertIn("nothing was assigned", str(cm.exception))
    _assert_unchanged(before, _snapshot(model, opt))
    # allow_partial restores the rest and lists what was left.
    report = legacy.restore_checkpoint(_location("demo", record), model, opt,
                                       allow_partial=True)
    self.assertLen(report.unmatched_checkpoint, 2)
    self.assertEqual(int(opt.iterations.numpy()), record["iterations"])

  def test_dynamic_optimizer_for_fixed_checkpoint(self):
    case = next(c for c in CASES if c.endswith("fixed"))
    record = _load(case)
    record = dict(record, loss_scale_kind="dynamic")
    model, opt = _model(record), _optimizer(record)
    with self.assertRaises(legacy.RestoreError) as cm:
      legacy.restore_checkpoint(_location(case, record), model, opt)
    self.assertEqual(cm.exception.unmatched_objects,
                     ["optimizer/loss_scale", "optimizer/loss_scale counter"])

  def test_dry_run_reports_the_plan_and_assigns_nothing(self):
    record = _load("demo")
    model, opt = _model(record), _optimizer(record)
    opt.build(model.trainable_variables)
    before = _snapshot(model, opt)
    planned = legacy.restore_checkpoint(_location("demo", record), model, opt,
                                        dry_run=True)
    _assert_unchanged(before, _snapshot(model, opt))
    self.assertIsNone(planned.iterations)
    report = legacy.restore_checkpoint(_location("demo", record), model, opt)
    self.assertEqual(planned.matched, report.matched)
    self.assertEqual(planned.ignored, report.ignored)
    self.assertEqual(report.iterations, record["iterations"])

  def test_dry_run_raises_what_the_restore_would(self):
    record = _load("demo")
    model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(1)])
    before = [v.numpy().copy() for v in model.weights]
    with self.assertRaisesRegex(legacy.RestoreError, "nothing was assigned"):
      legacy.restore_checkpoint(_location("demo", record), model,
                                dry_run=True)
    _assert_unchanged(before, [v.numpy() for v in model.weights])
    with self.assertRaisesRegex(TypeError, "dry_run must be a bool"):
      legacy.restore_checkpoint(_location("demo", record), model,
                                dry_run="yes")

  def test_wrong_architecture_changes_nothing(self):
    record = _load("demo")
    model = keras.Sequential([
        keras.Input((8,)), keras.layers.Dense(32, name="dense"),
        keras.layers.Dense(16, name="dense_1"),
        keras.layers.Dense(2, name="dense_2")])
    opt = _optimizer(record)
    opt.build(model.trainable_variables)
    before = _snapshot(model, opt)
    with self.assertRaisesRegex(legacy.RestoreError, r"shape \(16, 1\)"):
      legacy.restore_checkpoint(_location("demo", record), model, opt)
    _assert_unchanged(before, _snapshot(model, opt))

  def test_swapped_layer_names_are_detected(self):
    # Same shapes, but the checkpoint's "hidden" would land in a layer named
    # otherwise while the model has a "hidden" elsewhere.
    case = next(c for c in CASES if c.startswith("ckpt_tf22_seq"))
    record = _load(case)
    model = keras.Sequential([
        keras.Input((4,)), keras.layers.Dense(6, name="logits"),
        keras.layers.Dense(1, name="hidden")])
    with self.assertRaisesRegex(legacy.RestoreError, "differ in structure"):
      legacy.restore_checkpoint(_location(case, record), model,
                                _optimizer(record))

  def test_shifted_automatic_names_still_restore(self):
    # A process that built other Dense layers first names these dense_1,
    # dense_2, dense_3 where the old job had dense, dense_1, dense_2: the
    # automatic names say nothing about the arrangement, the order does.
    record = _load("demo")
    shifted = json.loads(record["model_json"])
    for n, layer in enumerate(shifted["config"]["layers"][1:4]):
      layer["config"]["name"] = f"dense_{n + 1}"
    model = legacy.model_from_json(json.dumps(shifted))
    self.assertEqual([l.name for l in model.layers[:3]],
                     ["dense_1", "dense_2", "dense_3"])
    opt = _optimizer(record)
    legacy.restore_checkpoint(_location("demo", record), model, opt)
    for old, new in (("dense", "dense_1"), ("dense_1", "dense_2"),
                     ("dense_2", "dense_3")):
      np.testing.assert_array_equal(
          _layer(model, new).kernel.numpy(),
          np.asarray(record["weights"][f"{old}/kernel"], np.float32))

  def test_user_names_on_automatic_ones_are_detected(self):
    # "dense_1" is automatic for a Dense, but "head" was a user's name: the
    # old head's weights would land in another layer than the model's head.
    case = next(c for c in CASES if c.startswith("ckpt_tf22_seq"))
    record = _load(case)
    model = keras.Sequential([
        keras.Input((4,)), keras.layers.Dense(6, name="hidden_renamed"),
        keras.layers.Dense(1, name="hidden")])
    self.assertFalse(_match.is_automatic_name("hidden", model.layers[1]))
    self.assertTrue(_match.is_automatic_name("dense_12", model.layers[1]))
    self.assertTrue(_match.is_automatic_name(
        "batch_normalization", keras.layers.BatchNormalization()))
    with self.assertRaisesRegex(legacy.RestoreError, "differ in structure"):
      legacy.restore_checkpoint(_location(case, record), model,
                                _optimizer(record))

  def test_missing_extra_layer_is_listed(self):
    record = _load("demo")
    bigger = _model(record)
    bigger.add(keras.layers.Dense(1, name="extra"))
    with self.assertRaises(legacy.RestoreError) as cm:
      legacy.restore_checkpoint(_location("demo", record), bigger,
                                _optimizer(record))
    self.assertIn("extra/kernel", "\n".join(cm.exception.unmatched_objects))

  def test_unbuilt_model(self):
    record = _load(next(c for c in CASES if "sub" in c))
    with self.assertRaisesRegex(ValueError, "Build it first"):
      legacy.restore_checkpoint(_location(record["case"], record), Net(),
                                _optimizer(record))


class BadInputTest(parameterized.TestCase):

  def _copy_demo(self, tmp_path):
    target = os.path.join(tmp_path, "demo")
    shutil.copytree(testing.fixture_path("legacy", "demo_tf23"), target)
    return target

  def test_missing(self):
    with self.assertRaisesRegex(FileNotFoundError, "nowhere"):
      legacy.restore_checkpoint("/nowhere/ckpt-1", keras.Sequential(), None)

  def test_directory_without_checkpoint(self):
    with self.assertRaisesRegex(FileNotFoundError, "No checkpoint found"):
      legacy.restore_checkpoint(testing.fixture_path("legacy"),
                                keras.Sequential(), None)

  @pytest.fixture(autouse=True)
  def _tmp(self, tmp_path):
    self.tmp = str(tmp_path)

  @parameterized.parameters("data", "index")
  def test_truncated_files(self, which):
    directory = self._copy_demo(self.tmp)
    suffix = ".data-00000-of-00001" if which == "data" else ".index"
    path = os.path.join(directory, "ckpt-40" + suffix)
    with open(path, "rb") as f:
      data = f.read()
    with open(path, "wb") as f:
      f.write(data[:len(data) // 2])
    record = _load("demo")
    model, opt = _model(record), _optimizer(record)
    opt.build(model.trainable_variables)
    before = _snapshot(model, opt)
    with self.assertRaisesRegex(ValueError, "ckpt-40"):
      legacy.restore_checkpoint(directory, model, opt)
    _assert_unchanged(before, _snapshot(model, opt))

  def test_corrupted_loss_scale_rejected(self):
    # A checkpoint whose loss scale is NaN (TF accepted it) is refused.
    record = _load("demo")
    model, opt = _model(record), _optimizer(record)
    opt._loss_scale.current_loss_scale.assign(float("nan"))  # pylint: disable=protected-access
    prefix = tf.train.Checkpoint(model=model, optimizer=opt).save(
        os.path.join(self.tmp, "nan"))
    model2, opt2 = _model(record), _optimizer(record)
    with self.assertRaisesRegex(legacy.RestoreError, "not finite"):
      legacy.restore_checkpoint(prefix, model2, opt2)
    self.assertEqual(float(opt2.loss_scale.numpy()), 2.0**15)


def _describe(path):
  prefix = legacy.checkpoint_prefix(path)
  reader = legacy.open_checkpoint(prefix)
  return _layout.describe(
      reader, _read_checkpoint.read_object_graph(reader, prefix))


@pytest.mark.parametrize("case", CASES)
def test_layout_describe_names_tf2x_entries(case):
  # `_layout.describe` is what the command-line `inspect` reports.
  assert _describe(testing.fixture_path("legacy", case)) == {
      "model": "keras2", "optimizer": "keras2"}


def test_layout_describe_names_keras3_entries(tmp_path):
  model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
  opt = LossScaleOptimizer(keras.optimizers.SGD(0.1))
  opt.build(model.trainable_variables)
  path = tf.train.Checkpoint(model=model, optimizer=opt,
                             step=tf.Variable(3)).save(str(tmp_path / "c"))
  assert _describe(path) == {"model": "keras3", "optimizer": "keras3",
                             "step": None}
