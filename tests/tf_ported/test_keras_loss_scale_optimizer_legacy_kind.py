"""TF 2.4's (and tf-keras's) Keras LossScaleOptimizer tests, legacy kind.

Original: tensorflow/python/keras/mixed_precision/loss_scale_optimizer_test.py
(TF r2.4), kept in tf-keras as tf_keras/src/mixed_precision/
loss_scale_optimizer_test.py (its OptimizerV2 cases). Here our
`tf.keras.mixed_precision.LossScaleOptimizer` (Keras 3 target, after
`install()`) wraps tf_keras's legacy optimizers
(`tf_keras.optimizers.legacy.*`), TF 2.4's own OptimizerV2, in every mode TF
2.4 ran them: a `tf.compat.v1` graph (where `minimize` returns the train op),
eagerly and in a `tf.function`, with the default strategy and a
MirroredStrategy over 2 logical CPUs. Inputs, expected values and assertions
are the original's; unlike the Keras 3 kind (test_keras_loss_scale_optimizer_
tf24.py) nothing is skipped or adapted: OptimizerV2 has `gradient_aggregator`,
variable hyperparameters, `_set_hyper`, `get_slot` and TF 2.4's one weight.

The step cases (`KIND_MODES`) also run with Keras 3 optimizers in a TF1
graph, which their own port (test_keras_loss_scale_optimizer_tf24.py) runs
eagerly and in a `tf.function` only.

tf-keras's cases for this kind are here too: the checkpoint also in a TF1
graph (restore ops run before and after the slots exist), config and
serialization round trips (the inner optimizer comes back as an
OptimizerV2), and the learning rate reached through an inner wrapper.
tf-keras cases of behaviour TF 2.4 did not have are not ported: the
"You forgot to call get_scaled_loss" warnings, the errors for wrapping one
optimizer twice, `LossScaleOptimizerV3` and `convert_to_legacy_optimizer`.

One case asserts TF 2.4.4's result where tf-keras's later test differs:
`test_custom_gradient_aggregator`. TF 2.4 checked the gradients for
Inf/NaN before the inner optimizer aggregated them (a NaN its aggregator
adds is applied; checked with TF 2.4.4), while tf-keras (TF >= 2.5)
aggregates first and skips the step.
"""

import gc
import os

import numpy as np
import pytest
import tensorflow as tf
import tf_keras

from tests import testing
from tests.tf_ported import harness
from tests.tf_ported import lso_cases

MODES = ("graph", "eager", "function")
STRATEGIES = harness.STRATEGIES


_lso = lso_cases.lso


def _sgd(*args, **kwargs):
  return tf_keras.optimizers.legacy.SGD(*args, **kwargs)


def _sgd_of(kind):
  return _sgd if kind == "legacy" else tf.keras.optimizers.SGD


# The legacy kind in every mode; Keras 3 optimizers in the TF1 graph mode
# their own port (test_keras_loss_scale_optimizer_tf24.py) lacks.
KIND_MODES = [("legacy", mode) for mode in MODES] + [("keras3", "graph")]


@pytest.mark.parametrize("strategy_name", STRATEGIES)
@pytest.mark.parametrize("kind,mode", KIND_MODES)
def test_fixed_loss_scale_applied_to_loss_with_minimize(runner_for, kind, mode,
                                                         strategy_name):
  runner = runner_for(mode, strategy_name)
  lso_cases.fixed_loss_scale_applied_to_loss_with_minimize(runner,
                                                           _sgd_of(kind))


def test_fixed_loss_scale_applied_to_loss_with_get_gradients():
  lso_cases.fixed_loss_scale_applied_to_loss_with_get_gradients(_sgd)


@pytest.mark.parametrize("strategy_name", STRATEGIES)
@pytest.mark.parametrize("kind,mode", KIND_MODES)
def test_dynamic_loss_scale(runner_for, kind, mode, strategy_name):
  runner = runner_for(mode, strategy_name)
  lso_cases.dynamic_loss_scale(runner, _sgd_of(kind))


@pytest.mark.parametrize("clip_type", ["clipnorm", "global_clipnorm",
                                       "clipvalue"])
@pytest.mark.parametrize("strategy_name", STRATEGIES)
@pytest.mark.parametrize("kind,mode", KIND_MODES)
def test_clipping(runner_for, kind, mode, strategy_name, clip_type):
  runner = runner_for(mode, strategy_name)
  lso_cases.clipping(runner, _sgd_of(kind), clip_type)


@pytest.mark.parametrize("strategy_name", STRATEGIES)
@pytest.mark.parametrize("kind,mode", KIND_MODES)
def test_dynamic_update(runner_for, kind, mode, strategy_name):
  runner = runner_for(mode, strategy_name)
  lso_cases.dynamic_update(runner, _sgd_of(kind))


@pytest.mark.parametrize("strategy_name", STRATEGIES)
@pytest.mark.parametrize("kind,mode", KIND_MODES)
def test_dynamic_loss_scale_with_float16_loss(runner_for, kind, mode,
                                              strategy_name):
  runner = runner_for(mode, strategy_name)
  lso_cases.dynamic_loss_scale_with_float16_loss(runner, _sgd_of(kind))


@pytest.mark.parametrize("kind,mode", KIND_MODES)
def test_nan_on_one_replica_only(runner_for, kind, mode):
  lso_cases.nan_on_one_replica_only(runner_for(mode, "mirrored"),
                                    _sgd_of(kind))


@pytest.mark.parametrize("mode", MODES)
def test_custom_gradient_aggregator(runner_for, mode):
  runner = runner_for(mode, "default")

  var = tf.Variable([1.0, 2.0])
  opt = _lso(_sgd(1.0, gradient_aggregator=lso_cases.nan_gradient_aggregator),
             initial_scale=2, dynamic_growth_steps=2)
  runner.run(lambda: opt.minimize(lambda: var * 2, var_list=[var]))
  # The aggregator's NaN is applied: TF 2.4.4 checked before aggregating.
  assert np.isnan(runner.value(var)).all()
  assert runner.value(opt.loss_scale) == 2.


@pytest.mark.parametrize("strategy_name", STRATEGIES)
@pytest.mark.parametrize("kind,mode", KIND_MODES)
def test_dynamic_loss_scale_with_slots(runner_for, kind, mode, strategy_name):
  runner = runner_for(mode, strategy_name)
  lso_cases.dynamic_loss_scale_with_slots(runner, _sgd_of(kind))


def test_iterations():
  lso_cases.iterations(_sgd)


@pytest.mark.parametrize("strategy_name", STRATEGIES)
@pytest.mark.parametrize("kind,mode", KIND_MODES)
def test_iterations_incremented(runner_for, kind, mode, strategy_name):
  runner = runner_for(mode, strategy_name)
  lso_cases.iterations_incremented(runner, _sgd_of(kind))


def test_weight_methods():
  var = tf.Variable([1.0])
  opt = _lso(_sgd(1.0), initial_scale=2., dynamic_growth_steps=1)
  opt.minimize(lambda: var * 2, [var])
  assert len(opt.weights) == 1  # The inner optimizer's iterations.
  assert opt.weights[0].numpy() == 1
  assert opt.get_weights()[0] == 1
  assert opt.variables()[0].numpy() == 1
  opt.set_weights([np.array(2.)])
  assert opt.variables()[0].numpy() == 2


def test_hyperparameters_exposed():
  opt = tf_keras.optimizers.legacy.Adam(learning_rate=1.0, beta_1=0.5,
                                        beta_2=0.9)
  lso = _lso(opt)
  assert isinstance(lso.beta_1, tf.Variable)
  assert lso.beta_1.numpy() == 0.5
  assert lso.lr.numpy() == 1.0
  assert lso.lr is lso.learning_rate
  lso.beta_1 = 0.25
  assert lso.beta_1.numpy() == 0.25
  assert opt.beta_1.numpy() == 0.25
  assert lso.beta_1 is opt.beta_1
  opt.beta_1 = 0.75
  assert lso.beta_1.numpy() == 0.75
  assert lso.beta_1 is opt.beta_1
  lso.lr = 2.0
  assert lso.lr.numpy() == 2.0
  assert opt.lr.numpy() == 2.0
  assert lso.lr is opt.lr

  # A hyperparameter named like an attribute of the wrapper is not reached.
  lso_cases.hyperparameter_named_like_an_attribute(
      tf_keras.optimizers.legacy.SGD)


@pytest.mark.parametrize("mode", MODES)
def test_apply_gradients_gets_unwrapped_tensors(runner_for, mode):
  seen = []

  class MyOptimizer(tf_keras.optimizers.legacy.SGD):

    def apply_gradients(self, grads_and_vars, name=None,
                        experimental_aggregate_gradients=True):
      grads_and_vars = list(grads_and_vars)
      for grad, _ in grads_and_vars:
        seen.append(type(grad))
        assert isinstance(grad, tf.Tensor), type(grad)
      return super().apply_gradients(grads_and_vars, name,
                                     experimental_aggregate_gradients)

  runner = runner_for(mode, "mirrored")
  var = tf.Variable([5.0])
  opt = _lso(MyOptimizer(learning_rate=1.0), dynamic=False, initial_scale=1)
  runner.run(lambda: opt.minimize(lambda: var * 2.0, [var]))
  assert seen
  # Each replica's gradient 2 is summed: 5 - 2 * 2.
  np.testing.assert_allclose(runner.value(var), [1.])


class _SGDWithExtraVariable(tf_keras.optimizers.legacy.SGD):
  """An SGD that tracks one more variable, saved with the optimizer."""

  def __init__(self, *args, **kwargs):
    super().__init__(*args, **kwargs)
    self.my_var = tf.Variable(0.)
    # OptimizerV2 is no AutoTrackable: TF 2.4's test tracked it likewise.
    self._track_trackable(self.my_var, "my_var")


@pytest.mark.parametrize("save_with_ls,restore_with_ls", [
    (True, True), (True, False), (False, True)],
                         ids=["save_and_restore", "save", "restore"])
@pytest.mark.parametrize("strategy_name", STRATEGIES)
def test_checkpoint(strategy_name, save_with_ls, restore_with_ls, tmp_path):
  # Restored before the first step: the momentum slot does not exist yet, and
  # must be assigned when the step creates it (a deferred slot restore).
  lso_cases.checkpoint(harness.make_strategy(strategy_name),
                       _SGDWithExtraVariable, save_with_ls, restore_with_ls,
                       tmp_path)


def test_checkpoint_in_graph_mode(tmp_path):
  # TF's graph case: restore ops run after initialization, before and after
  # the slots exist (default strategy only, as in TF).

  def build():
    inner = _SGDWithExtraVariable(1., momentum=1.)
    return inner, _lso(inner, initial_scale=1., dynamic_growth_steps=2.)

  with tf.Graph().as_default(), tf.compat.v1.Session() as sess:
    var = tf.Variable([2.0])
    inner_opt, opt = build()
    op = opt.minimize(lambda: var + 1., var_list=[var])
    sess.run(tf.compat.v1.global_variables_initializer())
    sess.run(op)
    sess.run(inner_opt.my_var.assign(1.))
    assert sess.run(opt.get_slot(var, "momentum")).item() == -1
    save_path = tf.train.Checkpoint(optimizer=opt, var=var).save(
        os.path.join(tmp_path, "ckpt"))

  with tf.Graph().as_default(), tf.compat.v1.Session() as sess:
    var = tf.Variable([2.0])
    inner_opt, opt = build()
    checkpoint = tf.train.Checkpoint(optimizer=opt, var=var)
    status = checkpoint.restore(save_path)
    status.assert_existing_objects_matched()
    op = opt.minimize(lambda: var + 1., var_list=[var])
    sess.run(tf.compat.v1.global_variables_initializer())
    status.run_restore_ops(sess)
    sess.run(op)
    assert sess.run(var) == -1
    slot = opt.get_slot(var, "momentum")
    assert sess.run(slot).item() == -2
    assert sess.run(opt.iterations) == 2
    assert sess.run(inner_opt.my_var) == 1
    assert sess.run(opt.loss_scale) == 2.  # Grew after 2 finite steps.

    status = checkpoint.restore(save_path)
    status.assert_consumed()
    status.run_restore_ops(sess)
    assert sess.run(var) == 1
    assert sess.run(slot).item() == -1


@pytest.mark.parametrize("dynamic", [False, True], ids=["fixed", "dynamic"])
def test_get_config_round_trip_keeps_the_kind(dynamic):
  kwargs = (dict(initial_scale=2, dynamic_growth_steps=3) if dynamic else
            dict(dynamic=False, initial_scale=2))
  opt = _lso(_sgd(2.0, momentum=0.5), **kwargs)
  opt = tf.keras.mixed_precision.LossScaleOptimizer.from_config(
      opt.get_config())
  assert type(opt.inner_optimizer) is tf_keras.optimizers.legacy.SGD
  assert opt.learning_rate.numpy() == 2.
  assert opt.inner_optimizer.momentum.numpy() == 0.5
  assert opt.loss_scale.numpy() == 2.
  assert opt.initial_scale == 2.
  assert opt.dynamic is dynamic
  assert opt.dynamic_growth_steps == (3 if dynamic else None)
  var = tf.Variable([5.0])
  harness.minimize_with_grad_check(tf.distribute.get_strategy(), var, opt, 2)()
  assert var.numpy() == [3.]
  if dynamic:
    assert opt.dynamic_counter.numpy() == 1
  else:
    assert opt.dynamic_counter is None


def test_serialization_with_built_in_optimizer():
  opt = _lso(_sgd(2.0, momentum=0.5), initial_scale=2.,
             dynamic_growth_steps=3.)
  opt = tf.keras.optimizers.deserialize(tf.keras.optimizers.serialize(opt))
  assert type(opt) is tf.keras.mixed_precision.LossScaleOptimizer
  assert type(opt.inner_optimizer) is tf_keras.optimizers.legacy.SGD
  assert opt.learning_rate.numpy() == 2.
  assert opt.inner_optimizer.momentum.numpy() == 0.5
  assert opt.loss_scale.numpy() == 2.
  assert opt.dynamic_growth_steps == 3.
  var = tf.Variable([5.0])
  harness.minimize_with_grad_check(tf.distribute.get_strategy(), var, opt, 2)()
  assert var.numpy() == [3.]
  assert opt.dynamic_counter.numpy() == 1


def test_serialization_with_custom_optimizer():

  class MySGD(tf_keras.optimizers.legacy.SGD):

    def __init__(self, *args, **kwargs):
      super().__init__(*args, **kwargs)
      self.my_attribute = 123

  opt = _lso(MySGD(2., momentum=0.5), initial_scale=2., dynamic_growth_steps=3.)
  opt = tf.keras.optimizers.deserialize(tf.keras.optimizers.serialize(opt),
                                        custom_objects={"MySGD": MySGD})
  assert type(opt.inner_optimizer) is MySGD
  assert opt.learning_rate.numpy() == 2.
  assert opt.inner_optimizer.momentum.numpy() == 0.5
  assert opt.loss_scale.numpy() == 2.
  assert opt.dynamic_growth_steps == 3.
  assert opt.inner_optimizer.my_attribute == 123


def test_loss_scale_delegation_with_wrapper():
  # The learning rate is reached through an inner optimizer that itself
  # wraps another one.

  class MyOptimizer(tf_keras.optimizers.legacy.Optimizer):

    def __init__(self):
      super().__init__("MyOptimizer")
      self.inner_optimizer = _sgd(learning_rate=1.0)

    @property
    def learning_rate(self):
      return self.inner_optimizer.learning_rate

    @learning_rate.setter
    def learning_rate(self, value):
      self.inner_optimizer.learning_rate = value

    def get_config(self):
      return {}

  opt = _lso(MyOptimizer())
  assert opt.learning_rate.numpy() == 1.0
  opt.learning_rate = 2.0
  assert opt.learning_rate.numpy() == 2.0
  assert opt.inner_optimizer.inner_optimizer.learning_rate.numpy() == 2.0


def test_attributes_and_dir():
  opt = _sgd()
  lso = _lso(opt, dynamic=False, initial_scale=2.)
  assert not lso.dynamic
  assert lso.dynamic_counter is None
  assert lso.dynamic_growth_steps is None
  lso_cases.arbitrary_attributes_not_exposed(lso, opt)
  names = dir(_lso(_sgd()))
  assert {"learning_rate", "lr", "minimize", "loss_scale"} <= set(names)
  assert "nesterov" not in names
  default = _lso(_sgd())
  assert default.initial_scale == 2**15
  assert default.dynamic_growth_steps == 2000
  assert default.loss_scale.numpy() == 2**15


def test_scaled_loss_and_unscaled_gradients():
  opt = _lso(_sgd(), dynamic=False, initial_scale=2.)
  for dtype in ("float32", "float16"):
    loss = tf.convert_to_tensor(5., dtype=dtype)
    assert opt.get_scaled_loss(loss).numpy() == 10.
    assert opt.get_scaled_loss(lambda l=loss: l)().numpy() == 10.
  scaled = [tf.constant(3.), None, tf.constant(-4., dtype="float16")]
  assert [g if g is None else g.numpy()
          for g in opt.get_unscaled_gradients(scaled)] == [1.5, None, -2.]
  sparse = tf.IndexedSlices(
      tf.constant([[4., 2.], [8., 5.]]), tf.constant([1, 3], dtype="int32"),
      dense_shape=tf.constant([5, 2], dtype="int32"))
  grad = opt.get_unscaled_gradients([sparse])[0]
  assert isinstance(grad, tf.IndexedSlices)
  np.testing.assert_array_equal(grad.values.numpy(), [[2., 1.], [4., 2.5]])


def test_argument_errors_and_unsupported_strategy():
  with pytest.raises(ValueError, match='"initial_scale" must be specified'):
    _lso(_sgd(), dynamic=False)
  with pytest.raises(ValueError, match='"dynamic_growth_steps" must be None '
                     'if "dynamic" is False, but got: 2'):
    _lso(_sgd(), dynamic=False, initial_scale=1, dynamic_growth_steps=2)
  with pytest.raises(TypeError, match='"dynamic" argument to '
                     "LossScaleOptimizer.__init__ must be a bool"):
    _lso(_sgd(), "dynamic")
  lso_cases.unsupported_strategy(
      _sgd, "Loss scaling is not supported with the tf.distribute.Strategy: "
      "CentralStorageStrategy")


@pytest.mark.parametrize("strategy_name", STRATEGIES)
def test_restore_before_first_step_leaves_nothing_behind(strategy_name,
                                                          tmp_path):
  # TF warns, when a restore's objects are garbage-collected, of checkpoint
  # values never assigned: the deferred slot must have been consumed.
  strategy = harness.make_strategy(strategy_name)
  loss = lambda: var / strategy.num_replicas_in_sync + 1.
  with strategy.scope():
    var = tf.Variable([2.0])
    opt = _lso(_sgd(1., momentum=1.), initial_scale=1.)
    strategy.run(lambda: opt.minimize(loss, var_list=[var]))
    save_path = tf.train.Checkpoint(optimizer=opt, var=var).save(
        os.path.join(tmp_path, "ckpt"))
    var = tf.Variable([2.0])
    opt = _lso(_sgd(1., momentum=1.), initial_scale=1.)
    status = tf.train.Checkpoint(optimizer=opt, var=var).restore(save_path)
    strategy.run(lambda: opt.minimize(loss, var_list=[var]))
    assert opt.get_slot(var, "momentum").numpy().item() == -2
  status.assert_consumed()
  with testing.capture_tf_log() as messages:
    del status
    gc.collect()
  assert not [m for m in messages if "could not be found" in m]
