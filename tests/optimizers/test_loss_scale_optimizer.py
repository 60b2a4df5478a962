"""API tests of the TF 2.4 Keras LossScaleOptimizer and the experimental one."""

import json
import logging

import keras
import numpy as np
import pytest
import tensorflow as tf

from tests import testing
from tf_mixed_precision_compat import endpoints
from tf_mixed_precision_compat import loss_scale as loss_scale_module
from tf_mixed_precision_compat.optimizers.loss_scale_optimizer import (
    LossScaleOptimizer)
from tf_mixed_precision_compat import LossScaleOptimizerV1

INF = testing.INF
NAN = testing.NAN


def _fixture(name):
  with open(testing.fixture_path("keras_lso", name)) as f:
    return json.load(f)


def _counter(opt):
  return int(opt.dynamic_counter.numpy())


# ---------------------------------------------------------- construction --


class TestConstruction:

  def test_defaults(self):
    opt = LossScaleOptimizer(keras.optimizers.SGD())
    assert opt.dynamic is True
    assert opt.initial_scale == 2.**15
    assert opt.dynamic_growth_steps == 2000
    assert opt.loss_scale.dtype == tf.float32
    assert float(opt.loss_scale) == 2.**15
    assert opt.dynamic_counter.dtype == tf.int64 and _counter(opt) == 0
    assert isinstance(opt, keras.optimizers.LossScaleOptimizer)
    assert isinstance(opt, keras.optimizers.Optimizer)

  def test_fixed(self):
    opt = LossScaleOptimizer(keras.optimizers.SGD(), dynamic=False,
                             initial_scale=128)
    assert opt.dynamic is False
    assert opt.initial_scale == 128.
    assert opt.dynamic_counter is None and opt.dynamic_growth_steps is None
    assert opt.loss_scale.dtype == tf.float32
    assert float(opt.loss_scale) == 128.

  @pytest.mark.parametrize("inner", [None, "sgd", 3, tf.Variable(1.)])
  def test_inner_not_optimizer(self, inner):
    with pytest.raises(TypeError, match='"inner_optimizer" must be an '
                       "instance of"):
      LossScaleOptimizer(inner)

  def test_refuses_double_wrapping(self):
    ours = LossScaleOptimizer(keras.optimizers.SGD())
    with pytest.raises(ValueError, match="already a LossScaleOptimizer"):
      LossScaleOptimizer(ours)
    theirs = keras.optimizers.LossScaleOptimizer(keras.optimizers.SGD())
    with pytest.raises(ValueError, match="already a LossScaleOptimizer"):
      LossScaleOptimizer(theirs)

  def test_refuses_inner_loss_scale_factor(self):
    with pytest.raises(ValueError, match="loss_scale_factor"):
      LossScaleOptimizer(keras.optimizers.SGD(loss_scale_factor=8.))

  @pytest.mark.parametrize("dynamic", ["dynamic", 1, 1.0, None])
  def test_dynamic_not_bool(self, dynamic):
    with pytest.raises(TypeError, match='"dynamic" argument to '
                       r"LossScaleOptimizer.__init__ must be a bool, but got"):
      LossScaleOptimizer(keras.optimizers.SGD(), dynamic)

  def test_fixed_needs_initial_scale(self):
    with pytest.raises(ValueError, match='"initial_scale" must be specified '
                       'if "dynamic" is False'):
      LossScaleOptimizer(keras.optimizers.SGD(), dynamic=False)

  def test_fixed_refuses_growth_steps(self):
    with pytest.raises(ValueError, match='"dynamic_growth_steps" must be '
                       'None if "dynamic" is False, but got: 3'):
      LossScaleOptimizer(keras.optimizers.SGD(), dynamic=False,
                         initial_scale=2, dynamic_growth_steps=3)

  @pytest.mark.parametrize("dynamic", [True, False])
  @pytest.mark.parametrize("scale", [NAN, INF, 0.5, 0, -1, "8"])
  def test_bad_initial_scale(self, dynamic, scale):
    with pytest.raises(ValueError, match="initial_scale"):
      LossScaleOptimizer(keras.optimizers.SGD(), dynamic, initial_scale=scale)

  @pytest.mark.parametrize("steps", [0, -5, 1.5, INF])
  def test_bad_growth_steps(self, steps):
    with pytest.raises(ValueError, match="dynamic_growth_steps"):
      LossScaleOptimizer(keras.optimizers.SGD(), dynamic_growth_steps=steps)

  def test_unsupported_strategy(self):
    strategy = tf.distribute.experimental.CentralStorageStrategy()
    message = ("Loss scaling is not supported with the tf.distribute.Strategy:"
               " CentralStorageStrategy. Try using a different Strategy, e.g. "
               "a MirroredStrategy")
    with strategy.scope():
      with pytest.raises(ValueError, match=message):
        LossScaleOptimizer(keras.optimizers.SGD())
    opt = LossScaleOptimizer(keras.optimizers.SGD())
    var = tf.Variable(1.)
    with strategy.scope():
      with pytest.raises(ValueError, match=message):
        strategy.run(lambda: opt.apply_gradients([(tf.constant(1.), var)]))

  def test_tpu_strategy_message(self, monkeypatch):
    from tf_mixed_precision_compat.optimizers import _step  # pylint: disable=g-import-not-at-top
    fake = object.__new__(tf.distribute.TPUStrategy)
    monkeypatch.setattr(tf.distribute, "has_strategy", lambda: True)
    monkeypatch.setattr(tf.distribute, "get_strategy", lambda: fake)
    with pytest.raises(ValueError, match="Loss scaling is not supported with "
                       "TPUStrategy. Loss scaling is unnecessary with TPUs"):
      _step.raise_if_strategy_unsupported()

  def test_endpoints(self):
    assert endpoints.lookup(
        "v2", "keras.mixed_precision.LossScaleOptimizer").symbol is (
            LossScaleOptimizer)
    assert endpoints.lookup(
        "v1", "keras.mixed_precision.LossScaleOptimizer").symbol is (
            LossScaleOptimizer)
    for version in ("v1", "v2"):
      assert endpoints.lookup(
          version, "keras.mixed_precision.experimental.LossScaleOptimizer"
      ).symbol is LossScaleOptimizerV1


# -------------------------------------------------------- hyperparameters --


class TestDelegation:

  def test_docs_example(self):
    opt = LossScaleOptimizer(
        keras.optimizers.Adam(beta_1=0.8, epsilon=1e-5))
    assert opt.beta_1 == 0.8
    opt.beta_1 = 0.7
    assert opt.beta_1 == 0.7 and opt.inner_optimizer.beta_1 == 0.7
    assert opt.inner_optimizer.epsilon == 1e-5
    with pytest.raises(AttributeError,
                       match="'LossScaleOptimizer' object has no attribute "
                       "'epsilon'"):
      _ = opt.epsilon
    opt.epsilon = 1e-4
    assert opt.inner_optimizer.epsilon == 1e-5
    assert opt.epsilon == 1e-4
    assert "beta_2" in dir(opt)

  def test_learning_rate_and_lr(self):
    inner = keras.optimizers.SGD(0.5, momentum=0.25)
    opt = LossScaleOptimizer(inner)
    assert float(opt.learning_rate) == 0.5 and float(opt.lr) == 0.5
    opt.lr = 0.125
    assert float(inner.learning_rate) == 0.125
    opt.learning_rate = 0.25
    assert float(opt.lr) == 0.25
    assert opt.momentum == 0.25
    opt.momentum = 0.5
    assert inner.momentum == 0.5
    with pytest.raises(AttributeError):
      _ = opt.nesterov  # not a TF 2.4 hyperparameter

  def test_clip_and_iterations(self):
    inner = keras.optimizers.SGD(clipnorm=2.)
    opt = LossScaleOptimizer(inner)
    assert opt.clipnorm == 2. and opt.clipvalue is None
    opt.clipnorm = None
    opt.clipvalue = 1.
    assert inner.clipnorm is None and inner.clipvalue == 1.
    assert opt.iterations is inner.iterations

  def test_variables_weights_slots(self):
    inner = keras.optimizers.SGD(0.1, momentum=0.9)
    opt = LossScaleOptimizer(inner)
    var = tf.Variable([1., 2.], name="w")
    opt.apply_gradients([(tf.constant([1., 1.]), var)])
    assert [v.name for v in opt.variables()] == [
        v.name for v in inner.variables]
    assert len(opt.variables) == len(inner.variables)
    # TF 2.4's layout: [iterations] + slots (no learning rate).
    assert opt.weights == [inner.iterations, opt.get_slot(var, "momentum")]
    assert len(opt.get_weights()) == 2
    assert opt.get_slot_names() == ["momentum"]
    momentum = opt.get_slot(var, "momentum")
    np.testing.assert_allclose(momentum.numpy(), [-0.1, -0.1])
    with pytest.raises(KeyError):
      opt.get_slot(var, "velocity")
    weights = opt.get_weights()
    weights[0] = np.int64(41)
    opt.set_weights(weights)
    assert int(opt.iterations.numpy()) == 41
    extra = opt.add_slot(var, "extra", initializer="ones")
    assert opt.get_slot(var, "extra") is extra
    np.testing.assert_array_equal(extra.numpy(), [1., 1.])


# ------------------------------------------------------ scaling methods --


class TestScaling:

  def test_get_scaled_loss(self):
    opt = LossScaleOptimizer(keras.optimizers.SGD(), initial_scale=4.)
    assert float(opt.get_scaled_loss(tf.constant(3.))) == 12.
    half = opt.get_scaled_loss(tf.constant(3., tf.float16))
    assert half.dtype == tf.float16 and float(half) == 12.
    fn = opt.get_scaled_loss(lambda: tf.constant(2.))
    assert callable(fn) and float(fn()) == 8.

  def test_get_gradients_in_a_function(self):
    # TF 2.4: the scaled loss's tf.gradients, unscaled; a variable without a
    # gradient is refused by name.
    opt = LossScaleOptimizer(keras.optimizers.SGD(), initial_scale=8.)
    var = tf.Variable([1., -2.], name="w")

    @tf.function
    def grads():
      return opt.get_gradients(tf.reduce_sum(var * var) * 3., [var])

    np.testing.assert_array_equal(grads()[0].numpy(), [6., -12.])
    with pytest.raises(ValueError, match="w:0.* has `None` for gradient"):
      tf.function(lambda: opt.get_gradients(tf.constant(1.), [var]))()

  def test_get_unscaled_gradients(self):
    opt = LossScaleOptimizer(keras.optimizers.SGD(), initial_scale=4.)
    sparse = tf.IndexedSlices(tf.constant([[8.]]), tf.constant([1]),
                              tf.constant([3, 1]))
    dense, none, out_sparse = opt.get_unscaled_gradients(
        [tf.constant([4., 8.]), None, sparse])
    np.testing.assert_array_equal(dense.numpy(), [1., 2.])
    assert none is None
    assert isinstance(out_sparse, tf.IndexedSlices)
    np.testing.assert_array_equal(out_sparse.values.numpy(), [[2.]])
    np.testing.assert_array_equal(out_sparse.indices.numpy(), [1])

  def test_minimize_docs_example(self):
    opt = LossScaleOptimizer(keras.optimizers.SGD(0.25))
    var = tf.Variable(1.)
    opt.minimize(lambda: var**2, var_list=var)
    assert var.numpy() == 0.5
    with tf.GradientTape() as tape:
      loss = var**2
    opt.minimize(loss, var_list=[var], tape=tape)
    assert var.numpy() == 0.25
    with pytest.raises(ValueError, match="`tape` is required when a `Tensor` "
                       "loss is passed."):
      opt.minimize(tf.constant(1.), var_list=[var])

  def test_minimize_in_function_with_overflow(self):
    opt = LossScaleOptimizer(keras.optimizers.SGD(0.25), initial_scale=2.**126,
                             dynamic_growth_steps=1)
    var = tf.Variable(4.)

    @tf.function
    def step():
      opt.minimize(lambda: var**2, var_list=lambda: [var])

    step()  # the scaled gradient 8 * 2**126 overflows float32: skipped
    assert var.numpy() == 4. and float(opt.loss_scale) == 2.**125
    assert int(opt.iterations.numpy()) == 1
    step()  # 8 * 2**125 still overflows
    assert var.numpy() == 4. and float(opt.loss_scale) == 2.**124
    step()  # 8 * 2**124 is finite: applied, and the scale grows (1 step)
    assert var.numpy() == 2.
    assert float(opt.loss_scale) == 2.**125
    assert int(opt.iterations.numpy()) == 3

  def test_sparse_gradient_applied(self):
    opt = LossScaleOptimizer(keras.optimizers.SGD(1.), initial_scale=2.)
    var = tf.Variable([[1.], [2.], [3.]])
    sparse = tf.IndexedSlices(tf.constant([[4.]]), tf.constant([1]),
                              tf.constant([3, 1]))
    (grad,) = opt.get_unscaled_gradients([sparse])
    opt.apply_gradients([(grad, var)])
    np.testing.assert_array_equal(var.numpy(), [[1.], [0.], [3.]])

  def test_fixed_applies_non_finite(self):
    opt = LossScaleOptimizer(keras.optimizers.SGD(1.), dynamic=False,
                             initial_scale=2)
    var = tf.Variable(1.)
    opt.apply_gradients([(tf.constant(INF), var)])
    assert var.numpy() == -INF and float(opt.loss_scale) == 2.

  def test_cross_replica_context_raises(self, mirrored_strategy):
    with mirrored_strategy.scope():
      var = tf.Variable(1.)
      opt = LossScaleOptimizer(keras.optimizers.SGD())
      with pytest.raises(ValueError, match=r"apply_gradients\(\) must be "
                         "called in a replica context."):
        opt.apply_gradients([(tf.constant(1.), var)])

  @pytest.mark.parametrize("use_function", [False, True])
  def test_aggregate_false_applies_each_replicas_gradients_unsummed(
      self, mirrored_strategy, use_function):
    # TF 2.4's OptimizerV2 skipped its sum: the job all-reduced itself.
    with mirrored_strategy.scope():
      var = tf.Variable([1., 2.])
      opt = LossScaleOptimizer(keras.optimizers.SGD(1.), initial_scale=2)

    def step():
      mirrored_strategy.run(lambda: opt.apply_gradients(
          [(tf.constant([1., 1.]), var)],
          experimental_aggregate_gradients=False))

    (tf.function(step) if use_function else step)()
    for copy in mirrored_strategy.experimental_local_results(var):
      np.testing.assert_array_equal(copy.numpy(), [0., 1.])  # Not [-1, 0].
    assert int(opt.iterations.numpy()) == 1 and float(opt.loss_scale) == 2.
    # Summed (the default), the replicas' gradients add up.
    step_sum = lambda: mirrored_strategy.run(  # noqa: E731
        lambda: opt.apply_gradients([(tf.constant([1., 1.]), var)]))
    (tf.function(step_sum) if use_function else step_sum)()
    np.testing.assert_array_equal(var.numpy(), [-2., -1.])

  @pytest.mark.parametrize("use_function", [False, True])
  def test_restore_before_the_first_step_fills_every_replicas_slots(
      self, mirrored_strategy, use_function, tmp_path):
    # The job's own resume: a fresh optimizer, the checkpoint restored, then
    # the first step builds the slots. Each replica's copy gets the saved
    # moment (built in a replica, only the first one's did).
    def make():
      with mirrored_strategy.scope():
        var = tf.Variable([1., 2.])
        opt = LossScaleOptimizer(keras.optimizers.SGD(0.1, momentum=0.9))
      step = lambda: mirrored_strategy.run(  # noqa: E731
          lambda: opt.apply_gradients([(tf.constant([1., 1.]), var)]))
      return var, opt, (tf.function(step) if use_function else step)

    var, opt, step = make()
    step()
    step()
    path = tf.train.Checkpoint(v=var, optimizer=opt).save(str(tmp_path / "c"))
    step()
    var2, opt2, step2 = make()
    tf.train.Checkpoint(v=var2, optimizer=opt2).restore(path)
    step2()
    (momentum,) = [v for v in opt2.variables if "momentum" in v.path]
    expected = [v for v in opt.variables if "momentum" in v.path][0].numpy()
    for copy in mirrored_strategy.experimental_local_results(momentum.value):
      np.testing.assert_array_equal(copy.numpy(), expected)
    for copy in mirrored_strategy.experimental_local_results(var2):
      np.testing.assert_array_equal(copy.numpy(), var.numpy())

  @pytest.mark.parametrize("replica", [0, 1])
  @pytest.mark.parametrize("use_function", [False, True])
  def test_one_replica_non_finite_skips_the_step_everywhere(
      self, mirrored_strategy, use_function, replica):
    # The replicas agree on the verdict, as in TF 2.4, whichever of them saw
    # the overflow. (Keras 3's LossScaleOptimizer, given per-replica
    # gradients, decides from the first replica's alone: an inf on replica
    # 1 reaches the variable.)
    with mirrored_strategy.scope():
      var = tf.Variable([1., 2.])
      opt = LossScaleOptimizer(keras.optimizers.SGD(0.1), initial_scale=4)
      opt.build([var])

    def body():
      context = tf.distribute.get_replica_context()
      grad = tf.where(tf.equal(context.replica_id_in_sync_group, replica),
                      tf.constant([INF, 1.]), tf.constant([1., 1.]))
      opt.apply_gradients([(grad, var)])

    run = lambda: mirrored_strategy.run(body)
    if use_function:
      run = tf.function(run)
    run()
    for value in mirrored_strategy.experimental_local_results(var):
      np.testing.assert_array_equal(value.numpy(), [1., 2.])
    assert float(opt.loss_scale) == 2. and _counter(opt) == 0
    assert int(opt.iterations.numpy()) == 1

  @pytest.mark.parametrize("use_function", [False, True])
  def test_mirrored_minimize(self, mirrored_strategy, use_function):
    with mirrored_strategy.scope():
      var = tf.Variable(2.)
      opt = LossScaleOptimizer(keras.optimizers.SGD(0.25), initial_scale=4,
                               dynamic_growth_steps=1)
      opt.build([var])

    def run():
      mirrored_strategy.run(
          lambda: opt.minimize(lambda: var * var, var_list=[var]))

    if use_function:
      run = tf.function(run)
    run()
    # Each replica's gradient 4 is summed: 2 - 0.25 * 8.
    assert var.numpy() == 0.
    assert float(opt.loss_scale) == 8. and _counter(opt) == 0

  @pytest.mark.parametrize("make_inner", [
      lambda: keras.optimizers.SGD(0.1, momentum=0.9),
      lambda: keras.optimizers.Adam(0.1),
  ], ids=["sgd_momentum", "adam"])
  def test_first_step_builds_inside_distributed_function(
      self, mirrored_strategy, make_inner):
    # TF 2.4 code never called build(): its optimizers created their slots
    # on the first apply, also inside a distributed tf.function. Keras 3
    # optimizers fail to build there; the wrapper must not.
    def train(prebuilt):
      with mirrored_strategy.scope():
        var = tf.Variable([1., -2.])
        opt = LossScaleOptimizer(make_inner(), initial_scale=8,
                                 dynamic_growth_steps=2)
        if prebuilt:
          opt.build([var])

      def step_fn():
        with tf.GradientTape() as tape:
          loss = opt.get_scaled_loss(tf.reduce_sum(var * var))
        grads = opt.get_unscaled_gradients(tape.gradient(loss, [var]))
        opt.apply_gradients(zip(grads, [var]))

      step = tf.function(lambda: mirrored_strategy.run(step_fn))
      for _ in range(3):
        step()
      return var.numpy(), float(opt.loss_scale), int(opt.iterations.numpy())

    lazy, prebuilt = train(prebuilt=False), train(prebuilt=True)
    np.testing.assert_array_equal(lazy[0], prebuilt[0])
    assert lazy[1:] == prebuilt[1:] == (16., 3)


# ---------------------------------------------------------------- V1 --


class TestV1:

  def _warnings(self, caplog, fn):
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="tensorflow"):
      result = fn()
    return result, [r.getMessage() for r in caplog.records
                    if "experimental.LossScaleOptimizer is deprecated" in
                    r.getMessage()]

  def test_dynamic_string(self, caplog):
    opt, messages = self._warnings(
        caplog, lambda: LossScaleOptimizerV1(keras.optimizers.SGD(),
                                             "dynamic"))
    assert isinstance(opt, LossScaleOptimizer)
    assert opt.get_config()["dynamic"] is True
    assert opt.initial_scale == 2.**15
    assert messages == [
        "tf.keras.mixed_precision.experimental.LossScaleOptimizer is "
        "deprecated. Please use tf.keras.mixed_precision.LossScaleOptimizer "
        "instead. For example\n  opt = tf.keras.mixed_precision.experimental."
        "LossScaleOptimizer(opt)"
    ]

  @pytest.mark.parametrize("value", [123, 123.0])
  def test_number(self, caplog, value):
    opt, messages = self._warnings(
        caplog, lambda: LossScaleOptimizerV1(keras.optimizers.SGD(), value))
    twin = LossScaleOptimizer(keras.optimizers.SGD(), dynamic=False,
                              initial_scale=123)
    assert (opt.dynamic, opt.initial_scale) == (twin.dynamic,
                                                twin.initial_scale)
    assert messages and messages[0].endswith(
        f"opt, dynamic=False, initial_scale={value})")

  @pytest.mark.parametrize(
      "make", [lambda: loss_scale_module.FixedLossScale(64),
               lambda: tf.compat.v1.mixed_precision.FixedLossScale(64)])
  def test_fixed_loss_scale(self, make):
    opt = LossScaleOptimizerV1(keras.optimizers.SGD(), make())
    assert not opt.dynamic and opt.initial_scale == 64.

  @pytest.mark.parametrize(
      "cls", [loss_scale_module.DynamicLossScale,
              tf.compat.v1.mixed_precision.DynamicLossScale])
  def test_dynamic_loss_scale(self, caplog, cls):
    opt, messages = self._warnings(
        caplog, lambda: LossScaleOptimizerV1(
            keras.optimizers.SGD(),
            cls(initial_loss_scale=2048, increment_period=500)))
    assert opt.dynamic
    assert (opt.initial_scale, opt.dynamic_growth_steps) == (2048., 500)
    assert messages and messages[0].endswith(
        "LossScaleOptimizer(opt, initial_scale=2048.0, "
        "dynamic_growth_steps=500)\n")
    # TF 2.3.4 took any multiplier (TF 2.4 refused it); the V1 class uses
    # the LossScale itself.
    scale = cls(multiplier=4)
    opt = LossScaleOptimizerV1(keras.optimizers.SGD(), scale)
    assert opt.loss_scale.multiplier == 4 and opt.dynamic

  def test_serialized_dict(self):
    opt = LossScaleOptimizerV1(
        keras.optimizers.SGD(),
        {"class_name": "DynamicLossScale",
         "config": {"initial_loss_scale": 16., "increment_period": 3,
                    "multiplier": 2.}})
    assert (opt.initial_scale, opt.dynamic_growth_steps) == (16., 3)

  def test_rejects(self):

    class OtherScale(loss_scale_module.LossScale):

      def __call__(self):
        return tf.constant(1.)

      def update(self, grads):
        return None, True

      def get_config(self):
        return {}

    # A user LossScale is accepted, as by TF 2.3.4 (TF 2.4 refused it).
    other = OtherScale()
    opt = LossScaleOptimizerV1(keras.optimizers.SGD(), other)
    assert isinstance(opt.loss_scale, OtherScale)
    assert float(opt.loss_scale()) == 1.
    for bad in ["dynamc", None, True, [2]]:
      with pytest.raises(ValueError, match="Invalid value passed to "
                         "loss_scale. loss_scale must be the string "
                         '"dynamic"'):
        LossScaleOptimizerV1(keras.optimizers.SGD(), bad)
    with pytest.raises(TypeError, match='"inner_optimizer" must be'):
      LossScaleOptimizerV1("sgd", "dynamic")

  def test_not_instance_of_v1(self):
    assert not isinstance(LossScaleOptimizer(keras.optimizers.SGD()),
                          LossScaleOptimizerV1)
    assert isinstance(LossScaleOptimizerV1(keras.optimizers.SGD(), 4),
                      LossScaleOptimizer)


# ------------------------------------------------------------- configs --


def _inner_learning_rate(opt):
  return float(opt.inner_optimizer.learning_rate)


class TestConfig:

  def test_round_trip_tf24_format(self):
    opt = LossScaleOptimizer(keras.optimizers.Adam(0.002, beta_1=0.8),
                             initial_scale=1024, dynamic_growth_steps=500)
    config = opt.get_config()
    assert sorted(config) == ["dynamic", "dynamic_growth_steps",
                              "initial_scale", "inner_optimizer"]
    json.dumps(config)
    again = LossScaleOptimizer.from_config(config)
    assert again.get_config() == config
    assert isinstance(again.inner_optimizer, keras.optimizers.Adam)

  @pytest.mark.parametrize("cls", [LossScaleOptimizer, LossScaleOptimizerV1])
  def test_keras_serialize_round_trip(self, cls):
    opt = (cls(keras.optimizers.SGD(0.5), dynamic=False, initial_scale=8)
           if cls is LossScaleOptimizer else cls(keras.optimizers.SGD(0.5), 8))
    serialized = keras.optimizers.serialize(opt)
    assert serialized["class_name"] == cls.__name__
    again = keras.optimizers.deserialize(json.loads(json.dumps(serialized)))
    # TF 2.4.4 deserialized a serialized V1 as a LossScaleOptimizer.
    assert type(again) is LossScaleOptimizer
    assert again.get_config() == opt.get_config()

  @pytest.mark.parametrize("version", ["tf23", "tf24"])
  def test_reference_configs(self, version):
    configs = _fixture(f"configs_{version}.json")
    expected = {
        "dynamic_sgd": (True, 2.**15, 2000, keras.optimizers.SGD, 0.1),
        "dynamic_custom_adam": (True, 1024., 500, keras.optimizers.Adam,
                                0.002),
        "fixed_rmsprop": (False, 128., None, keras.optimizers.RMSprop, 0.01),
        "fixed_adam_clipnorm_named": (False, 64., None, keras.optimizers.Adam,
                                      0.001),
    }
    for name, (dynamic, scale, steps, inner_cls, lr) in expected.items():
      for cls in (LossScaleOptimizer, LossScaleOptimizerV1):
        opt = cls.from_config(configs[name]["get_config"])
        assert type(opt) is cls
        assert (opt.dynamic, opt.initial_scale,
                opt.dynamic_growth_steps) == (dynamic, scale, steps)
        assert type(opt.inner_optimizer) is inner_cls
        assert _inner_learning_rate(opt) == pytest.approx(lr)
    sgd = LossScaleOptimizer.from_config(
        configs["dynamic_sgd"]["get_config"]).inner_optimizer
    assert sgd.momentum == 0.9 and sgd.nesterov is True
    adam = LossScaleOptimizer.from_config(
        configs["dynamic_custom_adam"]["get_config"]).inner_optimizer
    assert adam.beta_1 == 0.8 and adam.epsilon == 1e-5
    named = LossScaleOptimizer.from_config(
        configs["fixed_adam_clipnorm_named"]["get_config"]).inner_optimizer
    assert named.amsgrad is True and named.name == "MyAdam"

  @pytest.mark.parametrize("version", ["tf23", "tf24"])
  def test_decay_becomes_inverse_time_decay(self, version):
    config = _fixture(f"configs_{version}.json")["dynamic_sgd_decay"]
    opt = LossScaleOptimizer.from_config(config["get_config"])
    schedule = opt.inner_optimizer._learning_rate  # pylint: disable=protected-access
    assert isinstance(schedule, keras.optimizers.schedules.InverseTimeDecay)
    # Keras 2: lr / (1 + decay * iterations).
    assert float(schedule(10)) == pytest.approx(0.1 / (1 + 0.01 * 10))

  def test_tf24_v1_configs(self):
    configs = _fixture("configs_tf24.json")
    dyn = LossScaleOptimizerV1.from_config(configs["v1_dynamic"]["get_config"])
    assert dyn.dynamic and dyn.initial_scale == 2.**15
    fixed = LossScaleOptimizer.from_config(configs["v1_fixed"]["get_config"])
    assert not fixed.dynamic and fixed.initial_scale == 32.

  def test_tf23_multiplier_not_2(self):
    config = _fixture("configs_tf23.json")["dynamic_multiplier_4"]
    # The TF 2.4 class keeps TF 2.4's rule; the TF 2.3 one takes it.
    with pytest.raises(ValueError, match="Cannot deserialize "
                       "LossScaleOptimizer with a DynamicLossScale whose "
                       "multiplier is not 2"):
      LossScaleOptimizer.from_config(config["get_config"])
    opt = LossScaleOptimizerV1.from_config(config["get_config"])
    assert opt.loss_scale.get_config() == (
        config["get_config"]["loss_scale"]["config"])

  def test_unhonourable_keras2_options(self):
    config = {
        "inner_optimizer": {"class_name": "SGD", "config": {
            "learning_rate": 0.1, "decay": 0.0, "bogus_option": 1}},
        "dynamic": True, "initial_scale": 8., "dynamic_growth_steps": 10}
    # TF 2.4's type and message for a key its optimizer did not take.
    with pytest.raises(TypeError, match="Unexpected keyword argument passed "
                       "to optimizer: bogus_option"):
      LossScaleOptimizer.from_config(config)
    config["inner_optimizer"] = {"class_name": "SGD", "config": {
        "learning_rate": {"class_name": "ExponentialDecay", "config": {
            "initial_learning_rate": 0.1, "decay_steps": 10,
            "decay_rate": 0.5}}, "decay": 0.01}}
    with pytest.raises(ValueError, match="decay"):
      LossScaleOptimizer.from_config(config)
    config["inner_optimizer"] = {"class_name": "NoSuchOpt", "config": {}}
    with pytest.raises(ValueError, match="Unknown optimizer"):
      LossScaleOptimizer.from_config(config)

  def test_keras2_schedule(self):
    config = {
        "inner_optimizer": {"class_name": "Adam", "config": {
            "learning_rate": {"class_name": "ExponentialDecay", "config": {
                "initial_learning_rate": 0.1, "decay_steps": 10,
                "decay_rate": 0.5, "staircase": False, "name": None}},
            "decay": 0.0, "beta_1": 0.9, "beta_2": 0.999, "epsilon": 1e-7,
            "amsgrad": False, "name": "Adam"}},
        "dynamic": True, "initial_scale": 8., "dynamic_growth_steps": 10}
    opt = LossScaleOptimizer.from_config(config)
    schedule = opt.inner_optimizer._learning_rate  # pylint: disable=protected-access
    assert isinstance(schedule, keras.optimizers.schedules.ExponentialDecay)
    assert {k: schedule.get_config()[k] for k in (
        "initial_learning_rate", "decay_steps", "decay_rate", "staircase")} == {
            "initial_learning_rate": 0.1, "decay_steps": 10,
            "decay_rate": 0.5, "staircase": False}
    assert (opt.initial_scale, opt.dynamic_growth_steps) == (8., 10)
    # TF 2.x wrote `"name": None` for a schedule; it still steps.
    var = tf.Variable([1.0])
    opt.apply_gradients([(tf.constant([1.0]), var)])
    assert float(opt.learning_rate) == pytest.approx(0.1 * 0.5**0.1)


# ---------------------------------------------------------- checkpoints --


def _model():
  model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
  return model


class TestCheckpoint:

  @pytest.mark.parametrize("version", ["tf23", "tf24"])
  def test_reference_checkpoint_restores_scale_and_counter(self, version):
    meta = _fixture(f"ckpt_{version}.json")
    path = testing.fixture_path("keras_lso", meta["prefix"])
    listed = sorted([n, list(s)] for n, s in tf.train.list_variables(path))
    assert listed == meta["variables"]
    assert ["optimizer/loss_scale/current_loss_scale/.ATTRIBUTES/"
            "VARIABLE_VALUE", []] in listed
    model = _model()
    opt = LossScaleOptimizer(keras.optimizers.SGD(0.01, momentum=0.9))
    tf.train.Checkpoint(model=model, optimizer=opt).restore(path)
    assert float(opt.loss_scale) == meta["loss_scale"]
    assert _counter(opt) == meta["counter"]
    assert (meta["loss_scale"], meta["counter"]) != (2.**15, 0)
    # The checkpoint is also readable as the experimental class.
    opt1 = LossScaleOptimizerV1(keras.optimizers.SGD(0.01), "dynamic")
    tf.train.Checkpoint(optimizer=opt1).restore(path).expect_partial()
    assert float(opt1.loss_scale) == meta["loss_scale"]
    assert _counter(opt1) == meta["counter"]

  def test_layout_is_inner_plus_loss_scale(self, tmp_path):
    var = tf.Variable([1., 2.])
    bare = keras.optimizers.Adam(0.1)
    bare.apply_gradients([(tf.constant([1., 1.]), var)])
    bare_path = tf.train.Checkpoint(optimizer=bare, v=var).save(
        str(tmp_path / "bare"))
    var2 = tf.Variable([1., 2.])
    wrapped = LossScaleOptimizer(keras.optimizers.Adam(0.1),
                                 initial_scale=64)
    wrapped.apply_gradients([(tf.constant([1., 1.]), var2)])
    wrapped._loss_scale.counter.assign(7)  # pylint: disable=protected-access
    wrapped_path = tf.train.Checkpoint(optimizer=wrapped, v=var2).save(
        str(tmp_path / "wrapped"))
    bare_names = {n for n, _ in tf.train.list_variables(bare_path)}
    wrapped_names = {n for n, _ in tf.train.list_variables(wrapped_path)}
    assert wrapped_names - bare_names == {
        "optimizer/loss_scale/current_loss_scale/.ATTRIBUTES/VARIABLE_VALUE",
        "optimizer/loss_scale/good_steps/.ATTRIBUTES/VARIABLE_VALUE"}
    assert bare_names <= wrapped_names

    # Bare -> wrapped, restored before the inner optimizer is built.
    var3 = tf.Variable([0., 0.])
    into_wrapped = LossScaleOptimizer(keras.optimizers.Adam(0.1))
    tf.train.Checkpoint(optimizer=into_wrapped, v=var3).restore(bare_path)
    into_wrapped.build([var3])
    for a, b in zip(bare.variables, into_wrapped.variables):
      np.testing.assert_array_equal(a.numpy(), b.numpy())
    assert float(into_wrapped.loss_scale) == 2.**15

    # Wrapped -> bare, and wrapped -> wrapped with the loss scale.
    var4 = tf.Variable([0., 0.])
    into_bare = keras.optimizers.Adam(0.1)
    tf.train.Checkpoint(optimizer=into_bare, v=var4).restore(
        wrapped_path).expect_partial()
    into_bare.build([var4])
    for a, b in zip(wrapped.variables, into_bare.variables):
      np.testing.assert_array_equal(a.numpy(), b.numpy())
    var5 = tf.Variable([0., 0.])
    again = LossScaleOptimizer(keras.optimizers.Adam(0.1))
    tf.train.Checkpoint(optimizer=again, v=var5).restore(wrapped_path)
    again.build([var5])
    assert float(again.loss_scale) == 64. and _counter(again) == 7
    assert int(again.iterations.numpy()) == 1

  def test_mirrored_restore(self, mirrored_strategy):
    meta = _fixture("ckpt_tf24.json")
    path = testing.fixture_path("keras_lso", meta["prefix"])
    with mirrored_strategy.scope():
      opt = LossScaleOptimizer(keras.optimizers.SGD(0.01))
      tf.train.Checkpoint(optimizer=opt).restore(path).expect_partial()
    for component in mirrored_strategy.experimental_local_results(
        opt.dynamic_counter):
      assert int(component.numpy()) == meta["counter"]
    for component in mirrored_strategy.experimental_local_results(
        opt._loss_scale.current_loss_scale):  # pylint: disable=protected-access
      assert float(component.numpy()) == meta["loss_scale"]
