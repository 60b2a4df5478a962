"""TF 2.4's loss-scale unit tests, ported to the package.

Original: tensorflow/python/training/experimental/loss_scale_test.py (TF r2.4),
which tested `FixedLossScale` and `DynamicLossScale`; here they are reached as
`tf.mixed_precision.experimental.*` after `install()` (`get`, which TF
exported nowhere, from the package's `loss_scale` module). Each case keeps the
original's inputs, expected values and assertions, and runs in a
tf.compat.v1 graph and eagerly; the strategy cases run with the default
strategy and with a MirroredStrategy over 2 logical CPUs (TF ran 1 replica on
a CPU-only machine), where only replica 0 sees the step's non-finite gradient.

Skipped: none.
"""

import numpy as np
import pytest
import tensorflow as tf

from tests.tf_ported import harness
from tf_mixed_precision_compat import loss_scale as loss_scale_module

MODES = harness.MODES
STRATEGIES = harness.STRATEGIES


def _exp():
  return tf.mixed_precision.experimental


# --- FixedLossScale -----------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
def test_fixed_basic(mode):
  with harness.mode_context(mode) as evaluate:
    scale = _exp().FixedLossScale(1000)
    for grad in (0., float("nan")):
      update_op, should_apply = scale.update([tf.constant(grad)])
      if update_op is not None:
        evaluate.run_if_graph(update_op)
      # A Python bool, so callers need no tf.cond on it in a graph.
      assert isinstance(should_apply, bool)
      assert should_apply
      assert evaluate(scale()) == 1000


@pytest.mark.parametrize("mode", MODES)
def test_fixed_serialization(mode):
  with harness.mode_context(mode) as evaluate:
    config = loss_scale_module.get(123).get_config()
    restored = _exp().FixedLossScale.from_config(config)
    assert evaluate(restored()) == 123.


def _assert_float32_scalar(evaluate, tensor, value):
  """TF 2.4 returned the scale as a float32 scalar tensor, in both modes."""
  assert isinstance(tensor, tf.Tensor)
  assert tensor.dtype == tf.float32
  assert tensor.shape.rank == 0
  evaluate.init()
  result = evaluate(tensor)
  assert result.dtype == np.float32 and result == value


@pytest.mark.parametrize("mode", MODES)
def test_fixed_call_returns_tensor(mode):
  with harness.mode_context(mode) as evaluate:
    _assert_float32_scalar(evaluate, _exp().FixedLossScale(123)(), 123.)


# --- DynamicLossScale ---------------------------------------------------------


def _step_gradient(is_finite):
  """1 if the step is finite, else NaN; under a strategy, NaN on replica 0."""
  grad = tf.where(is_finite, tf.constant(1.), tf.constant(float("nan")))
  if not tf.distribute.has_strategy():
    return grad

  def per_replica():
    replica = tf.distribute.get_replica_context().replica_id_in_sync_group
    return tf.where(tf.equal(replica, 0), grad, tf.constant(1.))

  return tf.distribute.get_strategy().extended.call_for_each_replica(
      per_replica)


def _replay(evaluate, inputs, initial_loss_scale=1., increment_period=2,
            multiplier=2):
  """Feeds one gradient per input (finite or not) and records the scale."""
  scale = _exp().DynamicLossScale(
      initial_loss_scale=initial_loss_scale,
      increment_period=increment_period, multiplier=multiplier)
  dataset = tf.data.Dataset.from_tensor_slices(inputs)
  iterator = tf.compat.v1.data.make_one_shot_iterator(dataset)

  def step():
    is_finite = iterator.get_next()
    update_op, should_apply = scale.update([_step_gradient(is_finite)])
    check = tf.debugging.assert_equal(should_apply, is_finite)
    if not evaluate.graph_mode:
      return None
    with tf.control_dependencies([check]):
      return tf.identity(update_op)

  outputs = []
  if evaluate.graph_mode:
    op = step()
    evaluate.init()
  for _ in inputs:
    if evaluate.graph_mode:
      evaluate(op)
    else:
      step()
    outputs.append(evaluate(scale()))
  return outputs


def _replay_in(mode, strategy_name, inputs, expected, *args, **kwargs):
  with harness.mode_context(mode) as evaluate:
    with harness.make_strategy(strategy_name).scope():
      assert _replay(evaluate, inputs, *args, **kwargs) == expected


@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("mode", MODES)
def test_increase(mode, strategy):
  _replay_in(mode, strategy, [True] * 6, [1, 2, 2, 4, 4, 8])


@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("mode", MODES)
def test_keep_increasing_until_capped(mode, strategy):
  biggest = np.finfo(np.float32).max
  start = biggest / 4
  # The second doubling overflows float32 and is capped at its maximum.
  _replay_in(mode, strategy, [True] * 6,
             [start, start * 2, start * 2, biggest, biggest, biggest], start)


@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("mode", MODES)
def test_decrease_every_step(mode, strategy):
  # TF's original built the strategy but replayed outside its scope.
  with harness.mode_context(mode) as evaluate:
    harness.make_strategy(strategy)
    assert _replay(evaluate, [False] * 6, 1024) == [512, 256, 128, 64, 32, 16]


@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("mode", MODES)
def test_keep_decreasing_until_one(mode, strategy):
  _replay_in(mode, strategy, [False] * 6, [8, 4, 2, 1, 1, 1], 16)


@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("mode", MODES)
def test_nan_clears_good_steps(mode, strategy):
  _replay_in(mode, strategy, [True, True, True, False, True], [1, 2, 2, 1, 1])


@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("mode", MODES)
def test_update_triggered_every_step(mode, strategy):
  _replay_in(mode, strategy, [True, True, True, False, True, True],
             [2, 4, 8, 4, 8, 16], 1, 1)


@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("mode", MODES)
def test_alternating_finite_and_not_with_period_one(mode, strategy):
  _replay_in(mode, strategy, [True, False] * 4 + [True],
             [2, 1, 2, 1, 2, 1, 2, 1, 2], 1, 1)


@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("mode", MODES)
def test_alternating_finite_and_not_with_period_two(mode, strategy):
  _replay_in(mode, strategy, [True, False] * 3 + [True],
             [32, 16, 16, 8, 8, 4, 4], 32, 2)


@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("mode", MODES)
def test_multiplier_other_than_two(mode, strategy):
  _replay_in(mode, strategy, [True, True, False, True, True], [4, 12, 4, 4, 12],
             4, multiplier=3)


@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("mode", MODES)
def test_mixed_finite_and_not(mode, strategy):
  inputs = [False, True, True, True, False, True, False, True, True, True,
            False]
  _replay_in(mode, strategy, inputs, [2, 2, 4, 4, 2, 2, 1, 1, 2, 2, 1], 4)


@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("mode", MODES)
def test_single_tensor_gradient(mode, strategy):
  with harness.mode_context(mode) as evaluate:
    with harness.make_strategy(strategy).scope():
      scale = _exp().DynamicLossScale()
      _, should_apply = scale.update(tf.constant(4.))
      evaluate.init()
      assert evaluate(should_apply)


@pytest.mark.parametrize("mode", MODES)
def test_dynamic_serialization(mode):
  with harness.mode_context(mode) as evaluate:
    scale = _exp().DynamicLossScale(
        initial_loss_scale=1, increment_period=2, multiplier=3)
    restored = _exp().DynamicLossScale.from_config(scale.get_config())
    evaluate.init()
    assert evaluate(restored()) == 1
    assert restored.increment_period == 2
    assert restored.multiplier == 3


@pytest.mark.parametrize("mode", MODES)
def test_update_with_none_gradients(mode):
  with harness.mode_context(mode) as evaluate:
    scale = _exp().DynamicLossScale()
    update_op, should_apply = scale.update([None])
    # TF 2.4 only built the update; running it must work too.
    evaluate.init()
    if evaluate.graph_mode:
      evaluate(update_op)
    assert evaluate(should_apply)
    assert evaluate(scale()) == 2.**15


@pytest.mark.parametrize("mode", MODES)
def test_get_dynamic(mode):
  with harness.mode_context(mode):
    got = loss_scale_module.get("dynamic")
    default = _exp().DynamicLossScale()
    assert got.initial_loss_scale == default.initial_loss_scale
    assert got.increment_period == default.increment_period
    assert got.multiplier == default.multiplier


@pytest.mark.parametrize("mode", MODES)
def test_dynamic_call_returns_tensor(mode):
  with harness.mode_context(mode) as evaluate:
    _assert_float32_scalar(evaluate, _exp().DynamicLossScale()(), 2.**15)
