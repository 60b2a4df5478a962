"""Bad input, table-driven: the right exception, a useful message, no change.

Every row calls the public API with one bad input and states the exception
type and a pattern of the message (which names the offending argument, or is
TF 2.3/2.4's message where TF raised). Before each row, a set of live objects
is created and trained a step (a Keras LossScaleOptimizer, a v1
MixedPrecisionLossScaleOptimizer, a DynamicLossScale, the global policy);
after the error, every one of their variables, loss scales, counters and the
global policy must be exactly as before: nothing half-changed.
"""

import math
import os

import keras
import numpy as np
import pytest
import tensorflow as tf

import tf_mixed_precision_compat as mp
from tf_mixed_precision_compat import policy as policy_module

INF, NAN = math.inf, math.nan


class Live:
  """Objects in use when the bad call happens, and a snapshot of them."""

  def __init__(self, tmp_path):
    self.var = tf.Variable([1., 2.], name="w")
    self.lso = mp.LossScaleOptimizer(
        keras.optimizers.SGD(0.1, momentum=0.9), initial_scale=64.,
        dynamic_growth_steps=3)
    self.lso.apply_gradients([(tf.constant([1., 1.]), self.var)])
    self.v1_var = tf.Variable([1., 2.], name="v1w")
    self.v1 = mp.MixedPrecisionLossScaleOptimizer(
        tf.compat.v1.train.MomentumOptimizer(0.1, 0.9),
        mp.DynamicLossScale(8., increment_period=3))
    self.v1.apply_gradients([(tf.constant([1., 1.]), self.v1_var)])
    self.loss_scale = mp.DynamicLossScale(16., increment_period=2)
    self.loss_scale.update([tf.constant(1.)])
    self.tmp_path = tmp_path
    self.ckpt = tf.train.Checkpoint(var=self.var, optimizer=self.lso)
    self.ckpt_path = self.ckpt.write(str(tmp_path / "good" / "ckpt"))
    # Moved on after saving, so that a (partial) restore would show.
    self.lso.apply_gradients([(tf.constant([1., 1.]), self.var)])
    self.lso.apply_gradients([(tf.constant([INF, 1.]), self.var)])

  def variables(self):
    return ([self.var, self.v1_var] + list(self.lso.variables) +
            self.v1.variables() + [
                self.lso._loss_scale.current_loss_scale,  # pylint: disable=protected-access
                self.lso.dynamic_counter,
                self.loss_scale._current_loss_scale,  # pylint: disable=protected-access
                self.loss_scale._num_good_steps,  # pylint: disable=protected-access
            ])

  def snapshot(self):
    return ([v.numpy().tobytes() for v in self.variables()],
            mp.global_policy().name)

  def corrupt_copy(self, how):
    """A copy of the good checkpoint, damaged `how`; returns its prefix."""
    prefix = str(self.tmp_path / how / "ckpt")
    os.makedirs(os.path.dirname(prefix))
    for suffix in (".index", ".data-00000-of-00001"):
      with open(self.ckpt_path + suffix, "rb") as f:
        data = f.read()
      if how == "truncated_data" and suffix.startswith(".data"):
        data = data[:len(data) // 2]
      if how == "garbage_index" and suffix == ".index":
        data = b"\x00garbage" * 8
      with open(prefix + suffix, "wb") as f:
        f.write(data)
    return prefix

  def wrong_shape_checkpoint(self):
    """A checkpoint whose loss scale is a vector: same keys, wrong shape."""
    fake_scale = tf.Module()
    fake_scale.current_loss_scale = tf.Variable([2., 2.])
    fake_scale.good_steps = tf.Variable(0, dtype=tf.int64)
    fake_opt = tf.Module()
    fake_opt.loss_scale = fake_scale
    return tf.train.Checkpoint(optimizer=fake_opt).write(
        str(self.tmp_path / "wrong_shape" / "ckpt"))


def _sgd():
  return keras.optimizers.SGD(0.1)


def _lso_config(live, **changes):
  config = dict(live.lso.get_config(), **changes)
  return {k: v for k, v in config.items() if v is not _DROP}


_DROP = object()
_V1_SGD = tf.compat.v1.train.GradientDescentOptimizer


def _restore(live, prefix):
  tf.train.Checkpoint(var=live.var, optimizer=live.lso).restore(
      prefix).assert_consumed()


# (id, call, exception type, message pattern)
CASES = [
    # --- loss_scale module: FixedLossScale / DynamicLossScale / get.
    ("fixed_str", lambda l: mp.FixedLossScale("4"), ValueError,
     "loss_scale_value must be a Python int or float"),
    ("fixed_bool", lambda l: mp.FixedLossScale(True), ValueError,
     "loss_scale_value must be a Python int or float"),
    ("fixed_tensor", lambda l: mp.FixedLossScale(tf.constant(2.)),
     ValueError, "loss_scale_value must be a Python int or float"),
    ("fixed_zero", lambda l: mp.FixedLossScale(0), ValueError,
     "loss_scale_value must be at least 1"),
    ("fixed_negative", lambda l: mp.FixedLossScale(-4.), ValueError,
     "loss_scale_value must be at least 1"),
    ("fixed_inf", lambda l: mp.FixedLossScale(INF), ValueError,
     "loss_scale_value must be finite"),
    ("fixed_nan", lambda l: mp.FixedLossScale(NAN), ValueError,
     "loss_scale_value must be finite"),
    ("dynamic_initial_zero", lambda l: mp.DynamicLossScale(0), ValueError,
     '"initial_loss_scale" must be finite and at least 1'),
    ("dynamic_initial_nan", lambda l: mp.DynamicLossScale(NAN), ValueError,
     '"initial_loss_scale" must be finite and at least 1'),
    ("dynamic_initial_inf", lambda l: mp.DynamicLossScale(INF), ValueError,
     '"initial_loss_scale" must be finite and at least 1'),
    ("dynamic_initial_str", lambda l: mp.DynamicLossScale("1024"), ValueError,
     '"initial_loss_scale" must be a Python int or float'),
    ("dynamic_period_zero",
     lambda l: mp.DynamicLossScale(increment_period=0), ValueError,
     '"increment_period" must be at least 1'),
    ("dynamic_period_negative",
     lambda l: mp.DynamicLossScale(increment_period=-3), ValueError,
     '"increment_period" must be at least 1'),
    ("dynamic_period_fraction",
     lambda l: mp.DynamicLossScale(increment_period=2.5), ValueError,
     '"increment_period" must be an integer'),
    ("dynamic_multiplier_one", lambda l: mp.DynamicLossScale(multiplier=1),
     ValueError, '"multiplier" must be a finite number greater than 1'),
    ("dynamic_multiplier_inf",
     lambda l: mp.DynamicLossScale(multiplier=INF), ValueError,
     '"multiplier" must be a finite number greater than 1'),
    ("get_unknown_string", lambda l: mp.get("dynamc"), ValueError,
     "Could not interpret loss scale identifier: dynamc"),
    ("get_bool", lambda l: mp.get(True), ValueError,
     "Could not interpret loss scale identifier: True"),
    ("serialize_string", lambda l: mp.serialize("dynamic"), ValueError,
     "loss_scale must be a LossScale"),
    ("deserialize_unknown_class",
     lambda l: mp.deserialize({"class_name": "Evil", "config": {}}),
     ValueError, "Unknown loss scale: Evil"),
    ("deserialize_missing_class_name",
     lambda l: mp.deserialize({"config": {}}), ValueError,
     "'class_name'"),
    ("deserialize_extra_key", lambda l: mp.deserialize({
        "class_name": "FixedLossScale", "config": {"loss_scale_value": 2},
        "bogus": 1}), ValueError, r"Unexpected keys \['bogus'\]"),
    ("deserialize_missing_config_key", lambda l: mp.deserialize({
        "class_name": "DynamicLossScale", "config": {"bogus": 1}}),
     ValueError, "Invalid config for loss scale DynamicLossScale.*bogus"),
    ("deserialize_nan_in_config", lambda l: mp.deserialize({
        "class_name": "FixedLossScale", "config": {"loss_scale_value": NAN}}),
     ValueError, "loss_scale_value must be finite"),
    # --- Keras LossScaleOptimizer construction.
    ("lso_string_optimizer", lambda l: mp.LossScaleOptimizer("sgd"),
     TypeError, '"inner_optimizer" must be an instance of'),
    ("lso_v1_optimizer", lambda l: mp.LossScaleOptimizer(_V1_SGD(0.1)),
     TypeError, '"inner_optimizer" must be an instance of'),
    ("lso_wraps_lso", lambda l: mp.LossScaleOptimizer(l.lso), ValueError,
     '"inner_optimizer" is already a LossScaleOptimizer'),
    ("lso_dynamic_string",
     lambda l: mp.LossScaleOptimizer(_sgd(), dynamic="True"), TypeError,
     '"dynamic" argument to LossScaleOptimizer.__init__ must be a bool'),
    ("lso_dynamic_int", lambda l: mp.LossScaleOptimizer(_sgd(), dynamic=1),
     TypeError, '"dynamic" argument .* must be a bool'),
    ("lso_initial_zero",
     lambda l: mp.LossScaleOptimizer(_sgd(), initial_scale=0), ValueError,
     '"initial_scale" must be finite and at least 1'),
    ("lso_initial_negative",
     lambda l: mp.LossScaleOptimizer(_sgd(), initial_scale=-8.), ValueError,
     '"initial_scale" must be finite and at least 1'),
    ("lso_initial_nan",
     lambda l: mp.LossScaleOptimizer(_sgd(), initial_scale=NAN), ValueError,
     '"initial_scale" must be finite and at least 1'),
    ("lso_initial_inf_fixed", lambda l: mp.LossScaleOptimizer(
        _sgd(), dynamic=False, initial_scale=INF), ValueError,
     '"initial_scale" must be finite and at least 1'),
    ("lso_initial_string",
     lambda l: mp.LossScaleOptimizer(_sgd(), initial_scale="big"),
     ValueError, '"initial_scale" must be a Python int or float'),
    ("lso_growth_zero",
     lambda l: mp.LossScaleOptimizer(_sgd(), dynamic_growth_steps=0),
     ValueError, '"dynamic_growth_steps" must be at least 1'),
    ("lso_growth_fraction",
     lambda l: mp.LossScaleOptimizer(_sgd(), dynamic_growth_steps=1.5),
     ValueError, '"dynamic_growth_steps" must be an integer'),
    ("lso_fixed_without_scale",
     lambda l: mp.LossScaleOptimizer(_sgd(), dynamic=False), ValueError,
     '"initial_scale" must be specified if "dynamic" is False'),
    ("lso_fixed_with_growth", lambda l: mp.LossScaleOptimizer(
        _sgd(), dynamic=False, initial_scale=2., dynamic_growth_steps=3),
     ValueError, '"dynamic_growth_steps" must be None if "dynamic" is False'),
    ("lso_v1_unknown_loss_scale",
     lambda l: mp.LossScaleOptimizerV1(_sgd(), loss_scale="dynamc"),
     ValueError, "Invalid value passed to loss_scale"),
    # (A DynamicLossScale whose multiplier is not 2 is accepted by the
    # experimental class, as by TF 2.3.4:
    # tests/optimizers/test_experimental_loss_scale_optimizer.py.)
    # --- Keras LossScaleOptimizer configs.
    ("lso_config_missing_key", lambda l: mp.LossScaleOptimizer.from_config(
        _lso_config(l, inner_optimizer=_DROP)), KeyError, "inner_optimizer"),
    ("lso_config_extra_key", lambda l: mp.LossScaleOptimizer.from_config(
        _lso_config(l, bogus=1)), TypeError,
     "unexpected keyword argument 'bogus'"),
    ("lso_config_unknown_optimizer",
     lambda l: mp.LossScaleOptimizer.from_config(_lso_config(
         l, inner_optimizer={"class_name": "NoSuchOpt", "config": {}})),
     ValueError, "Unknown optimizer .*'NoSuchOpt'"),
    ("lso_config_inner_not_dict",
     lambda l: mp.LossScaleOptimizer.from_config(_lso_config(
         l, inner_optimizer=[1])), ValueError,
     "inner_optimizer must be an optimizer or a serialized optimizer"),
    ("lso_config_growth_zero", lambda l: mp.LossScaleOptimizer.from_config(
        _lso_config(l, dynamic_growth_steps=0)), ValueError,
     '"dynamic_growth_steps" must be at least 1'),
    ("lso_config_dynamic_string",
     lambda l: mp.LossScaleOptimizer.from_config(_lso_config(
         l, dynamic="false")), TypeError, '"dynamic" argument'),
    ("lso_v1_config_missing_key",
     lambda l: mp.LossScaleOptimizerV1.from_config(
         {"optimizer": {"class_name": "SGD", "config": {}}}), KeyError,
     "dynamic"),
    # --- Keras LossScaleOptimizer steps (the live optimizer).
    ("lso_apply_empty", lambda l: l.lso.apply_gradients([]), ValueError,
     r"No gradients provided for any variable: \[\]"),
    ("lso_apply_all_none", lambda l: l.lso.apply_gradients([(None, l.var)]),
     ValueError, "No gradients provided for any variable: .*w"),
    ("lso_apply_wrong_shape", lambda l: l.lso.apply_gradients(
        [(tf.constant([1., 1., 1.]), l.var)]), ValueError,
     '"grads_and_vars": the gradient for w.* shape'),
    ("lso_apply_not_pairs",
     lambda l: l.lso.apply_gradients([tf.constant([1., 1.])]), TypeError,
     '"grads_and_vars" must be .* pairs'),
    ("lso_apply_tensor_as_variable", lambda l: l.lso.apply_gradients(
        [(tf.constant([1., 1.]), tf.constant([1., 2.]))]), TypeError,
     '"grads_and_vars" must pair each gradient with a tf.Variable'),
    ("lso_apply_unknown_variable", lambda l: l.lso.apply_gradients(
        [(tf.constant([1.]), tf.Variable([5.]))]), ValueError,
     "Unknown variable"),
    ("lso_minimize_empty_var_list",
     lambda l: l.lso.minimize(lambda: tf.reduce_sum(l.var), []), ValueError,
     r"No gradients provided for any variable: \[\]"),
    ("lso_minimize_noncallable_loss",
     lambda l: l.lso.minimize("loss", [l.var]), ValueError,
     "`tape` is required when a `Tensor` loss is passed"),
    ("lso_load_own_variables_missing",
     lambda l: l.lso.load_own_variables({"0": np.float32(3.)}), ValueError,
     "expected 2 saved values"),
    # --- v1 MixedPrecisionLossScaleOptimizer.
    ("v1_keras_optimizer", lambda l: mp.MixedPrecisionLossScaleOptimizer(
        _sgd(), "dynamic"), ValueError, '"opt" must be an instance of'),
    ("v1_loss_scale_none", lambda l: mp.MixedPrecisionLossScaleOptimizer(
        _V1_SGD(0.1), None), ValueError, "loss_scale cannot be None"),
    ("v1_loss_scale_zero", lambda l: mp.MixedPrecisionLossScaleOptimizer(
        _V1_SGD(0.1), 0), ValueError, "loss_scale_value must be at least 1"),
    ("v1_loss_scale_string", lambda l: mp.MixedPrecisionLossScaleOptimizer(
        _V1_SGD(0.1), "dynamc"), ValueError,
     "Could not interpret loss scale identifier"),
    ("v1_apply_all_none",
     lambda l: l.v1.apply_gradients([(None, l.v1_var)]), ValueError,
     "No gradients provided for any variable"),
    ("v1_apply_wrong_shape", lambda l: l.v1.apply_gradients(
        [(tf.constant([1., 1., 1.]), l.v1_var)]), ValueError,
     '"grads_and_vars": the gradient for v1w.* shape'),
    ("v1_apply_wrong_dtype", lambda l: l.v1.apply_gradients(
        [(tf.constant([1., 1.], tf.float64), l.v1_var)]), TypeError,
     '"grads_and_vars": the gradient for v1w.* dtype float64'),
    ("v1_tensor_loss_eagerly",
     lambda l: l.v1.minimize(tf.constant(1.), var_list=[l.v1_var]),
     RuntimeError, "`loss` passed to Optimizer.compute_gradients should be a "
     "function when eager execution is enabled"),
    # --- Policies.
    ("policy_unknown_name", lambda l: mp.Policy("mixed_float17"), ValueError,
     "Cannot convert value mixed_float17 to a mixed precision Policy"),
    ("policy_removed_name", lambda l: mp.Policy("infer_float32_vars"),
     ValueError, "infer_float32_vars"),
    ("policy_dtype_object", lambda l: mp.Policy(tf.float16), TypeError,
     "'name' must be a string, not a DType"),
    ("policy_int_name", lambda l: mp.Policy(16), TypeError,
     "'name' must be a string"),
    ("policy_v1_bad_loss_scale",
     lambda l: mp.PolicyV1("mixed_float16", loss_scale="dynamc"), ValueError,
     "Could not interpret loss scale identifier: dynamc"),
    ("set_global_policy_unknown", lambda l: mp.set_global_policy("bogus"),
     ValueError, "Cannot convert value bogus"),
    ("set_global_policy_int", lambda l: mp.set_global_policy(3), TypeError,
     "'name' must be a string"),
    ("policy_scope_unknown", lambda l: mp.policy_scope("bogus").__enter__(),
     ValueError, "Cannot convert value bogus"),
    ("policy_config_extra_key",
     lambda l: mp.Policy.from_config({"name": "float32", "bogus": 1}),
     TypeError, "unexpected keyword argument 'bogus'"),
    ("policy_config_missing_key", lambda l: mp.Policy.from_config({}),
     TypeError, "'name'"),
    ("policy_deserialize_unknown_class", lambda l: policy_module.deserialize(
        {"class_name": "Evil", "config": {"name": "float32"}}), ValueError,
     "Unknown dtype policy: Evil"),
    ("get_layer_policy_not_layer", lambda l: mp.get_layer_policy("layer"),
     ValueError, "get_policy can only be called on a layer"),
    # --- Graph rewrite.
    ("rewrite_string_optimizer",
     lambda l: mp.enable_mixed_precision_graph_rewrite("sgd"), ValueError,
     '"opt" must be an instance of'),
    ("rewrite_bad_loss_scale",
     lambda l: mp.enable_mixed_precision_graph_rewrite(
         _sgd(), loss_scale="dynamc"), ValueError,
     "Invalid value passed to loss_scale"),
    # --- Corrupted checkpoints, restored into the live optimizer.
    # TensorFlow's checkpoint reader raises these itself (TF 2.21 turns a
    # short read into IndexError); the point is that nothing is restored.
    ("checkpoint_truncated_data",
     lambda l: _restore(l, l.corrupt_copy("truncated_data")),
     (IndexError, tf.errors.OpError), "Read less bytes than requested"),
    ("checkpoint_garbage_index",
     lambda l: _restore(l, l.corrupt_copy("garbage_index")),
     tf.errors.OpError, "not an sstable"),
    ("checkpoint_loss_scale_wrong_shape",
     lambda l: _restore(l, l.wrong_shape_checkpoint()), ValueError,
     "current_loss_scale|shape"),
]


def test_table_has_enough_distinct_cases():
  assert len({c[0] for c in CASES}) == len(CASES) >= 40


@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.parametrize("case_id,call,exception,pattern", CASES,
                         ids=[c[0] for c in CASES])
def test_bad_input_raises_and_changes_nothing(tmp_path, case_id, call,
                                              exception, pattern):
  del case_id
  live = Live(tmp_path)
  before = live.snapshot()
  with pytest.raises(exception, match=pattern):
    call(live)
  assert live.snapshot() == before


GRAPH_CASES = [c for c in CASES if c[0].startswith(("lso_apply", "v1_apply"))]


@pytest.mark.parametrize("case_id,call,exception,pattern", GRAPH_CASES,
                         ids=[c[0] for c in GRAPH_CASES])
def test_bad_steps_in_tf_function_raise_and_change_nothing(
    tmp_path, case_id, call, exception, pattern):
  del case_id
  live = Live(tmp_path)
  before = live.snapshot()
  with pytest.raises(exception, match=pattern):
    tf.function(lambda: call(live))()
  assert live.snapshot() == before
