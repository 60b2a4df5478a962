"""Keras 3's own loading functions and the optimizer's TF 2.x calls, installed.

After `install()`, the calls a TF 2.3/2.4 job makes itself load what TF 2.x
wrote, with no change to the job:

* `model.load_weights(prefix)` / `model.load_weights("w.h5")` on the weight
  files real TF 2.3.4/2.4.4 wrote (tools/gen_weights_fixtures.py);
* `tf.keras.optimizers.deserialize` / `get` on the optimizer configs real TF
  2.3.4/2.4.4 serialized (tools/gen_keras_lso_fixtures.py);
* `tf.keras.models.load_model` on their H5 files and SavedModels;
* `optimizer.get_slot(var, "m")` with TF 2.x slot names, and
  `apply_gradients(grads_and_vars, name)` handing `name` to the inner
  optimizer, eagerly, in a `tf.function` and with 2 replicas.

`uninstall()` puts every original back.
"""

import glob
import json
import os
import shutil

import keras
import numpy as np
import pytest
import tensorflow as tf

from tests.legacy import test_restore_checkpoint as ckpt_tests
from tests import testing
import tf_mixed_precision_compat as mp
from tf_mixed_precision_compat.legacy import _config
from tf_mixed_precision_compat import legacy
from tf_mixed_precision_compat.optimizers.loss_scale_optimizer import (
    LossScaleOptimizer)

WEIGHT_CASES = sorted(
    os.path.basename(p)[:-len(".json")]
    for p in glob.glob(testing.fixture_path("legacy", "weights_*.json")))
MODEL_FILES = ["h5_tf23_func_adam.h5", "h5_tf24_func_sgd.h5",
               "h5_tf24_seq_adam_exp.h5", "sm_tf23_seq_sgd",
               "sm_tf24_func_adam"]


@pytest.fixture(autouse=True)
def _installed():
  mp.install()
  yield
  mp.uninstall()


class _Checks:
  """`check_restored` wants a unittest-style `assertEqual`/`assertFalse`."""

  @staticmethod
  def assertEqual(a, b):  # pylint: disable=invalid-name
    assert a == b, (a, b)

  @staticmethod
  def assertFalse(a):  # pylint: disable=invalid-name
    assert not a


def _record(case):
  with open(testing.fixture_path("legacy", case + ".json")) as f:
    return json.load(f)


def _assert_weights(model, record):
  for key, value in record["weights"].items():
    layer_name, weight = key.split("/")
    variable = getattr(ckpt_tests._layer(model, layer_name), weight)  # pylint: disable=protected-access
    np.testing.assert_array_equal(variable.numpy(),
                                  np.asarray(value, np.float32), err_msg=key)


def _fresh_values(model):
  return [v.numpy().copy() for v in model.weights]


# ------------------------------------------------------- load_weights --


@pytest.mark.parametrize("case", WEIGHT_CASES)
def test_load_weights_tf_format_restores_model_and_optimizer(case):
  record = _record(case)
  model = ckpt_tests._model(record)  # pylint: disable=protected-access
  opt = ckpt_tests._optimizer(record)  # pylint: disable=protected-access
  model.compile(optimizer=opt, loss="mse")
  status = model.load_weights(
      testing.fixture_path("legacy", record["location"]))
  ckpt_tests.check_restored(_Checks, model, opt, record)
  status.assert_consumed().assert_existing_objects_matched()


@pytest.mark.parametrize("case", WEIGHT_CASES)
def test_load_weights_tf_format_without_optimizer_reports_what_it_left(
    case, tf_log):
  record = _record(case)
  model = ckpt_tests._model(record)  # pylint: disable=protected-access
  status = model.load_weights(
      testing.fixture_path("legacy", record["location"]))
  _assert_weights(model, record)
  assert "was not restored: the model has no optimizer" in "\n".join(tf_log)
  with pytest.raises(AssertionError, match="Unresolved values"):
    status.assert_consumed()


@pytest.mark.parametrize("case", WEIGHT_CASES)
@pytest.mark.parametrize("by_name", [False, True])
def test_load_weights_h5_restores_exactly(case, by_name):
  record = _record(case)
  model = ckpt_tests._model(record)  # pylint: disable=protected-access
  model.load_weights(testing.fixture_path("legacy", record["h5"]),
                     by_name=by_name)
  _assert_weights(model, record)


def test_load_weights_h5_under_the_keras_suffix_restores_exactly(tmp_path):
  # TF 2.x wrote H5 files under ".keras" too; Keras 3 reads a zip there.
  record = _record("weights_tf24_seq_sgd_dynamic")
  path = str(tmp_path / "w.keras")
  shutil.copyfile(testing.fixture_path("legacy", record["h5"]), path)
  model = ckpt_tests._model(record)  # pylint: disable=protected-access
  model.load_weights(path)
  _assert_weights(model, record)


def test_load_weights_h5_mismatch_raises_and_assigns_nothing():
  record = _record("weights_tf24_seq_sgd_dynamic")
  model = keras.Sequential([keras.Input((4,)),
                            keras.layers.Dense(6, name="hidden"),
                            keras.layers.Dense(2, name="logits")])
  before = _fresh_values(model)
  with pytest.raises(ValueError, match="logits"):
    model.load_weights(testing.fixture_path("legacy", record["h5"]))
  for old, variable in zip(before, model.weights):
    np.testing.assert_array_equal(old, variable.numpy())


def test_load_weights_h5_by_name_skip_mismatch_keeps_the_rest(tf_log):
  record = _record("weights_tf24_seq_sgd_dynamic")
  model = keras.Sequential([keras.Input((4,)),
                            keras.layers.Dense(6, name="hidden"),
                            keras.layers.Dense(2, name="logits")])
  logits_before = model.get_layer("logits").kernel.numpy().copy()
  model.load_weights(testing.fixture_path("legacy", record["h5"]),
                     by_name=True, skip_mismatch=True)
  np.testing.assert_array_equal(
      model.get_layer("hidden").kernel.numpy(),
      np.asarray(record["weights"]["hidden/kernel"], np.float32))
  np.testing.assert_array_equal(model.get_layer("logits").kernel.numpy(),
                                logits_before)
  assert "Skipping loading of weights for layer logits" in "\n".join(tf_log)


def test_load_weights_tf_format_by_name_is_refused_as_tf24_did():
  record = _record("weights_tf24_func_adam_dynamic")
  model = ckpt_tests._model(record)  # pylint: disable=protected-access
  before = _fresh_values(model)
  with pytest.raises(NotImplementedError, match="by_name=True"):
    model.load_weights(testing.fixture_path("legacy", record["location"]),
                       by_name=True)
  for old, variable in zip(before, model.weights):
    np.testing.assert_array_equal(old, variable.numpy())


def test_load_weights_skip_mismatch_without_by_name_is_refused():
  record = _record("weights_tf24_seq_sgd_dynamic")
  model = ckpt_tests._model(record)  # pylint: disable=protected-access
  with pytest.raises(ValueError, match="skip_mismatch"):
    model.load_weights(testing.fixture_path("legacy", record["h5"]),
                       skip_mismatch=True)


def test_keras3_weight_files_still_go_to_keras3(tmp_path):
  model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
  path = str(tmp_path / "model.weights.h5")
  model.save_weights(path)
  expected = _fresh_values(model)
  twin = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
  twin.load_weights(path)
  for value, variable in zip(expected, twin.weights):
    np.testing.assert_array_equal(value, variable.numpy())


# -------------------------------------------------- optimizer configs --


def _tf_configs(version):
  with open(testing.fixture_path("keras_lso", f"configs_{version}.json")) as f:
    data = json.load(f)
  return {k: v for k, v in data.items() if isinstance(v, dict)}


def _config_cases():
  cases = []
  for version in ("tf23", "tf24"):
    for name, entry in sorted(_tf_configs(version).items()):
      if "serialize" in entry:
        cases.append((version, name))
  return cases


@pytest.mark.parametrize("version,name", _config_cases())
@pytest.mark.parametrize("entry", ["deserialize", "get"])
def test_tf2x_optimizer_configs_deserialize_as_legacy_does(version, name,
                                                           entry):
  serialized = _tf_configs(version)[name]["serialize"]
  try:
    expected = _config.build_optimizer(serialized, "config", {})
  except ValueError as e:
    with pytest.raises(ValueError, match="cannot rebuild"):
      getattr(tf.keras.optimizers, entry)(serialized)
    assert str(e)
    return
  opt = getattr(tf.keras.optimizers, entry)(serialized)
  assert isinstance(opt, LossScaleOptimizer)
  config = serialized["config"]
  inner_config = config.get("inner_optimizer", config.get("optimizer"))
  assert type(opt.inner_optimizer).__name__.lower() == (
      inner_config["class_name"].lower())
  np.testing.assert_allclose(float(opt.inner_optimizer.learning_rate),
                             inner_config["config"]["learning_rate"],
                             rtol=1e-7)
  if "dynamic" in config:
    assert opt.dynamic == config["dynamic"]
    assert float(opt.initial_scale) == config["initial_scale"]
  assert type(opt) is type(expected)
  assert opt.get_config() == expected.get_config()


def test_keras2_plain_optimizer_config_deserializes():
  opt = tf.keras.optimizers.deserialize(
      {"class_name": "Adam", "config": {
          "name": "Adam", "learning_rate": 0.002, "decay": 0.0,
          "beta_1": 0.8, "beta_2": 0.999, "epsilon": 1e-7,
          "amsgrad": False}})
  assert isinstance(opt, keras.optimizers.Adam)
  assert float(opt.beta_1) == pytest.approx(0.8)
  assert float(opt.learning_rate) == pytest.approx(0.002)


def test_keras3_configs_and_strings_still_go_to_keras3():
  opt = keras.optimizers.Adam(0.01)
  twin = tf.keras.optimizers.deserialize(keras.optimizers.serialize(opt))
  assert type(twin) is keras.optimizers.Adam  # pylint: disable=unidiomatic-typecheck
  assert type(tf.keras.optimizers.get("sgd")) is keras.optimizers.SGD  # pylint: disable=unidiomatic-typecheck


def test_unknown_tf2x_inner_optimizer_is_refused():
  with pytest.raises(ValueError):
    tf.keras.optimizers.deserialize(
        {"class_name": "LossScaleOptimizer", "config": {
            "inner_optimizer": {"class_name": "NoSuchOptimizer",
                                "config": {"learning_rate": 0.1}},
            "dynamic": True, "initial_scale": 8.0,
            "dynamic_growth_steps": 2}})


# ---------------------------------------------------------- load_model --


def _assert_same_loaded(ours, theirs):
  assert [v.name for v in ours.weights] == [v.name for v in theirs.weights]
  for a, b in zip(ours.weights, theirs.weights):
    np.testing.assert_array_equal(a.numpy(), b.numpy())
  opt_a = getattr(ours, "optimizer", None)
  opt_b = getattr(theirs, "optimizer", None)
  assert type(opt_a) is type(opt_b)
  if isinstance(opt_a, LossScaleOptimizer):
    assert float(opt_a.loss_scale) == float(opt_b.loss_scale)
    assert int(opt_a.iterations) == int(opt_b.iterations)
    assert len(opt_a.variables) == len(opt_b.variables)
    for a, b in zip(opt_a.variables, opt_b.variables):
      np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


@pytest.mark.parametrize("name", MODEL_FILES)
@pytest.mark.parametrize("entry", ["tf.keras.models", "keras.saving"])
def test_load_model_of_tf2x_files_gives_what_legacy_gives(name, entry):
  path = testing.fixture_path("legacy", name)
  load = (tf.keras.models.load_model if entry == "tf.keras.models" else
          keras.saving.load_model)
  ours = load(path)
  _assert_same_loaded(ours, legacy.load_model(path))
  assert isinstance(ours.optimizer, LossScaleOptimizer)


def test_load_model_compile_false_has_no_optimizer():
  path = testing.fixture_path("legacy", "h5_tf24_func_sgd.h5")
  model = tf.keras.models.load_model(path, compile=False)
  assert getattr(model, "optimizer", None) is None
  _assert_same_loaded(model, legacy.load_model(path, compile=False))


def test_keras3_model_files_still_go_to_keras3(tmp_path):
  model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
  model.compile(optimizer="adam", loss="mse")
  path = str(tmp_path / "m.keras")
  model.save(path)
  twin = tf.keras.models.load_model(path)
  assert type(twin.optimizer) is keras.optimizers.Adam  # pylint: disable=unidiomatic-typecheck
  for a, b in zip(model.weights, twin.weights):
    np.testing.assert_array_equal(a.numpy(), b.numpy())


def test_uninstall_puts_every_original_back():
  mp.uninstall()
  originals = (keras.optimizers.deserialize, keras.optimizers.get,
               keras.models.load_model, keras.saving.load_model,
               keras.Model.load_weights)
  mp.install()
  assert keras.optimizers.deserialize is not originals[0]
  assert tf.keras.optimizers.deserialize is keras.optimizers.deserialize
  assert keras.Model.load_weights is not originals[4]
  mp.uninstall()
  assert (keras.optimizers.deserialize, keras.optimizers.get,
          keras.models.load_model, keras.saving.load_model,
          keras.Model.load_weights) == originals
  assert tf.keras.optimizers.deserialize is originals[0]
  assert tf.keras.models.load_model is originals[2]
  mp.install()


# ------------------------------------------------- TF 2.x slot names --

_SLOT_CASES = [
    ("SGD", {"momentum": 0.9}, {"momentum": "momentum"}),
    ("Adam", {"amsgrad": True},
     {"m": "momentum", "v": "velocity", "vhat": "velocity_hat"}),
    ("Adamax", {}, {"m": "momentum", "v": "norm"}),
    ("Nadam", {}, {"m": "momentum", "v": "velocity"}),
    ("RMSprop", {"momentum": 0.5, "centered": True},
     {"rms": "velocity", "momentum": "momentum", "mg": "average_gradient"}),
    ("Adagrad", {}, {"accumulator": "accumulator"}),
    ("Adadelta", {}, {"accum_grad": "accumulated_grad",
                      "accum_var": "accumulated_delta_var"}),
    ("Ftrl", {}, {"accumulator": "accumulator", "linear": "linear"}),
]


def _step(opt, var, mode, strategy=None):
  grad = tf.constant([0.5, -0.25])

  def step():
    opt.apply_gradients([(grad, var)])

  if mode == "eager":
    step()
  elif mode == "function":
    tf.function(step)()
  else:
    strategy.run(tf.function(step))


@pytest.mark.parametrize("mode", ["eager", "function", "mirrored"])
@pytest.mark.parametrize("class_name,kwargs,names", _SLOT_CASES,
                         ids=[c[0] for c in _SLOT_CASES])
def test_get_slot_accepts_tf2x_slot_names(class_name, kwargs, names, mode,
                                          mirrored_strategy):
  strategy = mirrored_strategy if mode == "mirrored" else (
      tf.distribute.get_strategy())
  with strategy.scope():
    var = tf.Variable([1.0, 2.0])
    opt = tf.keras.mixed_precision.LossScaleOptimizer(
        getattr(keras.optimizers, class_name)(**kwargs))
  _step(opt, var, mode, strategy)
  for tf2_name, keras3_name in names.items():
    slot = opt.get_slot(var, tf2_name)
    assert slot is opt.get_slot(var, keras3_name)
    # Keras < 3.8 names Adagrad's and Ftrl's accumulators without the
    # variable's prefix.
    assert slot.name == keras3_name or slot.name.endswith("_" + keras3_name)
    assert any(slot is v for v in opt.inner_optimizer.variables)
  assert set(opt.get_slot_names()) == set(names.values()) | (
      {"momentum"} if class_name == "RMSprop" else set())
  with pytest.raises(KeyError, match="No slot 'nope'"):
    opt.get_slot(var, "nope")


def test_tf2x_slot_name_of_another_optimizer_is_refused():
  var = tf.Variable([1.0, 2.0])
  opt = tf.keras.mixed_precision.LossScaleOptimizer(keras.optimizers.SGD(
      momentum=0.9))
  _step(opt, var, "eager")
  with pytest.raises(KeyError, match="No slot 'm'"):
    opt.get_slot(var, "m")


# ------------------------------------ apply_gradients(grads, name) --


class ClippingSGD(keras.optimizers.SGD):
  """A trainer's own optimizer: its second argument is a clip norm."""

  def __init__(self, *args, **kwargs):
    super().__init__(*args, **kwargs)
    self.seen = []

  def apply_gradients(self, grads_and_vars, clip_norm=100.0):
    self.seen.append(clip_norm)
    grads_and_vars = list(grads_and_vars)
    grads = [tf.clip_by_norm(g, clip_norm) for g, _ in grads_and_vars]
    return super().apply_gradients(
        zip(grads, [v for _, v in grads_and_vars]))


class AggregatingSGD(keras.optimizers.SGD):
  """Names TF 2.4's `experimental_aggregate_gradients` as a keyword."""

  def __init__(self, *args, **kwargs):
    super().__init__(*args, **kwargs)
    self.seen = []

  def apply_gradients(self, grads_and_vars, name=None,
                      experimental_aggregate_gradients=True):
    self.seen.append((name, experimental_aggregate_gradients))
    return super().apply_gradients(grads_and_vars)


@pytest.mark.parametrize("mode", ["eager", "function", "mirrored"])
def test_apply_gradients_hands_name_to_the_inner_optimizer(mode,
                                                           mirrored_strategy):
  strategy = mirrored_strategy if mode == "mirrored" else (
      tf.distribute.get_strategy())
  with strategy.scope():
    var = tf.Variable([0.0])
    inner = ClippingSGD(1.0)
    opt = tf.keras.mixed_precision.LossScaleOptimizer(inner, dynamic=False,
                                                      initial_scale=1.0)

  def step():
    opt.apply_gradients([(tf.constant([10.0]), var)], 0.5)

  if mode == "eager":
    step()
  elif mode == "function":
    tf.function(step)()
  else:
    strategy.run(tf.function(step))
  # Each replica's gradient is clipped to 0.5 by the override before the
  # inner optimizer sums them (as in TF 2.4, where the override also ran
  # per replica, before OptimizerV2's aggregation).
  expected = -0.5 * (2 if mode == "mirrored" else 1)
  np.testing.assert_allclose(var.numpy(), [expected])
  assert inner.seen and all(float(c) == 0.5 for c in inner.seen)


def test_apply_gradients_hands_aggregate_flag_when_named():
  var = tf.Variable([0.0])
  inner = AggregatingSGD(1.0)
  opt = tf.keras.mixed_precision.LossScaleOptimizer(inner)
  opt.apply_gradients([(tf.constant([1.0]), var)], "step",
                      experimental_aggregate_gradients=True)
  assert inner.seen == [("step", True)]


def test_keras3_builtin_inner_optimizer_ignores_name():
  var = tf.Variable([0.0])
  opt = tf.keras.mixed_precision.LossScaleOptimizer(keras.optimizers.SGD(1.0))
  opt.apply_gradients([(tf.constant([1.0]), var)], "a_name")
  np.testing.assert_allclose(var.numpy(), [-1.0])
