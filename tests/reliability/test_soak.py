"""Soak: 5,000 training steps with periodic and bursty overflows.

A small two-layer model trains for 5,000 steps inside one `tf.function` (a
`tf.range` loop) with our Keras LossScaleOptimizer, and with our v1
MixedPrecisionLossScaleOptimizer. Overflows are injected (loss times inf)
on a fixed schedule: random single steps, a burst long enough to pin the
scale at its floor of 1, and a long overflow-free stretch in which it grows
again. Every step must leave finite weights; exactly the injected steps are
skipped (weights unchanged) and every other step changes the weights; the
loss scale and counter follow the reference model at every step, so they
stay within [1, float32 max].
"""

import keras
import numpy as np
import pytest
import tensorflow as tf

import tf_mixed_precision_compat as mp
from tests.loss_scale import reference_model

STEPS = 5000
INITIAL_SCALE = 2.**15
GROWTH_STEPS = 25


def _overflow_schedule():
  rng = np.random.RandomState(0)
  overflow = rng.uniform(size=STEPS) < 0.03
  overflow[2500:2530] = True  # 30 halvings from <= 2**20: reaches 1.
  overflow[3900:] = False  # 1,100 finite steps: 44 doublings.
  overflow[[0, 1, STEPS - 1]] = [True, False, True]
  return overflow


def _data():
  rng = np.random.RandomState(1)
  x = rng.uniform(-1, 1, (STEPS, 16, 8)).astype(np.float32)
  y = rng.uniform(-1, 1, (STEPS, 16, 1)).astype(np.float32)
  return tf.constant(x), tf.constant(y)


def _keras_setup():
  keras.utils.set_random_seed(3)
  model = keras.Sequential([
      keras.Input((8,)),
      keras.layers.Dense(16, activation="relu"),
      keras.layers.Dense(1),
  ])
  opt = mp.LossScaleOptimizer(
      keras.optimizers.SGD(0.01, momentum=0.9), initial_scale=INITIAL_SCALE,
      dynamic_growth_steps=GROWTH_STEPS)
  variables = model.trainable_variables
  opt.build(variables)

  def step(x, y, poison):
    with tf.GradientTape() as tape:
      loss = tf.reduce_mean(tf.square(model(x) - y)) * poison
      scaled = opt.get_scaled_loss(loss)
    grads = opt.get_unscaled_gradients(tape.gradient(scaled, variables))
    opt.apply_gradients(zip(grads, variables))

  return ([v.value if hasattr(v, "value") else v for v in variables], step,
          lambda: opt.loss_scale, lambda: opt.dynamic_counter.read_value())


def _v1_setup():
  rng = np.random.RandomState(3)
  w1 = tf.Variable(rng.normal(0, 0.3, (8, 16)).astype(np.float32))
  b1 = tf.Variable(tf.zeros([16]))
  w2 = tf.Variable(rng.normal(0, 0.3, (16, 1)).astype(np.float32))
  variables = [w1, b1, w2]
  loss_scale = mp.DynamicLossScale(INITIAL_SCALE, GROWTH_STEPS)
  opt = mp.MixedPrecisionLossScaleOptimizer(
      tf.compat.v1.train.MomentumOptimizer(0.01, 0.9), loss_scale)

  def step(x, y, poison):
    def loss():
      hidden = tf.nn.relu(tf.matmul(x, w1) + b1)
      return tf.reduce_mean(tf.square(tf.matmul(hidden, w2) - y)) * poison

    opt.minimize(loss, var_list=variables)

  return (variables, step, loss_scale,
          lambda: loss_scale._num_good_steps.read_value())  # pylint: disable=protected-access


@pytest.mark.parametrize("setup", [_keras_setup, _v1_setup],
                         ids=["keras", "v1"])
def test_soak_5000_steps_with_overflows(setup):
  variables, step, scale_fn, counter_fn = setup()
  xs, ys = _data()
  overflow = _overflow_schedule()
  poisons = tf.constant(np.where(overflow, np.inf, 1.).astype(np.float32))

  @tf.function
  def run():
    changed = tf.TensorArray(tf.bool, size=STEPS)
    finite = tf.TensorArray(tf.bool, size=STEPS)
    scales = tf.TensorArray(tf.float32, size=STEPS)
    counters = tf.TensorArray(tf.int64, size=STEPS)
    for i in tf.range(STEPS):
      before = [tf.identity(v) for v in variables]
      with tf.control_dependencies(before):
        step(xs[i], ys[i], poisons[i])
      after = [v.read_value() for v in variables]
      changed = changed.write(i, tf.reduce_any(
          [tf.reduce_any(a != b) for a, b in zip(after, before)]))
      finite = finite.write(i, tf.reduce_all(
          [tf.reduce_all(tf.math.is_finite(a)) for a in after]))
      scales = scales.write(i, scale_fn())
      counters = counters.write(i, counter_fn())
    return changed.stack(), finite.stack(), scales.stack(), counters.stack()

  changed, finite, scales, counters = [t.numpy() for t in run()]
  assert finite.all()
  np.testing.assert_array_equal(~changed, overflow)  # Exactly those skipped.
  ref = reference_model.ReferenceDynamicScale(
      scale=np.float32(INITIAL_SCALE), growth_steps=GROWTH_STEPS,
      multiplier=2.)
  expected = ref.run(~overflow)
  np.testing.assert_array_equal(scales, [e[1] for e in expected])
  np.testing.assert_array_equal(counters, [e[2] for e in expected])
  assert scales.min() == 1.  # The burst pinned it at the floor...
  assert np.isfinite(scales).all()
  assert scales.max() <= np.finfo(np.float32).max
  assert scales[3899] < scales[STEPS - 2] / 2**40  # ...then it grew back.
