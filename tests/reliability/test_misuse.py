"""Misuse that once corrupted state silently, now refused before any change.

Each case calls the API the wrong way and checks the exception type (TF
2.4's where TF 2.4 raised, found by running it), a message naming the
argument, and that every piece of live state (weights, slots, iterations,
loss scale, counter) is exactly as before: eagerly, inside `tf.function`,
under a 2-replica MirroredStrategy and, for the v1 optimizer, in a
`tf.compat.v1` Session.
"""

import contextlib
import json
import os

import keras
import numpy as np
import pytest
import tensorflow as tf

import tf_mixed_precision_compat as mp
from tf_mixed_precision_compat import _device_check
from tf_mixed_precision_compat import _private_api
from tf_mixed_precision_compat.optimizers import _inner

MODES = ["eager", "function", "mirrored_eager", "mirrored_function"]


def _values(strategy, variables):
  """The bytes of every replica's copy of every variable."""
  out = []
  for v in variables:
    copies = (strategy.experimental_local_results(v)
              if strategy is not None else [v])
    out.extend(np.asarray(c.numpy()).tobytes() for c in copies)
  return out


class _KerasLive:
  """A trained Keras LossScaleOptimizer with float32 and float16 variables."""

  def __init__(self, strategy):
    self.strategy = strategy
    with strategy.scope() if strategy else contextlib.nullcontext():
      self.var = tf.Variable([[1., 2.], [3., 4.]], name="w32")
      self.var16 = tf.Variable([1., 2.], dtype=tf.float16, name="w16")
      self.lso = mp.LossScaleOptimizer(
          keras.optimizers.SGD(0.1, momentum=0.9), initial_scale=64.,
          dynamic_growth_steps=3)
    self.run(lambda: self.lso.apply_gradients([
        (tf.ones([2, 2]), self.var), (tf.ones([2], tf.float16), self.var16)]),
             "mirrored_eager" if strategy else "eager")
    assert int(self.lso.dynamic_counter.numpy()) == 1

  def run(self, fn, mode="eager"):
    """Runs `fn` (its result dropped) the way `mode` says."""
    def step():
      if mode.startswith("mirrored"):
        self.strategy.run(fn)
      else:
        fn()
    if mode.endswith("function"):
      step = tf.function(step)
    step()

  def snapshot(self):
    state = [self.var, self.var16] + list(self.lso.variables) + [
        self.lso._loss_scale.current_loss_scale, self.lso.dynamic_counter]  # pylint: disable=protected-access
    return _values(self.strategy, state), mp.global_policy().name


def _keras_live(mode, request):
  strategy = (request.getfixturevalue("mirrored_strategy")
              if mode.startswith("mirrored") else None)
  return _KerasLive(strategy)


def _graph(mode):
  return mode.endswith("function")


def _slices(values, indices, dtype=tf.float32):
  return tf.IndexedSlices(tf.constant(values, dtype), tf.constant(indices),
                          tf.constant([2, 2]))


# (id, step on a _KerasLive, exception type eagerly, in a graph, pattern)
KERAS_STEP_CASES = [
    # Finite in float64, inf once cast to the float32 variable.
    ("float64_overflows_float32", lambda l: l.lso.apply_gradients(
        [(tf.constant([[1e300, 1.], [1., 1.]], tf.float64), l.var)]),
     tf.errors.InvalidArgumentError, TypeError,
     '"grads_and_vars": the gradient for w32.* dtype float64.* float32'),
    # Finite in float32, inf once cast to the float16 variable.
    ("float32_overflows_float16", lambda l: l.lso.apply_gradients(
        [(tf.constant([1e6, 1.]), l.var16)]),
     tf.errors.InvalidArgumentError, TypeError,
     '"grads_and_vars": the gradient for w16.* dtype float32.* float16'),
    ("float64_small_into_float32", lambda l: l.lso.apply_gradients(
        [(tf.ones([2, 2], tf.float64), l.var)]),
     tf.errors.InvalidArgumentError, TypeError,
     '"grads_and_vars": the gradient for w32.* dtype float64'),
    ("sparse_index_out_of_range", lambda l: l.lso.apply_gradients(
        [(_slices([[1., 1.]], [5]), l.var)]),
     tf.errors.InvalidArgumentError, tf.errors.InvalidArgumentError,
     r"IndexedSlices gradient for w32.* indices outside \[0, 2\)"),
    ("sparse_index_negative", lambda l: l.lso.apply_gradients(
        [(_slices([[1., 1.]], [-1]), l.var)]),
     tf.errors.InvalidArgumentError, tf.errors.InvalidArgumentError,
     r"IndexedSlices gradient for w32.* indices outside \[0, 2\)"),
    ("sparse_values_wrong_row_shape", lambda l: l.lso.apply_gradients(
        [(_slices([[1., 1., 1.]], [0]), l.var)]), ValueError, ValueError,
     "IndexedSlices gradient for w32.* has values of shape"),
    ("sparse_values_more_than_indices", lambda l: l.lso.apply_gradients(
        [(_slices([[1., 1.], [2., 2.]], [0]), l.var)]),
     tf.errors.InvalidArgumentError, ValueError,
     "IndexedSlices gradient for w32.* has 2 rows of values but 1 indices"),
    ("apply_fewer_grads", lambda l: l.lso.apply(
        [tf.ones([2, 2])], [l.var, l.var16]), ValueError, ValueError,
     '"grads" has 1 gradients but there are 2 trainable_variables'),
    ("apply_more_grads", lambda l: l.lso.apply(
        [tf.ones([2, 2]), tf.ones([2], tf.float16), tf.ones([2])],
        [l.var, l.var16]), ValueError, ValueError,
     '"grads" has 3 gradients but there are 2 trainable_variables'),
    ("apply_fewer_grads_built_variables", lambda l: l.lso.apply(
        [tf.ones([2, 2])]), ValueError, ValueError,
     '"grads" has 1 gradients but there are 2 trainable_variables'),
]


@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("case_id,step,eager_error,graph_error,pattern",
                         KERAS_STEP_CASES, ids=[c[0] for c in KERAS_STEP_CASES])
def test_keras_bad_step_raises_and_changes_nothing(
    request, mode, case_id, step, eager_error, graph_error, pattern):
  del case_id
  live = _keras_live(mode, request)
  before = live.snapshot()
  expected = graph_error if _graph(mode) else eager_error
  with pytest.raises(expected, match=pattern):
    live.run(lambda: step(live), mode)
  assert live.snapshot() == before


@pytest.mark.parametrize("mode", MODES)
def test_keras_good_steps_still_apply_after_the_checks(request, mode):
  """The checks do not change what a valid step does (sparse and dense)."""
  live = _keras_live(mode, request)
  before = live.var.numpy().copy()
  live.run(lambda: live.lso.apply_gradients(
      [(_slices([[1., 1.]], [1]), live.var),
       (tf.ones([2], tf.float16), live.var16)]), mode)
  assert int(live.lso.dynamic_counter.numpy()) == 2
  # Momentum moves both rows; the slice's row further than the other.
  delta = before - live.var.numpy()
  assert (delta[1] > delta[0]).all() and (delta[0] > 0).all()


# --- v1 MixedPrecisionLossScaleOptimizer.


class _V1Live:
  """A trained v1 MixedPrecisionLossScaleOptimizer (dynamic loss scale)."""

  def __init__(self, strategy):
    self.strategy = strategy
    with strategy.scope() if strategy else contextlib.nullcontext():
      self.var = tf.Variable([[1., 2.], [3., 4.]], name="v1w")
      self.opt = mp.MixedPrecisionLossScaleOptimizer(
          tf.compat.v1.train.MomentumOptimizer(0.1, 0.9),
          mp.DynamicLossScale(8., increment_period=3))
    self.run(lambda: self.opt.apply_gradients([(tf.ones([2, 2]), self.var)]),
             "mirrored_eager" if strategy else "eager")

  run = _KerasLive.run

  def snapshot(self):
    return _values(self.strategy, self.opt.variables() + [self.var])


V1_STEP_CASES = [
    ("sparse_index_out_of_range", lambda l: l.opt.apply_gradients(
        [(_slices([[1., 1.]], [5]), l.var)]),
     tf.errors.InvalidArgumentError, tf.errors.InvalidArgumentError,
     r"IndexedSlices gradient for v1w.* indices outside \[0, 2\)"),
    ("sparse_index_negative", lambda l: l.opt.apply_gradients(
        [(_slices([[1., 1.]], [-2]), l.var)]),
     tf.errors.InvalidArgumentError, tf.errors.InvalidArgumentError,
     r"IndexedSlices gradient for v1w.* indices outside \[0, 2\)"),
    ("sparse_values_wrong_row_shape", lambda l: l.opt.apply_gradients(
        [(_slices([[1., 1., 1.]], [0]), l.var)]), ValueError, ValueError,
     "IndexedSlices gradient for v1w.* has values of shape"),
    ("sparse_values_more_than_indices", lambda l: l.opt.apply_gradients(
        [(_slices([[1., 1.], [2., 2.]], [0]), l.var)]),
     tf.errors.InvalidArgumentError, ValueError,
     "IndexedSlices gradient for v1w.* has 2 rows of values but 1 indices"),
]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("case_id,step,eager_error,graph_error,pattern",
                         V1_STEP_CASES, ids=[c[0] for c in V1_STEP_CASES])
def test_v1_bad_sparse_step_raises_and_changes_nothing(
    request, mode, case_id, step, eager_error, graph_error, pattern):
  del case_id
  strategy = (request.getfixturevalue("mirrored_strategy")
              if mode.startswith("mirrored") else None)
  live = _V1Live(strategy)
  before = live.snapshot()
  expected = graph_error if _graph(mode) else eager_error
  with pytest.raises(expected, match=pattern):
    live.run(lambda: step(live), mode)
  assert live.snapshot() == before


@pytest.mark.parametrize("index", [5, -1])
def test_v1_out_of_range_sparse_step_in_a_session_changes_nothing(index):
  with tf.Graph().as_default(), tf.compat.v1.Session() as sess:
    var = tf.compat.v1.Variable([[1., 2.], [3., 4.]], name="v1w")
    opt = mp.MixedPrecisionLossScaleOptimizer(
        tf.compat.v1.train.MomentumOptimizer(0.1, 0.9),
        mp.DynamicLossScale(8., increment_period=3))
    good = opt.apply_gradients([(tf.ones([2, 2]), var)])
    index_ph = tf.compat.v1.placeholder(tf.int32, [1])
    bad = opt.apply_gradients([(tf.IndexedSlices(
        tf.ones([1, 2]), index_ph, tf.constant([2, 2])), var)])
    sess.run(tf.compat.v1.global_variables_initializer())
    sess.run(good)
    state = opt.variables() + [var]
    before = [v.tobytes() for v in sess.run(state)]
    with pytest.raises(tf.errors.InvalidArgumentError,
                       match=r"v1w.* indices outside \[0, 2\)"):
      sess.run(bad, {index_ph: [index]})
    assert [v.tobytes() for v in sess.run(state)] == before
    row0, row1 = sess.run(var)
    sess.run(bad, {index_ph: [1]})  # The same op applies in-range slices.
    after = sess.run(var)
    assert after[0].tolist() == row0.tolist()
    assert (after[1] < row1).all()


# --- Initial loss scales finite in Python but inf in float32.

def _SGD():  # pylint: disable=invalid-name
  return keras.optimizers.SGD(0.1)


def _V1_SGD():  # pylint: disable=invalid-name
  return tf.compat.v1.train.GradientDescentOptimizer(0.1)

FLOAT32_INF_CASES = [
    ("lso_dynamic", lambda: mp.LossScaleOptimizer(_SGD(), initial_scale=1e39),
     '"initial_scale" must be finite as a float32'),
    ("lso_fixed", lambda: mp.LossScaleOptimizer(
        _SGD(), dynamic=False, initial_scale=1e39),
     '"initial_scale" must be finite as a float32'),
    ("lso_v1_number", lambda: mp.LossScaleOptimizerV1(_SGD(), 1e39),
     '"initial_scale" must be finite as a float32'),
    ("lso_v1_tf_fixed", lambda: mp.LossScaleOptimizerV1(
        _SGD(), tf.compat.v1.mixed_precision.FixedLossScale(1e39)),
     '"initial_scale" must be finite as a float32'),
    ("lso_v1_tf_dynamic", lambda: mp.LossScaleOptimizerV1(
        _SGD(), tf.compat.v1.mixed_precision.DynamicLossScale(1e39)),
     '"initial_scale" must be finite as a float32'),
    ("dynamic_loss_scale", lambda: mp.DynamicLossScale(1e39),
     '"initial_loss_scale" must be finite as a float32'),
    ("fixed_loss_scale", lambda: mp.FixedLossScale(1e39),
     '"loss_scale_value" must be finite as a float32'),
    ("fixed_loss_scale_int", lambda: mp.FixedLossScale(10**39),
     '"loss_scale_value" must be finite as a float32'),
    ("get_number", lambda: mp.get(1e39),
     '"loss_scale_value" must be finite as a float32'),
    ("v1_optimizer_number", lambda: mp.MixedPrecisionLossScaleOptimizer(
        _V1_SGD(), 1e39), '"loss_scale_value" must be finite as a float32'),
    ("v1_optimizer_tf_fixed", lambda: mp.MixedPrecisionLossScaleOptimizer(
        _V1_SGD(), tf.compat.v1.mixed_precision.FixedLossScale(1e39)),
     '"loss_scale_value" must be finite as a float32'),
    ("v1_optimizer_tf_dynamic", lambda: mp.MixedPrecisionLossScaleOptimizer(
        _V1_SGD(), tf.compat.v1.mixed_precision.DynamicLossScale(1e39)),
     '"initial_loss_scale" must be finite as a float32'),
    ("lso_from_config", lambda: mp.LossScaleOptimizer.from_config({
        "inner_optimizer": {"class_name": "SGD", "config": {}},
        "dynamic": True, "initial_scale": 1e39,
        "dynamic_growth_steps": 2000}),
     '"initial_scale" must be finite as a float32'),
    ("lso_from_tf23_config", lambda: mp.LossScaleOptimizer.from_config({
        "optimizer": {"class_name": "SGD", "config": {}},
        "loss_scale": {"class_name": "DynamicLossScale", "config": {
            "initial_loss_scale": 1e39, "increment_period": 2000,
            "multiplier": 2.}}}),
     '"initial_loss_scale" must be finite as a float32'),
    ("lso_v1_from_config", lambda: mp.LossScaleOptimizerV1.from_config({
        "inner_optimizer": {"class_name": "SGD", "config": {}},
        "dynamic": False, "initial_scale": 1e39,
        "dynamic_growth_steps": None}),
     '"initial_scale" must be finite as a float32'),
    ("policy_v1_loss_scale", lambda: mp.PolicyV1("mixed_float16", 1e39),
     '"loss_scale_value" must be finite as a float32'),
]


@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.parametrize("case_id,make,pattern", FLOAT32_INF_CASES,
                         ids=[c[0] for c in FLOAT32_INF_CASES])
def test_scale_inf_in_float32_refused(case_id, make, pattern):
  del case_id
  policy = mp.global_policy().name
  with pytest.raises(ValueError, match=pattern):
    make()
  assert mp.global_policy().name == policy


def test_largest_float32_scale_still_accepted():
  largest = float(np.finfo(np.float32).max)
  assert float(mp.FixedLossScale(largest)()) == largest
  opt = mp.LossScaleOptimizer(_SGD(), initial_scale=largest)
  assert float(opt.loss_scale) == largest


# --- Clipping under several replicas: TF 2.4 clipped the replicas' sum.


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("clip_type", ["clipnorm", "global_clipnorm",
                                       "clipvalue"])
def test_inner_clipping_applies_to_the_sum_of_replicas(request, mode,
                                                       clip_type):
  """TF 2.4's `testClipping`, whose numbers TF 2.4.4 gives on 2 replicas."""
  live = _KerasLive(request.getfixturevalue("mirrored_strategy")
                    if mode.startswith("mirrored") else None)
  strategy = live.strategy or tf.distribute.get_strategy()
  replicas = strategy.num_replicas_in_sync
  with strategy.scope():
    var = tf.Variable([5.])
    opt = mp.LossScaleOptimizer(
        keras.optimizers.SGD(2., **{clip_type: 2.}), initial_scale=2,
        dynamic_growth_steps=1)
  factor = [4.]

  def step():
    opt.minimize(lambda: var * factor[0] / replicas, var_list=[var])

  # The summed gradient, 4, is clipped to 2: 5 - 2 * 2.
  live.run(step, mode)
  assert var.numpy().tolist() == [1.]
  assert float(opt.loss_scale) == 4.
  setattr(opt, clip_type, 3.)
  live.run(step, mode)  # Clipped to 3: 1 - 3 * 2.
  assert var.numpy().tolist() == [-5.]
  assert float(opt.loss_scale) == 8.
  factor[0] = float("inf")
  live.run(step, mode)  # Skipped, not clipped.
  assert var.numpy().tolist() == [-5.]
  assert float(opt.loss_scale) == 4.
  for copy in strategy.experimental_local_results(var):
    assert copy.numpy().tolist() == [-5.]


# --- Graph-mode loss scale updates return what TF 2.4's did.

# TF 2.4.4, in a tf.compat.v1 Session (v1 and v2 control flow alike), for a
# DynamicLossScale(8., increment_period=2) fed these gradients one step at a
# time: tf.identity(update_op) and the loss scale after the step.
_TF24_UPDATE_VALUES = [(1., False, 8.), (1., True, 16.), (np.inf, False, 8.),
                       (1., False, 8.), (1., True, 16.)]


@pytest.mark.parametrize("make", [
    lambda: mp.DynamicLossScale(8., increment_period=2),
    lambda: mp.LossScaleOptimizer(_SGD(), initial_scale=8.,
                                  dynamic_growth_steps=2)._loss_scale,  # pylint: disable=protected-access
], ids=["DynamicLossScale", "LossScaleOptimizer_state"])
def test_graph_update_op_is_tf24s_bool_tensor(make):
  with tf.Graph().as_default(), tf.compat.v1.Session() as sess:
    loss_scale = make()
    grad = tf.compat.v1.placeholder(tf.float32, [])
    update_op, should_apply = loss_scale.update([grad])
    assert isinstance(update_op, tf.Tensor) and update_op.dtype == tf.bool
    identity = tf.identity(update_op)
    sess.run(tf.compat.v1.global_variables_initializer())
    for value, expected, scale in _TF24_UPDATE_VALUES:
      got, apply = sess.run([identity, should_apply], {grad: value})
      assert (bool(got), bool(apply)) == (expected, np.isfinite(value))
      assert sess.run(loss_scale()) == scale


def test_update_op_in_tf_function_is_a_bool_tensor():
  loss_scale = mp.DynamicLossScale(8., increment_period=2)

  @tf.function
  def step(grad):
    update_op, _ = loss_scale.update([grad])
    return tf.identity(update_op)

  results = [(bool(step(tf.constant(value))), float(loss_scale()))
             for value, _, _ in _TF24_UPDATE_VALUES]
  assert results == [(e, s) for _, e, s in _TF24_UPDATE_VALUES]


def test_fixed_update_op_in_graph_is_an_op_as_in_tf24():
  with tf.Graph().as_default(), tf.compat.v1.Session() as sess:
    update_op, should_apply = mp.FixedLossScale(4.).update([tf.constant(1.)])
    assert isinstance(update_op, tf.Operation) and should_apply is True
    assert sess.run(update_op) is None


# --- Wrapping a LossScaleOptimizer again.

_WRAPS = [
    ("lso_of_lso", lambda inner: mp.LossScaleOptimizer(inner)),
    ("v1_of_lso", lambda inner: mp.LossScaleOptimizerV1(inner, "dynamic")),
    ("lso_of_lso_fixed", lambda inner: mp.LossScaleOptimizer(
        inner, dynamic=False, initial_scale=2.)),
    ("v1_of_lso_number", lambda inner: mp.LossScaleOptimizerV1(inner, 4)),
]


@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.parametrize("inner_kind", ["LossScaleOptimizer",
                                        "LossScaleOptimizerV1", "keras3"])
@pytest.mark.parametrize("wrap_id,wrap", _WRAPS, ids=[w[0] for w in _WRAPS])
def test_wrapping_a_loss_scale_optimizer_raises_as_tf24(wrap_id, wrap,
                                                        inner_kind):
  del wrap_id
  var = tf.Variable([1., 2.])
  inner = {
      "LossScaleOptimizer": lambda: mp.LossScaleOptimizer(_SGD()),
      "LossScaleOptimizerV1": lambda: mp.LossScaleOptimizerV1(_SGD(), 8),
      "keras3": lambda: keras.optimizers.LossScaleOptimizer(_SGD()),
  }[inner_kind]()
  inner.apply_gradients([(tf.ones([2]), var)])
  before = _values(None, [var] + list(inner.variables))
  # TF 2.4.4 raised AttributeError (the wrapped optimizer had no `_hyper`);
  # the error is also this package's earlier ValueError.
  name = type(inner).__name__
  with pytest.raises(AttributeError,
                     match=f"'{name}' object has no attribute '_hyper'"):
    wrap(inner)
  with pytest.raises(ValueError,
                     match='"inner_optimizer" is already a LossScaleOptimizer'):
    wrap(inner)
  assert _values(None, [var] + list(inner.variables)) == before


# --- Fidelity: setting iterations, V1 configs, graph rewrite, device check.


@pytest.mark.parametrize("mode", ["eager", "mirrored"])
def test_setting_iterations_sets_the_inner_optimizers(request, mode):
  strategy = (request.getfixturevalue("mirrored_strategy")
              if mode == "mirrored" else tf.distribute.get_strategy())
  with strategy.scope():
    var = tf.Variable([1., 2.])
    opt = mp.LossScaleOptimizer(_SGD())
  opt.iterations = 7  # Allowed by TF 2.4.
  assert int(opt.iterations.numpy()) == 7
  assert int(opt.inner_optimizer.iterations.numpy()) == 7
  opt.iterations = np.int64(9)
  opt.iterations = tf.Variable(11, dtype=tf.int64)
  strategy.run(lambda: opt.apply_gradients([(tf.ones([2]), var)]))
  assert int(opt.inner_optimizer.iterations.numpy()) == 12


@pytest.mark.parametrize("bad", [7.5, -1, "7", [7], True, None])
def test_setting_iterations_to_nonsense_is_refused(bad):
  opt = mp.LossScaleOptimizer(_SGD())
  opt.iterations = 3
  with pytest.raises(ValueError, match='"iterations" must be set to a '
                     "non-negative integer scalar"):
    opt.iterations = bad
  assert int(opt.iterations.numpy()) == 3


def test_serialized_v1_deserializes_as_loss_scale_optimizer(installed):
  """As TF 2.4.4: Keras 3's format, and TF 2.4's config through tf.keras."""
  del installed
  v1 = mp.LossScaleOptimizerV1(keras.optimizers.SGD(0.5), 8)
  for serialized in (keras.optimizers.serialize(v1),
                     {"class_name": "LossScaleOptimizerV1",
                      "config": v1.get_config()}):
    again = keras.saving.deserialize_keras_object(serialized)
    assert type(again) is mp.LossScaleOptimizer
    assert (again.dynamic, again.initial_scale) == (False, 8.)
  # Its own from_config still builds a V1, as TF 2.4.4's did.
  assert type(mp.LossScaleOptimizerV1.from_config(
      v1.get_config())) is mp.LossScaleOptimizerV1


@contextlib.contextmanager
def _session_flag(value):
  old = _private_api.non_mixed_precision_session_created()
  _private_api.set_non_mixed_precision_session_created(value)
  try:
    yield
  finally:
    _private_api.set_non_mixed_precision_session_created(old)


_EXISTING_SESSIONS = (
    "You already have existing Sessions that do not use mixed precision. "
    "enable_mixed_precision_graph_rewrite() will not affect these Sessions.")


@pytest.mark.parametrize("enable", [
    mp.enable_mixed_precision_graph_rewrite,
    mp.enable_mixed_precision_graph_rewrite_v1])
def test_rewrite_warns_about_existing_sessions(tf_log, enable):
  with _session_flag(False):
    enable(tf.compat.v1.train.GradientDescentOptimizer(1.))
    mp.disable_mixed_precision_graph_rewrite_v1()
    assert _EXISTING_SESSIONS not in tf_log
    with tf.Graph().as_default():
      tf.compat.v1.Session().close()  # Made without the rewrite.
    enable(tf.compat.v1.train.GradientDescentOptimizer(1.))
    mp.disable_mixed_precision_graph_rewrite_v1()
    assert tf_log.count(_EXISTING_SESSIONS) == 1


def test_rewrite_accepts_tf_keras_legacy_optimizers():
  tf_keras = pytest.importorskip("tf_keras")
  for enable in (mp.enable_mixed_precision_graph_rewrite,
                 mp.enable_mixed_precision_graph_rewrite_v1):
    # One optimizer per wrapper: a second LossScaleOptimizer around the same
    # one is refused, as by TF 2.4.
    inner = tf_keras.optimizers.legacy.SGD(0.5)
    try:
      opt = enable(inner, loss_scale=4)
    finally:
      mp.disable_mixed_precision_graph_rewrite_v1()
    assert isinstance(opt, mp.LossScaleOptimizer)
    assert opt.inner_optimizer is inner and float(opt.loss_scale) == 4.


def _device_check_cases():
  path = os.path.join(os.path.dirname(__file__), "..", "fixtures", "policy",
                      "device_check_tf24.json")
  with open(path) as f:
    return sorted(json.load(f).items())


@pytest.mark.parametrize("case_id,case", _device_check_cases(),
                         ids=[c[0] for c in _device_check_cases()])
def test_device_check_messages_are_tf24s(case_id, case):
  del case_id
  assert _device_check.message(case["details"]) == (case["level"],
                                                    case["text"])


@pytest.mark.parametrize("make", [
    lambda: mp.set_global_policy("mixed_float16"),
    lambda: mp.set_policy("mixed_float16"),
    lambda: mp.Policy("mixed_float16"),
    lambda: keras.layers.Dense(1, dtype=mp.PolicyV1("mixed_float16")),
], ids=["set_global_policy", "set_policy", "Policy", "PolicyV1"])
def test_mixed_float16_logs_tf24s_device_check_once(tf_log, make):
  # This machine has no GPU: TF 2.4.4's warning, recorded in the fixture.
  expected = dict(_device_check_cases())["none"]["text"]
  try:
    make()
    mp.Policy("mixed_float16")
    mp.set_global_policy("mixed_float16")
  finally:
    mp.set_global_policy(None)
  assert tf_log.count(expected) == 1
  assert mp.global_policy().name == "float32"
  assert not any("compatibility check" in m for m in tf_log if m != expected)


def test_clipping_order_unavailable_warns_once(mirrored_strategy, monkeypatch,
                                               tf_log):
  """Without the Keras methods it relies on, the difference is logged."""
  with mirrored_strategy.scope():
    var = tf.Variable([5.])
    opt = mp.LossScaleOptimizer(keras.optimizers.SGD(2., clipnorm=2.),
                                initial_scale=2, dynamic_growth_steps=1)
  owner = next(c for c in type(opt.inner_optimizer).__mro__
               if "_all_reduce_sum_gradients" in vars(c))
  original = vars(owner)["_all_reduce_sum_gradients"]
  monkeypatch.setattr(_inner, "_warned_clip_order", [])
  monkeypatch.delattr(owner, "_all_reduce_sum_gradients")
  # Keras 3 still needs the method to run the step; only our lookup fails.
  monkeypatch.setattr(type(opt.inner_optimizer), "__getattr__",
                      lambda self, name: (
                          original.__get__(self) if name ==
                          "_all_reduce_sum_gradients" else
                          object.__getattribute__(self, name)), raising=False)
  for _ in range(2):
    mirrored_strategy.run(lambda: opt.minimize(lambda: var * 2., [var]))
  warnings = [m for m in tf_log if "clips each replica's gradients" in m]
  assert len(warnings) == 1
  assert var.numpy().tolist() == [5. - 2 * 4. - 2 * 4.]  # Keras 3's order.


_LIST, _OBJECT, _NONE = ("list", [1024]), ("object", object()), ("none", None)
_NON_NUMBER_CASES = [
    (f"{name}-{value_id}", make, value)
    for name, make, values in [
        ("DynamicLossScale", lambda v: mp.DynamicLossScale(v),
         [_LIST, _OBJECT, _NONE]),
        ("DynamicLossScale_kw",
         lambda v: mp.DynamicLossScale(initial_loss_scale=v), [_NONE]),
        # (None is these constructors' default, or means "missing".)
        ("LossScaleOptimizer",
         lambda v: mp.LossScaleOptimizer(_SGD(), initial_scale=v),
         [_LIST, _OBJECT]),
        ("LossScaleOptimizer_fixed", lambda v: mp.LossScaleOptimizer(
            _SGD(), dynamic=False, initial_scale=v), [_LIST, _OBJECT]),
    ]
    for value_id, value in values
]


@pytest.mark.parametrize("case_id,make,value", _NON_NUMBER_CASES,
                         ids=[c[0] for c in _NON_NUMBER_CASES])
def test_initial_scale_of_a_non_number_type_raises_tf24s_type_error(
    case_id, make, value):
  """TF 2.4 raised TypeError (from float()) for these; strings ValueError."""
  del case_id
  with pytest.raises(TypeError, match="must be a Python int or float"):
    make(value)


def test_out_of_range_slices_under_xla_leave_the_weights_alone():
  """XLA compiles the index assertion away (docs/reliability.md): rows drop."""
  var = tf.Variable([[1., 2.], [3., 4.]], name="w32")
  opt = mp.LossScaleOptimizer(keras.optimizers.SGD(0.1))

  @tf.function(jit_compile=True)
  def step(index):
    opt.apply_gradients([(tf.IndexedSlices(tf.ones([1, 2]), index,
                                           tf.constant([2, 2])), var)])

  step(tf.constant([1]))
  before = var.numpy().tobytes()
  step(tf.constant([5]))
  assert var.numpy().tobytes() == before
  assert float(opt.loss_scale) == 2.**15


@pytest.mark.parametrize("replicated", [False, True])
def test_fit_clips_the_sum_of_replicas(request, replicated):
  """Keras 3's fit (scale_loss, then apply) takes the same path."""
  strategy = (request.getfixturevalue("mirrored_strategy") if replicated
              else tf.distribute.get_strategy())
  with strategy.scope():
    model = keras.Sequential([
        keras.Input((1,)),
        keras.layers.Dense(1, use_bias=False,
                           kernel_initializer=keras.initializers.Constant(5.))
    ])
    model.compile(
        mp.LossScaleOptimizer(keras.optimizers.SGD(1., clipnorm=2.),
                              initial_scale=2, dynamic_growth_steps=1),
        loss=lambda y_true, y_pred: y_pred * 4.)
  model.fit(np.ones((2, 1), np.float32), np.zeros((2, 1), np.float32),
            batch_size=2, epochs=1, verbose=0, shuffle=False)
  # The batch's gradient, 4 (2 per replica), clipped to 2: 5 - 2.
  assert model.layers[0].kernel.numpy().ravel().tolist() == [3.]
  assert float(model.optimizer.loss_scale) == 4.
