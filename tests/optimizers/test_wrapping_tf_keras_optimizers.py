"""Our LossScaleOptimizer around legacy `tf_keras` (Keras 2) optimizers.

`tf_keras` is optional for users; the test command installs it (without its
dependencies, so the CPU wheel of TensorFlow stays the one installed).

The wrapped optimizer is compared with a bare twin of the same class given the
same unscaled gradients on applied steps. On a skipped step TF 2.4.4 still
advanced `iterations` (which moves Adam's bias correction), so the twin's
counter is advanced there too.
"""

import numpy as np
import pytest
import tensorflow as tf
import tf_keras

from tf_mixed_precision_compat.optimizers.loss_scale_optimizer import (
    LossScaleOptimizer)

MAKERS = {
    "sgd_momentum": lambda: tf_keras.optimizers.legacy.SGD(0.5, momentum=0.9),
    "adam": lambda: tf_keras.optimizers.legacy.Adam(0.1),
}
# Per step: is the gradient finite on every replica?
STEPS = [True, True, False, True, False, False, True, True]


def _slots(opt, var):
  return {name: opt.get_slot(var, name).numpy()
          for name in opt.get_slot_names()}


def _twin_run(make, grad_scale):
  var = tf.Variable([1., -2.])
  twin = make()
  for finite in STEPS:
    if finite:
      twin.apply_gradients([(tf.constant([1., 3.]) * grad_scale, var)])
    else:
      twin.iterations.assign_add(1)
  return var.numpy(), _slots(twin, var), int(twin.iterations.numpy())


@pytest.mark.parametrize("mode", ["eager", "function", "mirrored"])
@pytest.mark.parametrize("name", sorted(MAKERS))
def test_matches_bare_twin_and_skips_whole_steps(name, mode, mirrored_strategy):
  make = MAKERS[name]
  strategy = (mirrored_strategy if mode == "mirrored"
              else tf.distribute.get_strategy())
  with strategy.scope():
    var = tf.Variable([1., -2.])
    opt = LossScaleOptimizer(make(), initial_scale=64, dynamic_growth_steps=2)
  assert opt.inner_optimizer.__class__.__module__.startswith("tf_keras")

  def replica_step(finite):
    ctx = tf.distribute.get_replica_context()
    # Only the last replica overflows, so all replicas must agree to skip.
    bad = tf.logical_and(
        tf.logical_not(finite),
        tf.equal(ctx.replica_id_in_sync_group, ctx.num_replicas_in_sync - 1))
    grad = tf.where(bad, np.inf, 1.) * tf.constant([1., 3.])
    opt.apply_gradients([(grad, var)])

  def step(finite):
    strategy.run(replica_step, args=(finite,))

  if mode != "eager":
    step = tf.function(step)
  before_skip = None
  for finite in STEPS:
    if not finite:
      before_skip = (var.numpy().copy(), _slots(opt.inner_optimizer, var))
    step(tf.constant(finite))
    if not finite:
      np.testing.assert_array_equal(var.numpy(), before_skip[0])
      for slot, value in _slots(opt.inner_optimizer, var).items():
        np.testing.assert_array_equal(value, before_skip[1][slot])

  # Gradients are summed over replicas, as TF 2.4 did.
  expected_var, expected_slots, expected_iterations = _twin_run(
      make, grad_scale=float(strategy.num_replicas_in_sync))
  np.testing.assert_array_equal(var.numpy(), expected_var)
  for slot, value in _slots(opt.inner_optimizer, var).items():
    np.testing.assert_array_equal(value, expected_slots[slot])
  assert int(opt.iterations.numpy()) == expected_iterations == len(STEPS)
  # 64 -> 128 (2 good) -> 64 (skip) -> 64, 1 good -> 32 -> 16 -> 32 (2 good).
  assert float(opt.loss_scale.numpy()) == 32.
  assert int(opt.dynamic_counter.numpy()) == 0


def test_checkpoint_layout_is_the_inner_optimizers_plus_loss_scale(tmp_path):
  var = tf.Variable([1., 2.])
  opt = LossScaleOptimizer(MAKERS["adam"](), initial_scale=8)
  opt.apply_gradients([(tf.constant([1., 1.]), var)])
  prefix = tf.train.Checkpoint(optimizer=opt, var=var).write(
      str(tmp_path / "ckpt"))
  keys = {k for k, _ in tf.train.list_variables(prefix)}
  assert ("optimizer/loss_scale/current_loss_scale/.ATTRIBUTES/"
          "VARIABLE_VALUE") in keys
  assert "optimizer/loss_scale/good_steps/.ATTRIBUTES/VARIABLE_VALUE" in keys
  assert "optimizer/iter/.ATTRIBUTES/VARIABLE_VALUE" in keys
  assert any(".OPTIMIZER_SLOT/optimizer/m/" in k for k in keys)
  restored_var = tf.Variable([0., 0.])
  restored = LossScaleOptimizer(MAKERS["adam"](), initial_scale=1024)
  tf.train.Checkpoint(optimizer=restored, var=restored_var).read(prefix)
  restored.apply_gradients([(tf.constant([0., 0.]), restored_var)])
  assert float(restored.loss_scale.numpy()) == 8.
  assert int(restored.iterations.numpy()) == 2
