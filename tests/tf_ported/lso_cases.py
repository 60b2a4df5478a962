"""Case bodies of TF 2.4's Keras LossScaleOptimizer tests, for both kinds.

test_keras_loss_scale_optimizer_tf24.py (Keras 3 optimizers) and
test_keras_loss_scale_optimizer_legacy_kind.py (tf_keras's OptimizerV2) run
the same cases of TF 2.4's loss_scale_optimizer_test.py; each keeps its own
test ids, modes and skip reasons, and calls the body here with its `sgd`
(a factory of the inner SGD) and a `harness.Runner`. Inputs, expected values
and assertions are the original's.
"""

import os

import numpy as np
import pytest
import tensorflow as tf

from tests.tf_ported import harness

SGD_CONFIG_TF23 = {
    "class_name": "SGD",
    "config": {"learning_rate": 2.0, "momentum": 0.5, "decay": 0.0,
               "nesterov": False, "name": "SGD"},
}


def lso(*args, **kwargs):
  """The `tf.keras.mixed_precision.LossScaleOptimizer` install() provides."""
  return tf.keras.mixed_precision.LossScaleOptimizer(*args, **kwargs)


_lso = lso


def fixed_loss_scale_applied_to_loss_with_minimize(runner, sgd):
  strategy = runner.strategy
  var = tf.Variable([5.0])
  loss_scale = 10.
  opt = _lso(sgd(2.0), dynamic=False, initial_scale=loss_scale)
  assert runner.value(opt.loss_scale) == loss_scale
  runner.run(harness.minimize_with_grad_check(
      strategy, var, opt, loss_scale / strategy.num_replicas_in_sync))
  # d(var)/d(var) is 1, so var becomes 5 - 1 * 2.
  np.testing.assert_allclose(runner.value(var), [3.])
  return opt


def dynamic_loss_scale(runner, sgd):
  strategy = runner.strategy
  learning_rate = 2.
  expected_grad = tf.Variable(learning_rate / strategy.num_replicas_in_sync)
  var = tf.Variable([5.0])
  opt = _lso(sgd(learning_rate), initial_scale=2, dynamic_growth_steps=1)
  step = runner.step(harness.minimize_with_grad_check(strategy, var, opt,
                                                      expected_grad))
  step()
  # d(var)/d(var) is 1, so var becomes 5 - 1 * 2.
  np.testing.assert_allclose(runner.value(var), [3.])
  # The loss scale doubled, and so does the scaled gradient.
  runner.value(expected_grad.assign(2 * learning_rate /
                                    strategy.num_replicas_in_sync))
  step()
  np.testing.assert_allclose(runner.value(var), [1.])
  return opt


def clipping(runner, sgd, clip_type):
  strategy = runner.strategy
  learning_rate = 2.
  var = tf.Variable([5.0])
  opt = _lso(sgd(learning_rate, **{clip_type: 2.0}), initial_scale=2,
             dynamic_growth_steps=1)
  assert getattr(opt, clip_type) == 2.0
  loss = lambda: var * 4 / strategy.num_replicas_in_sync
  run_fn = lambda: opt.minimize(loss, var_list=[var])
  step = runner.step(run_fn)
  step()
  # The gradient 4 is clipped to 2: 5 - 2 * 2.
  np.testing.assert_allclose(runner.value(var), [1.])
  assert runner.value(opt.loss_scale) == 4

  # Clipping is read when the step is built, as in TF 2.4.
  setattr(opt, clip_type, 3.0)
  step = runner.step(run_fn)
  step()
  # Now clipped to 3: 1 - 3 * 2.
  np.testing.assert_allclose(runner.value(var), [-5.])
  assert runner.value(opt.loss_scale) == 8

  # Infinite gradients are skipped, not clipped.
  loss = lambda: var * float("inf")
  runner.run(lambda: opt.minimize(loss, var_list=[var]))
  np.testing.assert_allclose(runner.value(var), [-5.])
  assert runner.value(opt.loss_scale) == 4
  return opt


def dynamic_update(runner, sgd):
  strategy = runner.strategy
  var = tf.Variable([1.0, 2.0])
  opt = _lso(sgd(1.0), initial_scale=2, dynamic_growth_steps=1)

  # Finite gradients: 2 is subtracted, and the scale doubles.
  loss = lambda: var * 2.0 / strategy.num_replicas_in_sync
  runner.run(lambda: opt.minimize(loss, var_list=[var]))
  np.testing.assert_allclose(runner.value(var), [-1.0, 0.0])
  assert runner.value(opt.loss_scale) == 4.

  # NaN gradients: nothing applied, and the scale halves.
  loss = lambda: var * float("nan")
  runner.run(lambda: opt.minimize(loss, var_list=[var]))
  np.testing.assert_allclose(runner.value(var), [-1.0, 0.0])
  assert runner.value(opt.loss_scale) == 2.


def dynamic_loss_scale_with_float16_loss(runner, sgd):
  strategy = runner.strategy
  var = tf.Variable([5.0])
  opt = _lso(sgd(2.), initial_scale=2, dynamic_growth_steps=1)
  loss = lambda: tf.cast(var / strategy.num_replicas_in_sync, "float16")
  runner.run(lambda: opt.minimize(loss, var_list=[var]))
  np.testing.assert_allclose(runner.value(var), [3.])


def nan_on_one_replica_only(runner, sgd):
  """`runner` must be under the MirroredStrategy over 2 logical CPUs."""
  var = tf.Variable([1.0, 2.0])
  opt = _lso(sgd(1.0), initial_scale=2, dynamic_growth_steps=2)

  def loss():
    replica = tf.distribute.get_replica_context().replica_id_in_sync_group
    # The last replica's last gradient element is NaN.
    return tf.cond(
        tf.equal(replica, 0), lambda: var * 2.,
        lambda: var * tf.constant([1., float("nan")]))

  runner.run(lambda: opt.minimize(loss, var_list=[var]))
  np.testing.assert_allclose(runner.value(var), [1.0, 2.0])
  assert runner.value(opt.loss_scale) == 1.


def dynamic_loss_scale_with_slots(runner, sgd):
  strategy = runner.strategy
  var = tf.Variable([1.0, 2.0])
  # SGD with momentum has a slot.
  initial_scale = 2.
  opt = _lso(sgd(1.0, momentum=1.), initial_scale=initial_scale,
             dynamic_growth_steps=1)
  loss = lambda: var / strategy.num_replicas_in_sync
  step = runner.step(lambda: opt.minimize(loss, var_list=[var]))
  step()
  # Accumulator 0 + gradient 1 = 1 is subtracted.
  np.testing.assert_allclose(runner.value(var), [0.0, 1.0])
  assert runner.value(opt.loss_scale) == initial_scale * 2
  step()
  # Accumulator 1 + gradient 1 = 2 is subtracted.
  np.testing.assert_allclose(runner.value(var), [-2., -1.])
  assert runner.value(opt.loss_scale) == initial_scale * 4
  assert opt.get_slot_names() == ["momentum"]


def iterations(sgd):
  opt = sgd(2.0)
  lso = _lso(opt, dynamic=False, initial_scale=10.)
  lso.iterations = 7
  assert lso.iterations == 7
  assert opt.iterations == 7


def iterations_incremented(runner, sgd):
  strategy = runner.strategy
  opt = _lso(sgd(1.0))
  var = tf.Variable([5.0])
  loss = lambda: var * 2.0 / strategy.num_replicas_in_sync
  runner.run(lambda: opt.minimize(loss, [var]))
  assert runner.value(var) == 3.0  # 5 - 2
  assert runner.value(opt.iterations) == 1

  # Also incremented when NaN gradients skip the update.
  loss = lambda: var * float("nan")
  runner.run(lambda: opt.minimize(loss, [var]))
  assert runner.value(var) == 3.0
  assert runner.value(opt.iterations) == 2


def _value(x):
  return x.numpy() if hasattr(x, "numpy") else x


def _train(strategy, opt, var):
  loss = lambda: var / strategy.num_replicas_in_sync + 1.
  if hasattr(opt, "minimize"):
    strategy.run(lambda: opt.minimize(loss, var_list=[var]))
    return

  def step():  # Keras 3's own optimizers have no minimize.
    with tf.GradientTape() as tape:
      value = loss()
    opt.apply_gradients([(tape.gradient(value, var), var)])

  strategy.run(step)


def _momentum(opt, var):
  if hasattr(opt, "get_slot"):
    return opt.get_slot(var, "momentum")
  # Keras 3's own optimizers have no get_slot.
  return opt.momentums[opt._get_variable_index(var)]


def checkpoint(strategy, sgd_with_extra_variable, save_with_ls,
               restore_with_ls, tmp_path):
  """Saves with or without a LossScaleOptimizer, restores, trains on.

  Args:
    strategy: The strategy to run under (eagerly).
    sgd_with_extra_variable: An SGD class that tracks a `my_var` variable.
    save_with_ls: Whether the saved optimizer is wrapped.
    restore_with_ls: Whether the restoring optimizer is wrapped.
    tmp_path: Where the checkpoint goes.
  """

  def build(with_ls):
    inner = sgd_with_extra_variable(1., momentum=1.)
    opt = inner
    if with_ls:
      opt = _lso(inner, initial_scale=1., dynamic_growth_steps=2.)
    return inner, opt

  with strategy.scope():
    var = tf.Variable([2.0])
    inner_opt, opt = build(save_with_ls)
    _train(strategy, opt, var)
    assert var.numpy() == 1.
    if save_with_ls:
      assert _value(opt.loss_scale) == 1.
      assert _value(opt.dynamic_counter) == 1
    slot = _momentum(opt, var)
    assert _value(slot).item() == -1
    assert _value(opt.iterations) == 1
    # Any optimizer attribute is saved and restored.
    inner_opt.my_var.assign(1.)

    ckpt = tf.train.Checkpoint(optimizer=opt, var=var)
    save_path = ckpt.save(os.path.join(tmp_path, "ckpt"))

    var = tf.Variable([2.0])
    inner_opt, opt = build(restore_with_ls)
    ckpt = tf.train.Checkpoint(optimizer=opt, var=var)
    status = ckpt.restore(save_path)
    if save_with_ls:
      status.assert_existing_objects_matched()
    else:
      status.assert_nontrivial_match()

    assert var.numpy() == 1.
    if save_with_ls and restore_with_ls:
      assert _value(opt.loss_scale) == 1.
      assert _value(opt.dynamic_counter) == 1
    elif restore_with_ls:
      assert _value(opt.loss_scale) == 1.
      assert _value(opt.dynamic_counter) == 0
    assert _value(opt.iterations) == 1

    _train(strategy, opt, var)
    assert var.numpy() == -1
    slot = _momentum(opt, var)
    assert _value(slot).item() == -2
    assert _value(opt.iterations) == 2
    assert _value(inner_opt.my_var) == 1

    # Restoring again, now that the slots exist.
    status = ckpt.restore(save_path)
    if save_with_ls and restore_with_ls:
      status.assert_consumed()
    elif save_with_ls:
      status.assert_existing_objects_matched()
    else:
      status.assert_nontrivial_match()
    assert var.numpy() == 1
    assert _value(slot).item() == -1


def fixed_loss_scale_applied_to_loss_with_get_gradients(sgd):
  with tf.Graph().as_default(), tf.compat.v1.Session() as sess:
    var = tf.Variable([2.0])
    loss_scale = 10.
    opt = _lso(sgd(1.0), dynamic=False, initial_scale=loss_scale)
    loss = harness.identity_with_grad_check(loss_scale)(var)
    grads = opt.get_gradients(loss, [var])
    sess.run(tf.compat.v1.global_variables_initializer())
    # Runs the gradient check's assertion.
    sess.run(grads)


def nan_gradient_aggregator(grads_and_vars):
  """As if one replica's gradient were NaN: the last gradient becomes NaN."""
  grads_and_vars = list(grads_and_vars)
  grad, var = grads_and_vars[-1]
  grads_and_vars[-1] = (grad * float("nan"), var)
  return grads_and_vars


def arbitrary_attributes_not_exposed(lso, opt):
  """`lso` wraps `opt`, an SGD without nesterov."""
  assert not opt.nesterov
  with pytest.raises(
      AttributeError,
      match="'LossScaleOptimizer' object has no attribute 'nesterov'"):
    _ = lso.nesterov
  lso.nesterov = True
  assert lso.nesterov
  assert not opt.nesterov


def unsupported_strategy(sgd, expected):
  """Wrapping and stepping under a CentralStorageStrategy raise `expected`."""
  strategy = tf.distribute.experimental.CentralStorageStrategy()
  with strategy.scope(), pytest.raises(ValueError, match=expected):
    _lso(sgd())
  opt = _lso(sgd())
  with strategy.scope():
    var = tf.Variable(1.0)
    with pytest.raises(ValueError, match=expected):
      strategy.run(lambda: opt.minimize(lambda: var * 2.0, [var]))


def hyperparameter_named_like_an_attribute(sgd_cls):
  """An inner hyperparameter named `loss_scale` is not reached by setting it."""

  class MyOpt(sgd_cls):

    def __init__(self):
      super().__init__()
      self._set_hyper("loss_scale", 123.)

  wrapped = _lso(MyOpt())
  with pytest.raises(AttributeError):
    wrapped.loss_scale = 2.
