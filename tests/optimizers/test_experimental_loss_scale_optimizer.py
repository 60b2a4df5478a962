"""The experimental LossScaleOptimizer behaves as TF 2.3.4's (Keras 3 target).

TF 2.3 jobs call `optimizer.loss_scale()` and pass any `LossScale`; TF 2.4
broke both. Every number here comes from TF 2.3.4
(tools/gen_tf23_lso_v1_fixtures.py -> tests/fixtures/keras_lso/v1_tf23.json)
or TF 2.4.4 (tools/gen_tf24_weights_lists.py -> weights_tf24.json). The
tf_keras target's twin is tests/targets/tf_keras/test_tf_keras_v1_tf23.py.
"""

import json

import keras
import numpy as np
import pytest
import tensorflow as tf

from tests.optimizers import experimental_cases as cases
from tf_mixed_precision_compat import loss_scale as loss_scale_module
from tf_mixed_precision_compat.optimizers.loss_scale_optimizer import (
    LossScaleOptimizer)
from tf_mixed_precision_compat import LossScaleOptimizerV1

pytestmark = pytest.mark.usefixtures("installed")


@pytest.mark.parametrize("case", cases.CASES)
def test_loss_scale_call_matches_tf23(case):
  expected = cases.fixture()[case]["calls"]
  opt = cases.make_optimizer(case)
  assert isinstance(opt, LossScaleOptimizerV1)
  assert float(opt.loss_scale()) == expected["eager"]
  assert float(tf.function(lambda: opt.loss_scale())()) == (
      expected["function"])
  assert type(opt.loss_scale).__name__ == "LossScaleValue"
  assert opt.loss_scale.__class__.__name__ == expected["loss_scale_class"]


@pytest.mark.parametrize("case", cases.CASES)
@pytest.mark.parametrize("function", [False, True])
def test_trajectory_matches_tf23(case, function):
  rows = cases.fixture()[case][
      "trajectory_function" if function else "trajectory_eager"]
  cases.check_trajectory(cases.make_optimizer(case), function, rows)


# TF 2.3.4's own DynamicLossScale handled replicas; a user LossScale's update
# got per-replica gradients there too, which the fixture's does not handle.
@pytest.mark.parametrize("case", ["dynamic", "multiplier_4"])
def test_trajectory_matches_tf23_mirrored(case, mirrored_strategy):
  cases.check_trajectory_mirrored(
      mirrored_strategy, lambda: cases.make_optimizer(case),
      cases.fixture()[case]["trajectory_function"])


@pytest.mark.parametrize("case", cases.CASES)
def test_resumes_tf23_checkpoint(case):
  cases.check_resumes_checkpoint(case, cases.make_optimizer(case))


@pytest.mark.parametrize("case", ["multiplier_4", "custom"])
def test_checkpoint_layout_is_tf23s(case, tmp_path):
  record = cases.fixture()[case]["checkpoint"]
  opt = cases.make_optimizer(case)
  var = tf.Variable([1.0, -2.0])
  cases.step_fn(opt, var)(tf.constant([1.0, 1.0]))
  model = cases.holder()
  model.var.assign(var)
  path = tf.train.Checkpoint(model=model, optimizer=opt).save(
      str(tmp_path / "c"))
  ours = {name for name, _ in tf.train.list_variables(path)}
  theirs = {name for name, _ in record["variables"]}
  loss_scale_entries = {n for n in theirs if "/loss_scale/" in n}
  assert loss_scale_entries and loss_scale_entries <= ours


def test_config_round_trip_matches_tf23():
  data = cases.fixture()
  custom = {"HalvingLossScale": cases.custom_class()}
  for case in ("multiplier_4", "custom"):
    recorded = data[case]["get_config"]
    opt = LossScaleOptimizerV1.from_config(recorded, custom_objects=custom)
    assert type(opt) is LossScaleOptimizerV1
    assert opt.get_config()["loss_scale"] == recorded["loss_scale"]
    assert sorted(opt.get_config()) == sorted(recorded)
    var = tf.Variable([1.0, -2.0])
    cases.check_rows(opt, var, cases.step_fn(opt, var), cases.gradients(),
                     data[case]["trajectory_eager"])
    serialized = json.loads(json.dumps(keras.optimizers.serialize(opt)))
    with keras.saving.custom_object_scope(custom):
      again = keras.optimizers.deserialize(serialized)
    # TF 2.4 could not hold this loss scale, so it stays a TF 2.3 class.
    assert type(again) is LossScaleOptimizerV1
    assert again.get_config() == opt.get_config()
  # The non-experimental class keeps TF 2.4's refusal.
  with pytest.raises(ValueError, match="multiplier is not 2"):
    LossScaleOptimizer.from_config(data["multiplier_4"]["get_config"])


def test_loss_scale_is_the_given_loss_scale():
  scale = loss_scale_module.DynamicLossScale(8, 2, multiplier=4)
  opt = LossScaleOptimizerV1(keras.optimizers.SGD(0.1), scale)
  var = tf.Variable([1.0])
  opt.apply_gradients([(tf.constant([1.0]), var)])
  opt.apply_gradients([(tf.constant([1.0]), var)])
  # The job's own object was updated, as in TF 2.3.
  assert float(scale()) == 32.
  assert opt.loss_scale == scale and opt.loss_scale.increment_period == 2
  assert (opt.dynamic, opt.initial_scale, opt.dynamic_growth_steps) == (
      True, 8., 2)
  assert int(opt.dynamic_counter.numpy()) == 0


def _tensor_uses(value):
  """Everything TF 2.4 code did with `opt.loss_scale`, as floats."""
  return [
      tf.convert_to_tensor(value), value * 2., 2. * value, value + 1.,
      value - 1., 1. / value, value / 2., -value, tf.cast(value, tf.float16),
      tf.math.log(value), tf.identity(value)
  ]


def test_loss_scale_is_usable_as_tf24_tensor():
  opt = LossScaleOptimizerV1(keras.optimizers.SGD(), 128)
  value = opt.loss_scale
  assert [float(x) for x in _tensor_uses(value)] == pytest.approx(
      [128., 256., 256., 129., 127., 1 / 128., 64., -128., 128.,
       np.log(128.), 128.])
  assert value.numpy() == np.float32(128.) and value.dtype == tf.float32
  assert float(value) == 128. and int(value) == 128
  assert np.asarray(value) == 128.
  assert tf.keras.backend.get_value(value) == 128.
  assert bool(value > 100.) and bool(value <= 128.) and bool(value == 128.)
  assert not bool(value != 128.) and bool(value < 200.)
  assert f"{value:.1f}" == "128.0" and "128" in str(value)
  assert tf.is_tensor(value)
  got = tf.function(lambda: [x * 1. for x in _tensor_uses(opt.loss_scale)])()
  assert [float(x) for x in got][:4] == [128., 256., 256., 129.]


def test_non_experimental_class_keeps_tf24_rules():
  opt = LossScaleOptimizer(keras.optimizers.SGD(), initial_scale=64.)
  # TF 2.4's `loss_scale`: the current scale as a float32 scalar tensor.
  assert isinstance(opt.loss_scale, tf.Tensor)
  assert opt.loss_scale.dtype == tf.float32
  assert opt.loss_scale.shape.rank == 0 and float(opt.loss_scale) == 64.
  assert not callable(opt.loss_scale)


@pytest.mark.parametrize("collected", [False, True], ids=["alive", "collected"])
@pytest.mark.parametrize("first,second", cases.WRAPPER_PAIRS)
def test_second_wrapper_around_same_inner_raises_as_tf(first, second,
                                                       collected):
  cases.check_second_wrapper_refused(first, second, keras.optimizers.SGD,
                                     collected)


@pytest.mark.parametrize("collected", [False, True], ids=["alive", "collected"])
def test_second_wrapper_refused_under_mirrored_strategy(mirrored_strategy,
                                                        collected):
  cases.check_second_wrapper_refused("dynamic", "tf23", keras.optimizers.SGD,
                                     collected, mirrored_strategy.scope)


@pytest.mark.parametrize("collected", [False, True], ids=["alive", "collected"])
def test_second_wrapper_refused_in_tf_function(collected):
  cases.check_second_wrapper_refused_in_tf_function(
      "dynamic", "dynamic", keras.optimizers.SGD(), collected, "loss_scale")


def test_refused_arguments_leave_the_inner_optimizer_unwrapped():
  inner = keras.optimizers.SGD()
  with pytest.raises(ValueError, match='"initial_scale" must be specified'):
    LossScaleOptimizer(inner, dynamic=False)
  assert LossScaleOptimizer(inner).inner_optimizer is inner


def test_compat_v1_optimizer_may_wrap_one_optimizer_twice_as_in_tf():
  record = cases.double_wrap_fixture()
  assert record["tf24"]["v1"] == record["tf23"]["v1"] == {
      "alive": None, "collected": None}
  inner = tf.compat.v1.train.GradientDescentOptimizer(1.0)
  v1 = tf.compat.v1.mixed_precision.MixedPrecisionLossScaleOptimizer
  first = v1(inner, "dynamic")
  assert v1(inner, "dynamic")._optimizer is first._optimizer  # pylint: disable=protected-access


def test_policy_loss_scale_is_the_optimizers():
  model, policy = cases.model_under_loss_scale_policy(
      lambda: keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)]))
  model.compile(optimizer=keras.optimizers.SGD(0.01), loss="mse")
  assert isinstance(model.optimizer, LossScaleOptimizerV1)
  cases.fit_and_check_policy_loss_scale(model, policy)


def test_tfs_own_compat_v1_dynamic_loss_scale_multiplier_4():
  # TF 2.21 still ships TF 2.3's classes under tf.compat.v1; the
  # experimental class uses them as it uses ours.
  loss_scale = tf.compat.v1.mixed_precision.DynamicLossScale(
      initial_loss_scale=8, increment_period=2, multiplier=4)
  opt = LossScaleOptimizerV1(keras.optimizers.SGD(0.1, momentum=0.9),
                             loss_scale)
  var = tf.Variable([1.0, -2.0])
  cases.check_rows(opt, var, tf.function(cases.step_fn(opt, var)),
                   cases.gradients(),
                   cases.fixture()["multiplier_4"]["trajectory_function"])
