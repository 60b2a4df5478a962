"""Tests of `DynamicLossScaleState`, the TF 2.4 dynamic loss scale state."""

import numpy as np
import pytest
import tensorflow as tf

from tests import testing
from tf_mixed_precision_compat.loss_scale import dynamic_state

State = dynamic_state.DynamicLossScaleState

INF = testing.INF
NAN = testing.NAN


def _values(state):
  return float(state.current_loss_scale.numpy()), int(state.counter.numpy())


class TestConstruction:

  def test_properties_and_variables(self):
    state = State(4, 3, 2)
    assert state.initial_loss_scale == 4.0
    assert isinstance(state.initial_loss_scale, float)
    assert state.growth_steps == 3 and isinstance(state.growth_steps, int)
    assert state.multiplier == 2.0
    assert state.current_loss_scale.dtype == tf.float32
    assert state.counter.dtype == tf.int64
    assert _values(state) == (4.0, 0)
    assert state().dtype == tf.float32 and float(state()) == 4.0
    assert "current_loss_scale=4.0" in repr(state)

  @pytest.mark.parametrize("scale", [NAN, INF, -INF, 0.5, 0, -3, "8", True])
  def test_rejects_bad_scale(self, scale):
    with pytest.raises(ValueError, match="initial_loss_scale"):
      State(scale, 10, 2.)

  def test_rejects_none_scale_with_tf24s_type_error(self):
    with pytest.raises(TypeError, match="initial_loss_scale"):
      State(None, 10, 2.)

  @pytest.mark.parametrize("steps", [0, -1, 2.5, NAN, INF, "3", None, True])
  def test_rejects_bad_growth_steps(self, steps):
    with pytest.raises(ValueError, match="growth_steps"):
      State(8., steps, 2.)

  @pytest.mark.parametrize("multiplier", [1, 0.5, NAN, INF, "2"])
  def test_rejects_bad_multiplier(self, multiplier):
    with pytest.raises(ValueError, match="multiplier"):
      State(8., 3, multiplier)

  def test_accepts_numpy_and_integral_float(self):
    state = State(np.float32(16), 5.0, np.int64(2))
    assert (state.initial_loss_scale, state.growth_steps) == (16., 5)


def _run_sequence(state, steps, update):
  trace = []
  for finite in steps:
    grads = [tf.constant([1., 2.]), None,
             tf.constant([3.]) if finite else tf.constant([NAN])]
    applied = update(grads)
    trace.append((bool(applied),) + _values(state))
  return trace


# Scale 4, growth 2, multiplier 2: F=finite, N=non-finite.
_SEQUENCE = [True, True, False, False, False, False, True, True, True]
_EXPECTED = [(True, 4., 1), (True, 8., 0), (False, 4., 0), (False, 2., 0),
             (False, 1., 0), (False, 1., 0), (True, 1., 1), (True, 2., 0),
             (True, 2., 1)]


class TestUpdate:

  def test_eager(self):
    state = State(4., 2, 2.)

    def update(grads):
      op, applied = state.update(grads)
      assert op is None
      return applied

    assert _run_sequence(state, _SEQUENCE, update) == _EXPECTED

  def test_tf_function(self):
    state = State(4., 2, 2.)

    @tf.function
    def update(grads):
      return state.update(grads)[1]

    assert _run_sequence(state, _SEQUENCE, update) == _EXPECTED

  def test_indexed_slices_checked(self):
    state = State(4., 2, 2.)
    bad = tf.IndexedSlices(tf.constant([[INF]]), tf.constant([0]),
                           tf.constant([3, 1]))
    _, applied = state.update({"a": bad})
    assert not bool(applied)
    assert _values(state) == (2.0, 0)

  def test_growth_stops_at_float32_max(self):
    state = State(2.**127, 1, 2.)
    state.update([tf.constant(1.)])
    # Doubling would overflow to inf; the scale stays and the counter resets.
    assert _values(state) == (2.**127, 0)

  def test_mirrored_one_replica_overflows(self, mirrored_strategy):
    with mirrored_strategy.scope():
      state = State(8., 2, 2.)
    grads = testing.per_replica(mirrored_strategy, [[1.], [INF]])
    with mirrored_strategy.scope():
      _, applied = state.update([grads])
    assert not bool(applied)
    for component in mirrored_strategy.experimental_local_results(
        state.current_loss_scale):
      assert float(component) == 4.0
    good = testing.per_replica(mirrored_strategy, [[1.], [2.]])

    @tf.function
    def step():
      return state.update([good])[1]

    with mirrored_strategy.scope():
      assert bool(step())
    for v in (state.current_loss_scale, state.counter):
      values = [float(c) for c in
                mirrored_strategy.experimental_local_results(v)]
      assert len(set(values)) == 1
    assert _values(state) == (4.0, 1)

  def test_replica_context_raises(self, mirrored_strategy):
    with mirrored_strategy.scope():
      state = State(8., 2, 2.)

    def fn():
      state.update([tf.constant(1.)])

    with pytest.raises(RuntimeError, match="cross-replica"):
      mirrored_strategy.run(fn)

  def test_graph_mode_returns_bool_tensor(self):
    # As TF 2.4's conditional did: its value says whether growth was due.
    with tf.Graph().as_default():
      state = State(4., 2, 2.)
      op, applied = state.update([tf.constant(INF)])
      assert isinstance(op, tf.Tensor) and op.dtype == tf.bool
      with tf.compat.v1.Session() as sess:
        sess.run(tf.compat.v1.global_variables_initializer())
        assert not sess.run(applied)
        assert not sess.run(tf.identity(op))
        assert sess.run(state.current_loss_scale) == 2.0


class TestCheckpoint:

  def test_keys_and_exact_restore(self, tmp_path):
    state = State(2.**15, 2000, 2.)
    state.current_loss_scale.assign(1234.5)
    state.counter.assign(77)
    path = tf.train.Checkpoint(loss_scale=state).save(str(tmp_path / "ck"))
    names = {n for n, _ in tf.train.list_variables(path)}
    assert "loss_scale/current_loss_scale/.ATTRIBUTES/VARIABLE_VALUE" in names
    assert "loss_scale/good_steps/.ATTRIBUTES/VARIABLE_VALUE" in names
    restored = State(2.**15, 2000, 2.)
    tf.train.Checkpoint(loss_scale=restored).restore(path).assert_consumed()
    assert _values(restored) == (1234.5, 77)
