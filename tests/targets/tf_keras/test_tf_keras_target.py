"""The TF 2.3/2.4 mixed-precision API on `tf.keras` = tf_keras."""

import numpy as np
import pytest
import tensorflow as tf
import tf_keras

import tf_mixed_precision_compat as mp
from tf_mixed_precision_compat import tf_keras_classes
from tf_mixed_precision_compat import keras_target

FAMILIES = {
    "current": lambda lr: tf.keras.optimizers.SGD(lr),
    "legacy": lambda lr: tf.keras.optimizers.legacy.SGD(lr),
}


pytestmark = pytest.mark.usefixtures("installed_then_float32")


def _dynamic_v1(family, lr=1.0):
  loss_scale = tf.mixed_precision.experimental.DynamicLossScale(
      initial_loss_scale=8, increment_period=2)
  return tf.keras.mixed_precision.experimental.LossScaleOptimizer(
      FAMILIES[family](lr), loss_scale)


def _step(opt, var, poison):
  with tf.GradientTape() as tape:
    loss = opt.get_scaled_loss(var * poison)
  grads = opt.get_unscaled_gradients(tape.gradient(loss, [var]))
  opt.apply_gradients(zip(grads, [var]))


# Poison 1: finite gradient 1; inf: the step is skipped, the scale halves.
POISONS = [1.0, 1.0, 1.0, np.inf, 1.0]
# (scale, counter, var) after each step, from TF 2.4's rules: growth every 2
# finite steps, halving and reset on a non-finite step, which applies nothing.
EXPECTED = [(8.0, 1, 9.0), (16.0, 0, 8.0), (16.0, 1, 7.0), (8.0, 0, 7.0),
            (8.0, 1, 6.0)]


def test_target_is_tf_keras():
  assert keras_target.active() == keras_target.TF_KERAS
  assert tf.keras.mixed_precision.experimental.Policy is (
      tf_keras_classes.PolicyV1)
  # Keras 3 is left alone on this target.
  import keras  # pylint: disable=g-import-not-at-top
  assert not hasattr(keras.mixed_precision, "experimental")


@pytest.mark.parametrize("family", sorted(FAMILIES))
@pytest.mark.parametrize("mode", ["eager", "function", "jit"])
def test_v1_dynamic_trajectory(family, mode):
  var = tf.Variable(10.0)
  opt = _dynamic_v1(family)
  assert isinstance(opt, tf.keras.mixed_precision.LossScaleOptimizer)
  assert isinstance(opt, tf.keras.mixed_precision.experimental.
                    LossScaleOptimizer)
  step = _step
  if mode != "eager":
    step = tf.function(_step, jit_compile=(mode == "jit"))
  got = []
  for poison in POISONS:
    step(opt, var, tf.constant(poison))
    got.append((float(opt.loss_scale), int(opt.dynamic_counter),
                float(var.numpy())))
  assert got == EXPECTED
  assert int(opt.iterations) == 5  # TF 2.4 counts skipped steps too.


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_v1_mirrored(family, mirrored_strategy):
  with mirrored_strategy.scope():
    var = tf.Variable(10.0)
    opt = _dynamic_v1(family)

  @tf.function
  def train(poison):
    mirrored_strategy.run(_step, args=(opt, var, poison))

  got = []
  for poison in POISONS:
    train(tf.constant(poison))
    got.append((float(opt.loss_scale), int(opt.dynamic_counter.numpy())))
  assert got == [e[:2] for e in EXPECTED]
  # Two replicas' gradients of 1 are summed: each applied step moves by 2.
  assert var.numpy() == 2.0


@pytest.mark.parametrize("loss_scale,dynamic,scale", [
    ("dynamic", True, 2.0**15), (128, False, 128.0), (4.0, False, 4.0)])
def test_v1_loss_scale_arguments(loss_scale, dynamic, scale, tf_log):
  opt = tf.keras.mixed_precision.experimental.LossScaleOptimizer(
      tf.keras.optimizers.Adam(), loss_scale)
  assert opt.dynamic is dynamic
  assert float(opt.loss_scale) == scale
  assert any("experimental.LossScaleOptimizer is deprecated" in m
             for m in tf_log)


def test_v1_rejects_bad_loss_scales():
  lso = tf.keras.mixed_precision.experimental.LossScaleOptimizer
  # TF 2.3.4 took any multiplier (TF 2.4 refused it): the experimental class
  # follows TF 2.3 (tests/targets/tf_keras/test_tf_keras_v1_tf23.py).
  assert lso(tf.keras.optimizers.SGD(),
             tf.mixed_precision.experimental.DynamicLossScale(
                 multiplier=3)).loss_scale.multiplier == 3
  with pytest.raises(ValueError, match="Invalid value passed to loss_scale"):
    lso(tf.keras.optimizers.SGD(), "nonsense")
  with pytest.raises(TypeError, match="inner_optimizer"):
    lso("sgd", "dynamic")


def test_v1_config_round_trip():
  opt = _dynamic_v1("legacy", lr=0.5)
  config = tf.keras.optimizers.serialize(opt)
  assert config["class_name"] == "LossScaleOptimizerV1"
  restored = tf.keras.mixed_precision.experimental.LossScaleOptimizer.\
      from_config(config["config"])
  assert float(restored.loss_scale) == 8.0
  assert restored.dynamic_growth_steps == 2
  assert restored.inner_optimizer.learning_rate == 0.5
  tf23 = {"optimizer": {"class_name": "SGD", "config": {
      "name": "SGD", "learning_rate": 0.25}},
          "loss_scale": {"class_name": "FixedLossScale", "config": {
              "loss_scale_value": 64.0}}}
  restored = tf.keras.mixed_precision.experimental.LossScaleOptimizer.\
      from_config(tf23)
  assert not restored.dynamic and float(restored.loss_scale) == 64.0


def test_policy_v1_as_layer_dtype():
  policy = tf.keras.mixed_precision.experimental.Policy(
      "mixed_float16", loss_scale=128)
  assert isinstance(policy, tf_keras.mixed_precision.Policy)
  assert repr(policy.loss_scale) == "FixedLossScale(128.0)"
  layer = tf.keras.layers.Dense(2, dtype=policy)
  assert layer(tf.ones((1, 3))).dtype == tf.float16
  assert layer.kernel.dtype == tf.float32
  assert tf.keras.mixed_precision.experimental.get_layer_policy(
      layer) is policy
  with pytest.raises(ValueError, match="only be called on a layer"):
    tf.keras.mixed_precision.experimental.get_layer_policy(policy)
  assert tf.keras.mixed_precision.experimental.Policy(
      "float32").loss_scale is None


def _compiled(optimizer):
  model = tf.keras.Sequential([tf.keras.layers.Dense(1, input_shape=(2,))])
  model.compile(optimizer=optimizer, loss="mse")
  return model


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_compile_wraps_by_policy_v1_loss_scale(family):
  experimental = tf.keras.mixed_precision.experimental
  experimental.set_policy(experimental.Policy("mixed_float16",
                                              loss_scale=256))
  model = _compiled(FAMILIES[family](0.1))
  assert isinstance(model.optimizer, experimental.LossScaleOptimizer)
  assert not model.optimizer.dynamic
  assert float(model.optimizer.loss_scale) == 256.0
  model.fit(np.ones((4, 2)), np.ones((4, 1)), batch_size=2, epochs=2,
            verbose=0)
  assert int(model.optimizer.iterations) == 4
  experimental.set_policy(experimental.Policy("mixed_float16",
                                              loss_scale=None))
  assert not isinstance(_compiled(FAMILIES[family](0.1)).optimizer,
                        tf.keras.mixed_precision.LossScaleOptimizer)
  # A plain policy name: dynamic scaling, as TF 2.4.
  experimental.set_policy("mixed_float16")
  assert _compiled("sgd").optimizer.dynamic
  assert tf.keras.mixed_precision.global_policy().name == "mixed_float16"


def test_fit_dynamic_skips_non_finite_steps():
  tf.keras.mixed_precision.set_global_policy("mixed_float16")
  model = tf.keras.Sequential([tf.keras.layers.Dense(1, input_shape=(2,))])
  model.compile(optimizer=tf.keras.mixed_precision.experimental.
                LossScaleOptimizer(tf.keras.optimizers.legacy.SGD(0.01),
                                   "dynamic"), loss="mse")
  x = np.ones((4, 2), np.float32)
  y = np.array([[1.0], [np.nan], [1.0], [1.0]], np.float32)
  model.fit(x, y, batch_size=1, epochs=1, verbose=0, shuffle=False)
  # Halved twice: the first step's float16 output gradient (2**15 * 2)
  # overflows, the NaN label's step is non-finite; both are counted.
  assert float(model.optimizer.loss_scale) == 2.0**13
  assert int(model.optimizer.iterations) == 4


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_tf1_graph_session_minimize_applies(family):
  with tf.Graph().as_default(), tf.compat.v1.Session() as sess:
    var = tf.compat.v1.Variable(10.0, use_resource=True)
    opt = _dynamic_v1(family)
    train = opt.minimize(lambda: var * 1.0, var_list=[var])
    sess.run(tf.compat.v1.global_variables_initializer())
    for _ in range(3):
      sess.run(train)
    assert sess.run(var) == 7.0
    assert sess.run(opt.loss_scale) == 16.0


def test_tf1_loss_scales_graph_rewrite_and_v1_optimizer():
  assert tf.mixed_precision.experimental.FixedLossScale(2.0)() == 2.0
  opt = tf.compat.v1.train.experimental.enable_mixed_precision_graph_rewrite(
      tf.keras.optimizers.legacy.SGD(1.0), loss_scale=64)
  try:
    assert isinstance(opt,
                      tf.keras.mixed_precision.experimental.LossScaleOptimizer)
    assert float(opt.loss_scale) == 64.0
  finally:
    tf.compat.v1.train.experimental.disable_mixed_precision_graph_rewrite()
  v1 = tf.compat.v1.train.experimental.MixedPrecisionLossScaleOptimizer(
      tf.compat.v1.train.GradientDescentOptimizer(1.0), loss_scale=8)
  var = tf.Variable(3.0)
  v1.minimize(lambda: var * 1.0, var_list=[var])
  assert var.numpy() == 2.0


def _lso(experimental, family):
  if experimental:
    return _dynamic_v1(family)
  return tf.keras.mixed_precision.LossScaleOptimizer(
      FAMILIES[family](1.0), initial_scale=8.0)


@pytest.mark.parametrize("experimental", [False, True])
@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_get_gradients_in_a_function(family, experimental):
  # TF 2.4: the scaled loss's gradients (tf.gradients), unscaled.
  opt = _lso(experimental, family)
  var = tf.Variable([1.0, -2.0])

  @tf.function
  def grads():
    loss = tf.reduce_sum(var * var) * 3.0
    scaled = tf.gradients(opt.get_scaled_loss(loss), [var])[0]
    return opt.get_gradients(loss, [var])[0], scaled

  grad, scaled = grads()
  np.testing.assert_array_equal(grad.numpy(), [6.0, -12.0])
  np.testing.assert_array_equal(scaled.numpy(), [48.0, -96.0])
  with pytest.raises(ValueError, match="has `None` for gradient"):
    tf.function(lambda: opt.get_gradients(tf.constant(1.0), [var]))()


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_get_gradients_in_a_session(family):
  with tf.Graph().as_default(), tf.compat.v1.Session() as sess:
    var = tf.compat.v1.Variable([2.0], use_resource=True)
    opt = _lso(True, family)
    grads = opt.get_gradients(var * var, [var])
    sess.run(tf.compat.v1.global_variables_initializer())
    np.testing.assert_array_equal(sess.run(grads)[0], [4.0])


def test_uninstall_removes_the_target_grafts():
  mp.uninstall()
  assert not hasattr(tf.keras.mixed_precision, "experimental")
  lso_v3 = type(tf.keras.mixed_precision.LossScaleOptimizer(
      tf.keras.optimizers.SGD()))
  assert not hasattr(lso_v3, "get_gradients")
  assert tf_keras.Model._get_optimizer.__name__ == "_get_optimizer"  # noqa: SLF001
  assert "PolicyV1" not in tf_keras.utils.get_custom_objects()
  mp.install()


@pytest.mark.parametrize("experimental", [False, True])
def test_session_gets_the_optimizer_v2_counterpart(experimental, tf_log):
  with tf.Graph().as_default(), tf.compat.v1.Session() as sess:
    var = tf.compat.v1.Variable(10.0, use_resource=True)
    inner = tf.keras.optimizers.SGD(0.5, momentum=0.25)
    if experimental:
      opt = tf.keras.mixed_precision.experimental.LossScaleOptimizer(
          inner, "dynamic")
    else:
      opt = tf.keras.mixed_precision.LossScaleOptimizer(inner)
    assert isinstance(opt.inner_optimizer,
                      tf.keras.optimizers.legacy.SGD)
    assert opt.inner_optimizer.get_config()["momentum"] == 0.25
    assert any("cannot run in a session" in m for m in tf_log)
    train = opt.minimize(lambda: var * 1.0, var_list=[var])
    sess.run(tf.compat.v1.global_variables_initializer())
    sess.run(train)
    assert sess.run(var) == 9.5


def test_non_experimental_class_is_tf_keras_own():
  opt = tf.keras.mixed_precision.LossScaleOptimizer(
      tf.keras.optimizers.Adam(), dynamic=False, initial_scale=4)
  assert isinstance(opt, tf_keras.mixed_precision.LossScaleOptimizer)
  assert isinstance(opt, tf.keras.mixed_precision.LossScaleOptimizer)
  wrapped_by_tf_keras = tf_keras.mixed_precision.LossScaleOptimizer(
      tf.keras.optimizers.legacy.Adam())
  assert isinstance(wrapped_by_tf_keras,
                    tf.keras.mixed_precision.LossScaleOptimizer)
  with pytest.raises(TypeError, match='"dynamic" argument'):
    tf.keras.mixed_precision.LossScaleOptimizer(
        tf.keras.optimizers.SGD(), "dynamic")
