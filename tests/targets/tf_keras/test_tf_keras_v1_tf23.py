"""The experimental LossScaleOptimizer behaves as TF 2.3.4's (tf_keras target).

The twin of tests/optimizers/test_experimental_loss_scale_optimizer.py for
TF_USE_LEGACY_KERAS=1:
the same TF 2.3.4 records (tools/gen_tf23_lso_v1_fixtures.py ->
tests/fixtures/keras_lso/v1_tf23.json), the same job code (`tf.keras` and
`tf.mixed_precision.experimental` after `install()`), for both tf_keras
optimizer families (`tf.keras.optimizers.SGD` and `.legacy.SGD`).
"""

import gc
import json

import numpy as np
import pytest
import tensorflow as tf
import tf_keras

from tf_mixed_precision_compat import tf_keras_classes
from tests.optimizers import experimental_cases as cases


pytestmark = pytest.mark.usefixtures("installed")


FAMILIES = ("current", "legacy")


def _optimizer(case, family):
  optimizers = (tf.keras.optimizers if family == "current" else
                tf.keras.optimizers.legacy)
  return tf.keras.mixed_precision.experimental.LossScaleOptimizer(
      optimizers.SGD(0.1, momentum=0.9), cases.make_loss_scale(case))


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("case", cases.CASES)
def test_loss_scale_call_matches_tf23(case, family):
  expected = cases.fixture()[case]["calls"]
  opt = _optimizer(case, family)
  assert isinstance(opt, tf_keras.mixed_precision.LossScaleOptimizer)
  assert float(opt.loss_scale()) == expected["eager"]
  assert float(tf.function(lambda: opt.loss_scale())()) == (
      expected["function"])
  assert opt.loss_scale.__class__.__name__ == expected["loss_scale_class"]


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("case", cases.CASES)
@pytest.mark.parametrize("function", [False, True])
def test_trajectory_matches_tf23(case, family, function):
  rows = cases.fixture()[case][
      "trajectory_function" if function else "trajectory_eager"]
  cases.check_trajectory(_optimizer(case, family), function, rows)


@pytest.mark.parametrize("family", FAMILIES)
def test_trajectory_matches_tf23_mirrored(family, mirrored_strategy):
  cases.check_trajectory_mirrored(
      mirrored_strategy, lambda: _optimizer("multiplier_4", family),
      cases.fixture()["multiplier_4"]["trajectory_function"])


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("case", cases.CASES)
def test_resumes_tf23_checkpoint(case, family):
  cases.check_resumes_checkpoint(case, _optimizer(case, family))


@pytest.mark.parametrize("case", ["multiplier_4", "custom"])
def test_checkpoint_layout_is_tf23s(case, tmp_path):
  record = cases.fixture()[case]["checkpoint"]
  opt = _optimizer(case, "legacy")
  model = cases.holder()
  model(tf.ones([2]))
  cases.step_fn(opt, model.var)(tf.constant([1.0, 1.0]))
  path = tf.train.Checkpoint(model=model, optimizer=opt).save(
      str(tmp_path / "c"))
  ours = {name for name, _ in tf.train.list_variables(path)}
  theirs = {name for name, _ in record["variables"]}
  # The legacy family is TF 2.3's OptimizerV2: the whole layout is TF 2.3's.
  assert ours == theirs


def test_config_round_trip_matches_tf23():
  data = cases.fixture()
  custom = {"HalvingLossScale": cases.custom_class()}
  lso = tf.keras.mixed_precision.experimental.LossScaleOptimizer
  for case in ("multiplier_4", "custom"):
    recorded = data[case]["get_config"]
    opt = lso.from_config(recorded, custom_objects=custom)
    assert opt.get_config()["loss_scale"] == recorded["loss_scale"]
    assert sorted(opt.get_config()) == sorted(recorded)
    var = tf.Variable([1.0, -2.0])
    cases.check_rows(opt, var, cases.step_fn(opt, var), cases.gradients(),
                     data[case]["trajectory_eager"])
    serialized = json.loads(json.dumps(tf.keras.optimizers.serialize(opt)))
    with tf.keras.utils.custom_object_scope(custom):
      again = tf.keras.optimizers.deserialize(serialized)
    assert isinstance(again, lso)
    assert again.get_config()["loss_scale"] == recorded["loss_scale"]
  # tf_keras's non-experimental class keeps TF 2.4's refusal.
  tf24_class = tf_keras_classes._LSO_V2  # pylint: disable=protected-access
  with pytest.raises(ValueError, match="multiplier is not 2"):
    tf24_class.from_config(data["multiplier_4"]["get_config"])


@pytest.mark.parametrize("family", FAMILIES)
def test_loss_scale_is_usable_as_tf24_tensor(family):
  opt = _optimizer("fixed", family)
  value = opt.loss_scale
  assert float(value) == 128. and value.numpy() == np.float32(128.)
  assert float(value * 2.) == 256. and float(1. / value) == 1 / 128.
  assert float(tf.convert_to_tensor(value)) == 128.
  assert tf.keras.backend.get_value(value) == 128.
  assert bool(value >= 128.) and f"{value:.0f}" == "128"
  assert float(tf.function(lambda: opt.loss_scale * 1.)()) == 128.


def test_session_fetches_loss_scale():
  with tf.Graph().as_default():
    opt = _optimizer("multiplier_4", "legacy")
    var = tf.compat.v1.Variable([1.0, -2.0], use_resource=True)
    train = opt.minimize(lambda: tf.reduce_sum(var * [1.0, 1.0]), [var])
    with tf.compat.v1.Session() as sess:
      sess.run(tf.compat.v1.global_variables_initializer())
      for _ in range(2):
        sess.run(train)
      # TF 2.3 code: loss_scale(); TF 2.4 code: loss_scale.
      assert sess.run(opt.loss_scale()) == sess.run(opt.loss_scale) == 32.


def _sgd(family):
  return (tf.keras.optimizers if family == "current" else
          tf.keras.optimizers.legacy).SGD


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("collected", [False, True], ids=["alive", "collected"])
@pytest.mark.parametrize("first,second", cases.WRAPPER_PAIRS)
def test_second_wrapper_around_same_inner_raises_as_tf(first, second,
                                                       collected, family):
  cases.check_second_wrapper_refused(first, second, _sgd(family), collected)


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("collected", [False, True], ids=["alive", "collected"])
def test_second_wrapper_refused_under_mirrored_strategy(mirrored_strategy,
                                                        collected, family):
  cases.check_second_wrapper_refused("tf23", "dynamic", _sgd(family),
                                     collected, mirrored_strategy.scope)


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("collected", [False, True], ids=["alive", "collected"])
def test_second_wrapper_refused_in_tf_function(collected, family):
  cases.check_second_wrapper_refused_in_tf_function(
      "fixed", "dynamic", _sgd(family)(), collected, "base_optimizer")


@pytest.mark.parametrize("family", FAMILIES)
def test_tf_keras_own_wrapper_refuses_a_second_with_tfs_message(family):
  # Wrapped by tf_keras's class directly, not through the endpoints (as
  # tf_keras's own `compile` does): TF 2.4's message all the same.
  inner = _sgd(family)()
  kept = tf_keras.mixed_precision.LossScaleOptimizer(inner)
  del kept
  gc.collect()
  with pytest.raises(ValueError, match=r"^Called Trackable\._track_trackable"
                     r"\(\) with name='loss_scale'.*from_config"):
    tf.keras.mixed_precision.experimental.LossScaleOptimizer(inner, "dynamic")


@pytest.mark.parametrize("family", FAMILIES)
def test_refused_arguments_leave_the_inner_optimizer_unwrapped(family):
  inner = _sgd(family)()
  with pytest.raises(ValueError, match='"initial_scale" must be specified'):
    tf.keras.mixed_precision.LossScaleOptimizer(inner, dynamic=False)
  assert tf.keras.mixed_precision.LossScaleOptimizer(
      inner).inner_optimizer is inner


def test_policy_loss_scale_is_the_optimizers():
  model, policy = cases.model_under_loss_scale_policy(
      lambda: tf.keras.Sequential([tf.keras.layers.Dense(1, input_shape=(2,))]))
  model.compile(optimizer=tf.keras.optimizers.SGD(0.01), loss="mse")
  cases.fit_and_check_policy_loss_scale(model, policy)
  assert isinstance(model.optimizer,
                    tf.keras.mixed_precision.experimental.LossScaleOptimizer)


def test_registered_name_deserializes_as_tf24_unless_only_tf23_can_hold():
  data = cases.fixture()
  deserialize = tf.keras.utils.deserialize_keras_object
  opt = deserialize({"class_name": "LossScaleOptimizerV1",
                     "config": data["multiplier_4"]["get_config"]})
  assert isinstance(opt, tf.keras.mixed_precision.experimental.
                    LossScaleOptimizer)
  assert opt.loss_scale.multiplier == 4
  fixed = deserialize({"class_name": "LossScaleOptimizerV1",
                       "config": data["fixed"]["get_config"]})
  # TF 2.4.4 made a LossScaleOptimizer of a serialized experimental one.
  assert not isinstance(fixed, tf.keras.mixed_precision.experimental.
                        LossScaleOptimizer)
  assert isinstance(fixed, tf.keras.mixed_precision.LossScaleOptimizer)
  assert float(fixed.loss_scale) == 128.
