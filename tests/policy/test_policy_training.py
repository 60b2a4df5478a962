"""Training Keras 3 models under our policies, and the Model.compile hook."""

import importlib

from absl.testing import parameterized
import keras
import numpy as np
import pytest
import tensorflow as tf

from tf_mixed_precision_compat import _compile
from tf_mixed_precision_compat.optimizers.loss_scale_optimizer import (
    LossScaleOptimizer)
from tf_mixed_precision_compat import LossScaleOptimizerV1
from tf_mixed_precision_compat import loss_scale as loss_scale_module
from tf_mixed_precision_compat import policy as policy_module
from tf_mixed_precision_compat.policy import Policy
from tf_mixed_precision_compat.policy import PolicyV1

# The module (the package's `install` attribute is the function).
install_module = importlib.import_module("tf_mixed_precision_compat.install")


@pytest.fixture(autouse=True)
def _clean_state():
  previous = keras.config.dtype_policy()
  yield
  keras.config.set_dtype_policy(previous)
  install_module.disable_compile_integration()


@pytest.fixture
def integration():
  install_module.enable_compile_integration()
  yield
  install_module.disable_compile_integration()


def _data(n=8):
  rng = np.random.default_rng(0)
  # Small values: the float16 gradients of the scaled loss (2**15 times the
  # loss) stay finite, so every step is applied.
  x = (0.1 * rng.normal(size=(n, 3))).astype("float32")
  y = (0.01 * rng.normal(size=(n, 1))).astype("float32")
  return x, y


def _model():
  inputs = keras.Input((3,))
  h = keras.layers.Dense(4, activation="relu", name="hidden")(inputs)
  h = keras.layers.Dense(1, name="logits")(h)
  out = keras.layers.Activation("linear", dtype="float32", name="out")(h)
  return keras.Model(inputs, out)


def _fit_and_check(test, model, steps=2):
  x, y = _data(4 * steps)
  before = [w.numpy().copy() for w in model.trainable_weights]
  history = model.fit(x, y, batch_size=4, epochs=1, verbose=0)
  test.assertTrue(np.isfinite(history.history["loss"][0]))
  after = [w.numpy() for w in model.trainable_weights]
  test.assertTrue(all(not np.array_equal(a, b) for a, b in zip(before, after)))
  return history


class FitUnderPolicyTest(parameterized.TestCase):

  def test_fit_computes_in_float16_with_float32_variables(self):
    policy_module.set_global_policy("mixed_float16")
    model = _model()
    model.compile(optimizer=keras.optimizers.SGD(0.05), loss="mse")
    _fit_and_check(self, model)
    probe = keras.Model(model.input, [model.get_layer("hidden").output,
                                       model.get_layer("logits").output,
                                       model.output])
    hidden, logits, out = probe(_data()[0])
    self.assertEqual(hidden.dtype, tf.float16)
    self.assertEqual(logits.dtype, tf.float16)
    self.assertEqual(out.dtype, tf.float32)
    for w in model.weights:
      self.assertEqual(w.dtype, "float32")
    self.assertIsInstance(model.get_layer("hidden").dtype_policy, Policy)

  def test_without_integration_keras_wraps_its_own(self):
    # Documented: without enable_compile_integration() Keras 3 chooses.
    policy_module.set_global_policy("mixed_float16")
    model = _model()
    model.compile(optimizer=keras.optimizers.SGD(0.05), loss="mse")
    self.assertIsInstance(model.optimizer, keras.optimizers.LossScaleOptimizer)
    self.assertNotIsInstance(model.optimizer,
                             LossScaleOptimizer)
    self.assertFalse(install_module.compile_integration_enabled())


@pytest.mark.usefixtures("integration")
class CompileIntegrationTest(parameterized.TestCase):

  def test_mixed_float16_plain_optimizer_is_ours(self):
    policy_module.set_global_policy("mixed_float16")
    model = _model()
    sgd = keras.optimizers.SGD(0.05)
    model.compile(optimizer=sgd, loss="mse")
    opt = model.optimizer
    self.assertIs(type(opt), LossScaleOptimizer)
    self.assertIs(opt.inner_optimizer, sgd)  # One wrapper, not two.
    self.assertTrue(opt.dynamic)
    _fit_and_check(self, model)
    self.assertIs(model.optimizer, opt)
    self.assertEqual(float(opt.loss_scale), 2.0**15)
    self.assertEqual(int(opt.dynamic_counter), 2)
    self.assertEqual(int(sgd.iterations), 2)

  def test_string_optimizer(self):
    policy_module.set_global_policy("mixed_float16")
    model = _model()
    model.compile(optimizer="adam", loss="mse")
    self.assertIs(type(model.optimizer), LossScaleOptimizer)
    self.assertIsInstance(model.optimizer.inner_optimizer,
                          keras.optimizers.Adam)

  def test_keras_mixed_float16_policy_also_wrapped(self):
    keras.config.set_dtype_policy("mixed_float16")
    model = _model()
    model.compile(optimizer="sgd", loss="mse")
    self.assertIs(type(model.optimizer), LossScaleOptimizer)

  def test_already_wrapped_left_alone(self):
    policy_module.set_global_policy("mixed_float16")
    for opt in (LossScaleOptimizer(keras.optimizers.SGD()),
                keras.optimizers.LossScaleOptimizer(keras.optimizers.SGD())):
      model = _model()
      model.compile(optimizer=opt, loss="mse")
      self.assertIs(model.optimizer, opt)

  def test_policy_v1_loss_scale_used(self):
    policy_module.set_policy(PolicyV1("mixed_float16", loss_scale=128))
    model = _model()
    self.assertIsInstance(model.dtype_policy, PolicyV1)
    sgd = keras.optimizers.SGD(0.05)
    model.compile(optimizer=sgd, loss="mse")
    opt = model.optimizer
    self.assertIs(type(opt), LossScaleOptimizerV1)
    self.assertIs(opt.inner_optimizer, sgd)
    self.assertFalse(opt.dynamic)
    self.assertEqual(float(opt.loss_scale), 128.0)
    _fit_and_check(self, model)
    self.assertEqual(float(opt.loss_scale), 128.0)

  def test_policy_v1_dynamic_loss_scale_used(self):
    ls = loss_scale_module.DynamicLossScale(initial_loss_scale=64,
                                            increment_period=1)
    policy_module.set_policy(PolicyV1("mixed_float16", loss_scale=ls))
    model = _model()
    model.compile(optimizer=keras.optimizers.SGD(0.05), loss="mse")
    opt = model.optimizer
    self.assertIs(type(opt), LossScaleOptimizerV1)
    self.assertTrue(opt.dynamic)
    self.assertEqual(float(opt.loss_scale), 64.0)
    _fit_and_check(self, model)
    self.assertEqual(float(opt.loss_scale), 256.0)  # Doubled every step.

  def test_policy_v1_without_loss_scale_not_wrapped(self):
    policy_module.set_policy(PolicyV1("mixed_float16", loss_scale=None))
    model = _model()
    sgd = keras.optimizers.SGD(0.05)
    model.compile(optimizer=sgd, loss="mse")
    self.assertIs(model.optimizer, sgd)  # As TF 2.3: no loss scale, no wrap.

  def test_policy_v1_on_float32_model_with_loss_scale(self):
    policy_module.set_policy(PolicyV1("float32", loss_scale=4))
    model = _model()
    model.compile(optimizer="sgd", loss="mse")
    self.assertIs(type(model.optimizer), LossScaleOptimizerV1)

  def test_float32_not_wrapped(self):
    model = _model()
    sgd = keras.optimizers.SGD()
    model.compile(optimizer=sgd, loss="mse")
    self.assertIs(model.optimizer, sgd)

  def test_auto_scale_loss_false_respected(self):
    policy_module.set_global_policy("mixed_float16")
    model = _model()
    sgd = keras.optimizers.SGD()
    model.compile(optimizer=sgd, loss="mse", auto_scale_loss=False)
    self.assertIs(model.optimizer, sgd)

  def test_enable_disable(self):
    self.assertTrue(install_module.compile_integration_enabled())
    patched = keras.Model.compile
    install_module.enable_compile_integration()  # Idempotent.
    self.assertIs(keras.Model.compile, patched)
    owner = _compile.compile_owner()
    install_module.disable_compile_integration()
    self.assertFalse(install_module.compile_integration_enabled())
    self.assertNotIn("compile", vars(keras.Model))
    self.assertIsNot(keras.Model.compile, patched)
    self.assertIs(keras.Model.compile, vars(owner)["compile"])
    install_module.disable_compile_integration()  # No-op.
    install_module.enable_compile_integration()
    self.assertIs(vars(owner)["compile"], keras.Model.compile)
    self.assertNotIn("compile", vars(keras.Model))


def test_import_patches_nothing():
  # The autouse fixture disabled any integration; importing the package again
  # must not turn it on.
  import tf_mixed_precision_compat.policy  # noqa: F401  # pylint: disable=g-import-not-at-top,unused-import,reimported
  assert not install_module.compile_integration_enabled()
  assert "compile" not in vars(keras.Model)


@pytest.mark.usefixtures("integration")
def test_fit_under_mirrored_strategy(mirrored_strategy):
  with mirrored_strategy.scope():
    with policy_module.policy_scope("mixed_float16"):
      model = _model()
    sgd = keras.optimizers.SGD(0.05)
    model.compile(optimizer=sgd, loss="mse")
  opt = model.optimizer
  assert type(opt) is LossScaleOptimizer  # pylint: disable=unidiomatic-typecheck
  assert opt.inner_optimizer is sgd
  x, y = _data(8)
  before = [w.numpy().copy() for w in model.trainable_weights]
  history = model.fit(x, y, batch_size=4, epochs=1, verbose=0)
  assert np.isfinite(history.history["loss"][0])
  after = [w.numpy() for w in model.trainable_weights]
  assert all(not np.array_equal(a, b) for a, b in zip(before, after))
  assert int(sgd.iterations.numpy()) == 2
  assert int(opt.dynamic_counter.numpy()) == 2
  assert float(opt.loss_scale.numpy()) == 2.0**15
  for w in model.weights:
    assert w.dtype == "float32"
  hidden = keras.Model(model.input, model.get_layer("hidden").output)(x)
  assert hidden.dtype == tf.float16


def test_policy_v1_fit_under_mirrored_strategy(mirrored_strategy):
  install_module.enable_compile_integration()
  with mirrored_strategy.scope():
    with policy_module.policy_scope(PolicyV1("mixed_float16", loss_scale=32)):
      model = _model()
    model.compile(optimizer=keras.optimizers.SGD(0.05), loss="mse")
  assert type(model.optimizer) is LossScaleOptimizerV1  # pylint: disable=unidiomatic-typecheck
  x, y = _data(8)
  history = model.fit(x, y, batch_size=4, epochs=1, verbose=0)
  assert np.isfinite(history.history["loss"][0])
  assert float(model.optimizer.loss_scale.numpy()) == 32.0
