"""TF 2.4's Keras LossScaleOptimizer unit tests, ported to the package.

Original: tensorflow/python/keras/mixed_precision/loss_scale_optimizer_test.py
(TF r2.4), which tested `tf.keras.mixed_precision.LossScaleOptimizer` and the
experimental `LossScaleOptimizerV1`; here both are reached through
`tf.keras.mixed_precision[.experimental]` after `install()`, wrapping Keras 3
optimizers (`tf.keras.optimizers.*`). Inputs, expected values and assertions
are the original's.

Modes: TF ran each case eagerly and in a TF1 graph. Here the graph half of
each case runs as a `tf.function` graph ("function" mode); the one case that
only ever ran in a TF1 graph (`get_gradients`) still does. The step cases
also run with Keras 3 optimizers in a TF1 graph and session, in
test_keras_loss_scale_optimizer_legacy_kind.py (`kind="keras3"`). Strategy
cases run with the default strategy and a MirroredStrategy over
2 logical CPUs (TF ran 1 replica, or 2 with a GPU); losses are divided by the
replica count as in the original, so expected values are unchanged. The GPU-only
NaN-on-one-replica case runs here on the 2 logical CPUs.

Adapted to Keras 3 (same intent):
- the experimental class (TF 2.3's) follows TF 2.3.4 where TF 2.4 broke TF 2.3
  code: its `loss_scale` is a callable that converts to a float32 tensor, it
  takes any LossScale (TF 2.4's refusals become acceptances), and it uses a
  DynamicLossScale passed in, current value included.
- test_apply_gradients_gets_unwrapped_tensors: the subclass's override keeps
  TF 2.4's signature but calls Keras 3's `apply_gradients(grads_and_vars)`.
- test_checkpoint: without a LossScaleOptimizer, the bare Keras 3 SGD is
  stepped with a GradientTape and its momentum read from `momentums` (Keras 3
  optimizers have no `minimize` or `get_slot`).
- test_hyperparameters_exposed: `lso.lr is opt.lr` compares with the inner
  optimizer's `learning_rate` (Keras 3 optimizers have no `lr`).

Where Keras 3 has no counterpart, the case asserts what the package does
instead (same intent):
- test_unaggregated_gradients (TF 2.4's testCustomAggregater): Keras 3
  optimizers have no `gradient_aggregator`; `experimental_aggregate_gradients=
  False` applies on one replica and is refused, changing nothing, on several.
- test_hyperparameters_set_through_the_wrapper_drive_the_step (the
  `assertIsInstance(lso.beta_1, Variable)` of testHyperParametersExposed):
  Keras 3 keeps hyperparameters other than the learning rate as Python floats;
  one set through the wrapper changes the next step as on a bare optimizer.
- test_inner_attribute_named_like_a_wrapper_attribute (the end of
  testHyperParametersExposed): Keras 3 optimizers have no `_set_hyper`; an
  inner attribute named `loss_scale` is not the wrapper's, which cannot be
  set.
"""

import numpy as np
import pytest
import tensorflow as tf

from tests.tf_ported import harness
from tests.tf_ported import lso_cases

MODES = ("eager", "function")
STRATEGIES = harness.STRATEGIES


_lso = lso_cases.lso


def _lso_v1(*args, **kwargs):
  return tf.keras.mixed_precision.experimental.LossScaleOptimizer(
      *args, **kwargs)


def _sgd(*args, **kwargs):
  return tf.keras.optimizers.SGD(*args, **kwargs)


def _step_fn(mode, strategy, fn):
  """A step running `fn` on every replica, eagerly or as a tf.function."""
  call = lambda: strategy.run(fn)
  return tf.function(call) if mode == "function" else call


def _run(mode, strategy, fn):
  """Runs `fn` on every replica once, eagerly or inside a tf.function."""
  return _step_fn(mode, strategy, fn)()


def _value(x):
  return x.numpy() if hasattr(x, "numpy") else x


@pytest.mark.parametrize("strategy_name", STRATEGIES)
@pytest.mark.parametrize("mode", MODES)
def test_fixed_loss_scale_applied_to_loss_with_minimize(runner_for, mode,
                                                         strategy_name):
  runner = runner_for(mode, strategy_name)
  opt = lso_cases.fixed_loss_scale_applied_to_loss_with_minimize(runner,
                                                                 _sgd)
  assert isinstance(opt.loss_scale, tf.Tensor)
  # The per-replica expected gradient must be exact.
  assert _value(opt.loss_scale) % runner.strategy.num_replicas_in_sync == 0


def test_fixed_loss_scale_applied_to_loss_with_get_gradients():
  lso_cases.fixed_loss_scale_applied_to_loss_with_get_gradients(_sgd)


def test_dynamic_attrs_with_fixed_loss_scale():
  opt = _lso(_sgd(), dynamic=False, initial_scale=2.)
  assert not opt.dynamic
  assert opt.dynamic_counter is None
  assert opt.dynamic_growth_steps is None


def test_get_scaled_loss():
  opt = _lso(_sgd(2.0), dynamic=False, initial_scale=2.)
  for dtype in ("float32", "float16"):
    loss = tf.convert_to_tensor(5., dtype=dtype)
    assert opt.get_scaled_loss(loss).numpy() == 10.
    assert opt.get_scaled_loss(lambda l=loss: l)().numpy() == 10.


def test_get_unscaled_gradients():
  opt = _lso(_sgd(2.0), dynamic=False, initial_scale=2)
  scaled = [tf.constant(3.), None, tf.constant(-4., dtype="float16")]
  grads = [g if g is None else g.numpy()
           for g in opt.get_unscaled_gradients(scaled)]
  assert grads == [1.5, None, -2.]


def test_get_unscaled_sparse_gradients():
  opt = _lso(_sgd(2.0), dynamic=False, initial_scale=2)
  scaled = tf.IndexedSlices(
      tf.constant([[4., 2.], [8., 5.]]), tf.constant([1, 3], dtype="int32"),
      dense_shape=tf.constant([5, 2], dtype="int32"))
  grad = opt.get_unscaled_gradients([scaled])[0]
  assert isinstance(grad, tf.IndexedSlices)
  np.testing.assert_array_equal(grad.values.numpy(), [[2., 1.], [4., 2.5]])


@pytest.mark.parametrize("strategy_name", STRATEGIES)
@pytest.mark.parametrize("mode", MODES)
def test_dynamic_loss_scale(runner_for, mode, strategy_name):
  runner = runner_for(mode, strategy_name)
  opt = lso_cases.dynamic_loss_scale(runner, _sgd)
  assert opt.initial_scale == 2.
  assert isinstance(opt.initial_scale, float)
  assert opt.dynamic_growth_steps == 1
  assert isinstance(opt.dynamic_growth_steps, int)
  assert opt.initial_scale % runner.strategy.num_replicas_in_sync == 0


def test_dynamic_loss_scale_default_values():
  opt = _lso(_sgd())
  assert opt.initial_scale == 2**15
  assert opt.dynamic_growth_steps == 2000
  assert _value(opt.loss_scale) == 2**15


@pytest.mark.parametrize("clip_type", ["clipnorm", "global_clipnorm",
                                       "clipvalue"])
@pytest.mark.parametrize("strategy_name", STRATEGIES)
@pytest.mark.parametrize("mode", MODES)
def test_clipping(runner_for, mode, strategy_name, clip_type):
  runner = runner_for(mode, strategy_name)
  opt = lso_cases.clipping(runner, _sgd, clip_type)
  assert opt.initial_scale % runner.strategy.num_replicas_in_sync == 0


@pytest.mark.parametrize("strategy_name", STRATEGIES)
@pytest.mark.parametrize("mode", MODES)
def test_dynamic_update(runner_for, mode, strategy_name):
  runner = runner_for(mode, strategy_name)
  lso_cases.dynamic_update(runner, _sgd)


@pytest.mark.parametrize("strategy_name", STRATEGIES)
@pytest.mark.parametrize("mode", MODES)
def test_dynamic_loss_scale_with_float16_loss(runner_for, mode, strategy_name):
  runner = runner_for(mode, strategy_name)
  lso_cases.dynamic_loss_scale_with_float16_loss(runner, _sgd)


@pytest.mark.parametrize("mode", MODES)
def test_nan_on_one_replica_only(runner_for, mode):
  # TF needed a GPU for a second replica; the 2 logical CPUs give one here.
  lso_cases.nan_on_one_replica_only(runner_for(mode, "mirrored"), _sgd)


@pytest.mark.parametrize("strategy_name", STRATEGIES)
@pytest.mark.parametrize("mode", MODES)
def test_unaggregated_gradients(runner_for, mode, strategy_name):
  # TF 2.4's testCustomAggregater gave the inner optimizer its own
  # `gradient_aggregator`; Keras 3 optimizers take none. The choice left,
  # `experimental_aggregate_gradients=False`, applies each replica's
  # gradients as given, unsummed, as TF 2.4's OptimizerV2 did: the job has
  # summed them itself.
  runner = runner_for(mode, strategy_name)
  with runner.strategy.scope():
    var = tf.Variable([1.0, 2.0])
  opt = _lso(_sgd(1.0), initial_scale=2, dynamic_growth_steps=2)

  def step():
    opt.apply_gradients([(tf.constant([1.0, 1.0]), var)],
                        experimental_aggregate_gradients=False)

  _run(mode, runner.strategy, step)
  # Summed over two replicas, the step would have been [2, 2].
  np.testing.assert_allclose(var.numpy(), [0.0, 1.0])
  assert _value(opt.iterations) == 1
  assert _value(opt.loss_scale) == 2.


@pytest.mark.parametrize("strategy_name", STRATEGIES)
@pytest.mark.parametrize("mode", MODES)
def test_dynamic_loss_scale_with_slots(runner_for, mode, strategy_name):
  runner = runner_for(mode, strategy_name)
  lso_cases.dynamic_loss_scale_with_slots(runner, _sgd)


def test_iterations():
  lso_cases.iterations(_sgd)


@pytest.mark.parametrize("strategy_name", STRATEGIES)
@pytest.mark.parametrize("mode", MODES)
def test_iterations_incremented(runner_for, mode, strategy_name):
  runner = runner_for(mode, strategy_name)
  lso_cases.iterations_incremented(runner, _sgd)


def test_weight_methods():
  var = tf.Variable([1.0])
  inner = _sgd(1.0)
  opt = _lso(inner, initial_scale=2., dynamic_growth_steps=1)
  opt.minimize(lambda: var * 2, [var])
  # TF 2.4's layout, `[iterations] + slots` (plain SGD has no slot): the
  # learning-rate variable a Keras 3 optimizer also holds is not a weight, and
  # neither is the loss scale, as in TF 2.4.
  assert [w.path for w in opt.weights] == [inner.iterations.path]
  assert _value(opt.weights[0]) == 1
  assert opt.get_weights()[0] == 1
  assert _value(opt.variables()[0]) == 1
  opt.set_weights([np.array(2.)])
  assert _value(opt.variables()[0]) == 2


def test_hyperparameters_exposed():
  opt = tf.keras.optimizers.Adam(learning_rate=1.0, beta_1=0.5, beta_2=0.9)
  lso = _lso(opt)
  assert _value(lso.beta_1) == 0.5
  assert _value(lso.lr) == 1.0
  assert lso.lr is opt.learning_rate
  assert lso.lr is lso.learning_rate

  lso.beta_1 = 0.25
  assert _value(lso.beta_1) == 0.25
  assert _value(opt.beta_1) == 0.25
  assert lso.beta_1 is opt.beta_1
  opt.beta_1 = 0.75
  assert _value(lso.beta_1) == 0.75
  assert _value(opt.beta_1) == 0.75
  assert lso.beta_1 is opt.beta_1
  lso.lr = 2.0
  assert _value(lso.lr) == 2.0
  assert _value(lso.learning_rate) == 2.0
  assert _value(opt.learning_rate) == 2.0
  assert lso.lr is opt.learning_rate


def test_hyperparameters_set_through_the_wrapper_drive_the_step():
  # TF 2.4 kept hyperparameters in variables (testHyperParametersExposed's
  # `assertIsInstance(lso.beta_1, Variable)`); Keras 3 keeps all but the
  # learning rate as Python floats. What TF 2.4 code relied on holds: one
  # set through the wrapper changes the next step as on a bare optimizer.
  def adam():
    return tf.keras.optimizers.Adam(learning_rate=1.0, beta_1=0.5, beta_2=0.9)

  lso, changed, unchanged = _lso(adam()), adam(), adam()
  grads = [tf.constant([0.5, -1.0]), tf.constant([2.0, 0.25])]
  results = []
  for opt in (lso, changed, unchanged):
    var = tf.Variable([1.0, 2.0])
    opt.apply_gradients([(grads[0], var)])
    if opt is not unchanged:
      opt.beta_1 = 0.25
      opt.learning_rate = 0.5
    opt.apply_gradients([(grads[1], var)])
    results.append(var.numpy())
  assert lso.inner_optimizer.beta_1 == 0.25
  np.testing.assert_array_equal(results[0], results[1])
  assert not np.allclose(results[0], results[2])


def test_inner_attribute_named_like_a_wrapper_attribute():
  # TF 2.4: an inner hyperparameter named `loss_scale` is not reached through
  # the wrapper. Keras 3 optimizers have no `_set_hyper`; an inner attribute
  # of that name is likewise not the wrapper's, which cannot be set.
  class MyOpt(tf.keras.optimizers.SGD):

    def __init__(self):
      super().__init__()
      self.loss_scale = 123.

  inner = MyOpt()
  wrapped = _lso(inner)
  assert _value(wrapped.loss_scale) == 2.**15
  with pytest.raises(AttributeError):
    wrapped.loss_scale = 2.
  assert inner.loss_scale == 123.


def test_arbitrary_attributes_not_exposed():
  opt = _sgd()
  lso = _lso(opt)
  lso_cases.arbitrary_attributes_not_exposed(lso, opt)


def test_dir():
  lso = _lso(_sgd())
  names = dir(lso)
  assert "learning_rate" in names  # Hyperparameter
  assert "lr" in names  # Hyperparameter
  assert "minimize" in names  # Attribute
  assert "loss_scale" in names  # Attribute
  assert "nesterov" not in names  # Attribute of the inner optimizer only
  assert "nesterov" in dir(lso.inner_optimizer)


def test_apply_gradients_gets_unwrapped_tensors():
  # The inner optimizer's apply_gradients sees plain tensors, not PerReplica
  # values, under a MirroredStrategy.
  seen = []

  class MyOptimizer(tf.keras.optimizers.SGD):

    def apply_gradients(self, grads_and_vars, name=None,
                        experimental_aggregate_gradients=True):
      del name, experimental_aggregate_gradients  # Keras 3's takes neither.
      grads_and_vars = list(grads_and_vars)
      seen.extend(type(g) for g, _ in grads_and_vars)
      for grad, _ in grads_and_vars:
        assert isinstance(grad, tf.Tensor), type(grad)
      return super().apply_gradients(grads_and_vars)

  with harness.make_strategy("mirrored").scope() as strategy:
    var = tf.Variable([5.0])
    opt = _lso(MyOptimizer(learning_rate=1.0), dynamic=False,
               initial_scale=1)
    strategy.run(lambda: opt.minimize(lambda: var * 2.0, [var]))
  assert seen


@pytest.mark.parametrize("strategy_name", STRATEGIES)
@pytest.mark.parametrize("mode", MODES)
def test_v1_optimizer(mode, strategy_name):
  learning_rate = 2.
  with harness.make_strategy(strategy_name).scope() as strategy:
    # A fixed loss scale.
    var = tf.Variable([5.0])
    opt = _lso_v1(_sgd(learning_rate), loss_scale=2)
    _assert_float32_tensor_like(opt.loss_scale)
    assert _value(opt.loss_scale) == 2
    assert opt.initial_scale == 2
    assert opt.dynamic_growth_steps is None
    _run(mode, strategy, harness.minimize_with_grad_check(
        strategy, var, opt, 2 / strategy.num_replicas_in_sync))
    np.testing.assert_allclose(var.numpy(), [3.])

    # A dynamic loss scale.
    var = tf.Variable([5.0])
    opt = _lso_v1(_sgd(learning_rate), "dynamic")
    assert opt.initial_scale == 2**15
    assert opt.dynamic_growth_steps == 2000
    assert _value(opt.loss_scale) == 2**15
    for counter in strategy.experimental_local_results(opt.dynamic_counter):
      assert _value(counter) == 0

    loss = lambda: var * float("nan")
    _run(mode, strategy, lambda: opt.minimize(loss, var_list=[var]))
    np.testing.assert_allclose(var.numpy(), [5.])
    assert _value(opt.loss_scale) == 2**14
    for counter in strategy.experimental_local_results(opt.dynamic_counter):
      assert _value(counter) == 0


@pytest.mark.parametrize("strategy_name", STRATEGIES)
@pytest.mark.parametrize("mode", MODES)
def test_passing_v1_loss_scale(mode, strategy_name):
  learning_rate = 2.
  exp = tf.mixed_precision.experimental
  with harness.make_strategy(strategy_name).scope() as strategy:
    # A FixedLossScale.
    var = tf.Variable([5.0])
    opt = _lso_v1(_sgd(learning_rate), exp.FixedLossScale(2.))
    _assert_float32_tensor_like(opt.loss_scale)
    assert _value(opt.loss_scale) == 2
    _run(mode, strategy, harness.minimize_with_grad_check(
        strategy, var, opt, 2 / strategy.num_replicas_in_sync))
    np.testing.assert_allclose(var.numpy(), [3.])

    # A DynamicLossScale. TF 2.4 copied only its config; the experimental
    # class follows TF 2.3.4, which used the object itself, current value
    # included (docs/api_differences.md).
    var = tf.Variable([5.0])
    loss_scale = exp.DynamicLossScale(initial_loss_scale=4,
                                      increment_period=1, multiplier=2)
    loss_scale._current_loss_scale.assign(2)
    opt = _lso_v1(_sgd(learning_rate), loss_scale)
    assert opt.initial_scale == 4
    assert opt.dynamic_growth_steps == 1
    assert _value(opt.loss_scale) == 2
    for counter in strategy.experimental_local_results(opt.dynamic_counter):
      assert _value(counter) == 0
    _run(mode, strategy, harness.minimize_with_grad_check(
        strategy, var, opt, 2 / strategy.num_replicas_in_sync))
    np.testing.assert_allclose(var.numpy(), [3.])
    assert _value(opt.loss_scale) == 4  # One finite step per growth period.
    assert _value(loss_scale()) == 4  # The object passed in is the state.


def _assert_float32_tensor_like(value):
  """TF 2.4's `loss_scale` was a float32 tensor; TF 2.3's a callable."""
  assert tf.convert_to_tensor(value).dtype == tf.float32
  assert _value(value()) == _value(value)


def test_passing_v1_loss_scale_any_loss_scale():
  # TF 2.4 refused these two; TF 2.3.4, whose class this is, accepted them
  # (tests/optimizers/test_experimental_loss_scale_optimizer.py checks their
  # trajectories).
  exp = tf.mixed_precision.experimental
  opt = _lso_v1(_sgd(), exp.DynamicLossScale(multiplier=4))
  assert _value(opt.loss_scale()) == 2**15

  class MyLossScale(exp.LossScale):

    def __call__(self):
      return tf.constant(1.)

    def update(self, grads):
      return tf.no_op(), tf.constant(True)

    def get_config(self):
      return {}

  opt = _lso_v1(_sgd(), MyLossScale())
  assert _value(opt.loss_scale()) == 1
  assert opt.initial_scale is None


class _SGDWithExtraVariable(tf.keras.optimizers.SGD):
  """An SGD that tracks one more variable, saved with the optimizer."""

  def __init__(self, *args, **kwargs):
    super().__init__(*args, **kwargs)
    self.my_var = tf.Variable(0.)


@pytest.mark.parametrize("save_with_ls,restore_with_ls", [
    (True, True), (True, False), (False, True)],
                         ids=["save_and_restore", "save", "restore"])
@pytest.mark.parametrize("strategy_name", STRATEGIES)
def test_checkpoint(strategy_name, save_with_ls, restore_with_ls, tmp_path):
  # Eager only, as in TF (its graph cases never ran under a MirroredStrategy,
  # and could not assert restored values before initialization).
  lso_cases.checkpoint(harness.make_strategy(strategy_name),
                       _SGDWithExtraVariable, save_with_ls, restore_with_ls,
                       tmp_path)


def _config_from(source, dynamic):
  """A config of a V1 optimizer, a V2 one, or one TF 2.3 wrote."""
  opt = _sgd(2., momentum=0.5)
  exp = tf.mixed_precision.experimental
  if source == "v1":
    loss_scale = (exp.DynamicLossScale(initial_loss_scale=2,
                                       increment_period=3)
                  if dynamic else 2)
    return _lso_v1(opt, loss_scale).get_config()
  if source == "v2":
    if dynamic:
      return _lso(opt, initial_scale=2, dynamic_growth_steps=3).get_config()
    return _lso(opt, dynamic=False, initial_scale=2).get_config()
  assert source == "tf2_3"
  if dynamic:
    loss_scale = {"class_name": "DynamicLossScale",
                  "config": {"initial_loss_scale": 2.0, "increment_period": 3,
                             "multiplier": 2.0}}
  else:
    loss_scale = {"class_name": "FixedLossScale",
                  "config": {"loss_scale_value": 2.0}}
  return {"optimizer": lso_cases.SGD_CONFIG_TF23, "loss_scale": loss_scale}


def _from_config(target, config):
  cls = (tf.keras.mixed_precision.experimental.LossScaleOptimizer
         if target == "v1" else tf.keras.mixed_precision.LossScaleOptimizer)
  return cls.from_config(config)


def _check_usable(opt):
  """One minimize step with the expected scaled gradient 2 (lr 2)."""
  var = tf.Variable([5.0])
  harness.minimize_with_grad_check(tf.distribute.get_strategy(), var, opt, 2)()
  assert var.numpy() == [3.]


@pytest.mark.parametrize("from_config", ["v1", "v2"])
@pytest.mark.parametrize("get_config", ["v1", "v2", "tf2_3"])
def test_get_config_fixed(get_config, from_config):
  opt = _from_config(from_config, _config_from(get_config, dynamic=False))
  assert _value(opt.lr) == 2.
  assert _value(opt.inner_optimizer.learning_rate) == 2.
  assert _value(opt.momentum) == 0.5
  assert _value(opt.loss_scale) == 2.
  assert opt.initial_scale == 2.
  assert opt.dynamic_growth_steps is None
  assert opt.dynamic_counter is None
  assert not opt.dynamic
  _check_usable(opt)


@pytest.mark.parametrize("from_config", ["v1", "v2"])
@pytest.mark.parametrize("get_config", ["v1", "v2", "tf2_3"])
def test_get_config_dynamic(get_config, from_config):
  opt = _from_config(from_config, _config_from(get_config, dynamic=True))
  assert _value(opt.lr) == 2.
  assert _value(opt.inner_optimizer.learning_rate) == 2.
  assert _value(opt.momentum) == 0.5
  assert _value(opt.loss_scale) == 2.
  assert opt.initial_scale == 2.
  assert opt.dynamic_growth_steps == 3.
  assert opt.dynamic
  _check_usable(opt)
  assert _value(opt.dynamic_counter) == 1


def test_from_config_with_invalid_multiplier():
  config = {
      "optimizer": lso_cases.SGD_CONFIG_TF23,
      "loss_scale": {"class_name": "DynamicLossScale",
                     "config": {"initial_loss_scale": 2.0,
                                "increment_period": 3, "multiplier": 4.0}},
  }
  expected = ("Cannot deserialize LossScaleOptimizer with a DynamicLossScale "
              "whose multiplier is not 2. Got DynamicLossScale: "
              r"DynamicLossScale\(")
  with pytest.raises(ValueError, match=expected):
    tf.keras.mixed_precision.LossScaleOptimizer.from_config(config)
  # The experimental class follows TF 2.3.4, which took this config.
  opt = tf.keras.mixed_precision.experimental.LossScaleOptimizer.from_config(
      config)
  assert opt.loss_scale.multiplier == 4


@pytest.mark.parametrize("use_v1", [False, True], ids=["v2", "v1"])
def test_serialization_with_built_in_optimizer(use_v1):
  opt = _sgd(2., momentum=0.5)
  if use_v1:
    loss_scale = tf.mixed_precision.experimental.DynamicLossScale(
        initial_loss_scale=2., increment_period=3.)
    opt = _lso_v1(opt, loss_scale)
  else:
    opt = _lso(opt, initial_scale=2., dynamic_growth_steps=3.)
  opt = tf.keras.optimizers.deserialize(tf.keras.optimizers.serialize(opt))
  assert _value(opt.lr) == 2.
  assert _value(opt.inner_optimizer.momentum) == 0.5
  assert _value(opt.loss_scale) == 2.
  assert opt.dynamic_growth_steps == 3.
  assert opt.dynamic
  # Always the non-experimental class, whichever was serialized.
  assert type(opt) is tf.keras.mixed_precision.LossScaleOptimizer
  _check_usable(opt)
  assert _value(opt.dynamic_counter) == 1


def test_serialization_with_custom_optimizer():

  class MySGD(tf.keras.optimizers.SGD):

    def __init__(self, *args, **kwargs):
      super().__init__(*args, **kwargs)
      self.my_attribute = 123

  opt = _lso(MySGD(2., momentum=0.5), initial_scale=2., dynamic_growth_steps=3.)
  config = tf.keras.optimizers.serialize(opt)
  opt = tf.keras.optimizers.deserialize(config,
                                        custom_objects={"MySGD": MySGD})
  assert _value(opt.lr) == 2.
  assert _value(opt.inner_optimizer.momentum) == 0.5
  assert _value(opt.loss_scale) == 2.
  assert opt.dynamic_growth_steps == 3.
  assert opt.inner_optimizer.my_attribute == 123


def test_unsupported_strategy():
  lso_cases.unsupported_strategy(
      _sgd, "Loss scaling is not supported with the tf.distribute.Strategy: "
      "CentralStorageStrategy. Try using a different Strategy, e.g. a "
      "MirroredStrategy")


def test_invalid_args_with_fixed_loss_scale():
  opt = _sgd()
  with pytest.raises(ValueError, match='"initial_scale" must be specified if '
                     '"dynamic" is False'):
    _lso(opt, dynamic=False)
  with pytest.raises(ValueError, match='"dynamic_growth_steps" must be None '
                     'if "dynamic" is False, but got: 2'):
    _lso(opt, dynamic=False, initial_scale=1, dynamic_growth_steps=2)


def test_dynamic_must_be_bool():
  with pytest.raises(TypeError, match='"dynamic" argument to '
                     "LossScaleOptimizer.__init__ must be a bool, but got: "
                     "'dynamic'"):
    _lso(_sgd(), "dynamic")
