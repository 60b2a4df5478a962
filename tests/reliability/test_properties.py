"""Property tests: the loss scalers and both optimizers against the oracle.

Random sequences of steps are replayed through `DynamicLossScaleState`,
`DynamicLossScale`, our Keras `LossScaleOptimizer` and our v1
`MixedPrecisionLossScaleOptimizer`, and through the pure-Python oracle
`reference_model.ReferenceDynamicScale`. Every step has four gradients (float32
and float16, dense and `tf.IndexedSlices`), each finite, +inf, -inf or NaN,
plus a variable that never gets a gradient (None). At every step:

* scale and counter equal the oracle's, bit for bit;
* the apply/skip verdict equals the oracle's;
* the optimizers' variables, slots and step counters equal those of a bare
  twin optimizer that applies the same unscaled gradients exactly on the
  steps the oracle applies (and otherwise only does what a skip does).

Affordability: one `tf.function` replays a whole batch of sequences in a
`tf.range` loop over per-step tensors; sequence boundaries reset all state
inside the loop, so one call checks several sequences and one trace serves
every example with the same (baked-in) growth period and multiplier.
Sequences are runs of repeated steps, so some run long enough to reach the
floor of 1 and the largest finite float32 power (explicit examples make sure
both are always exercised).
"""

import functools
import warnings

from hypothesis import example
from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st
import keras
import numpy as np
import pytest
import tensorflow as tf

import tf_mixed_precision_compat as mp
from tf_mixed_precision_compat.loss_scale import dynamic_state
from tests.loss_scale import reference_model

pytestmark = pytest.mark.filterwarnings(
    "ignore:Gradients do not exist:UserWarning")

# (dtype, sparse) of the four gradient positions; a fifth variable never gets
# a gradient.
POSITIONS = (("float32", False), ("float16", False), ("float32", True),
             ("float16", True))
_BAD = {"inf": np.inf, "-inf": -np.inf, "nan": np.nan}
# (growth period, multiplier) pairs for the traced tests: every period and
# every multiplier occurs (one trace each keeps the suite fast); the eager tests
# and tests/loss_scale/test_properties.py draw arbitrary multipliers.
COMBOS = ((1, 2.), (2, 4.), (3, 2.5), (4, 3.), (5, 2.), (1, 4.), (2, 3.))

initial_scales = (st.integers(0, 24).map(lambda e: float(2**e)) |
                  st.floats(1., 2.**24, allow_nan=False, width=32))


@st.composite
def steps(draw):
  """One step: the kind and finite value of each gradient position."""
  if draw(st.integers(0, 9)) < 6:
    kinds = ("finite",) * len(POSITIONS)
  else:
    kinds = tuple(
        draw(
            st.lists(
                st.sampled_from(("finite", "inf", "-inf", "nan")),
                min_size=len(POSITIONS),
                max_size=len(POSITIONS))))
  values = draw(
      st.lists(
          st.floats(-4., 4., width=16),
          min_size=len(POSITIONS),
          max_size=len(POSITIONS)))
  return kinds, tuple(values)


@st.composite
def sequences(draw, max_runs=6):
  """(initial_scale, [step, ...]): runs of a repeated step."""
  out = []
  for _ in range(draw(st.integers(1, max_runs))):
    step = draw(steps())
    repeat = (
        draw(st.integers(1, 3))
        if draw(st.integers(0, 9)) else draw(st.integers(20, 70)))
    out.extend([step] * repeat)
  return draw(initial_scales), out


def _finite(step):
  return all(k == "finite" for k in step[0])


def _oracle(initial, seq, period, multiplier, graph=False):
  model = reference_model.ReferenceDynamicScale(
      scale=np.float32(initial), growth_steps=period, multiplier=multiplier,
      reciprocal_shrink=graph)
  return model.run(_finite(s) for s in seq)


class Batch:
  """Sequences packed as per-step arrays, with the oracle's trajectories."""

  def __init__(self, seqs, period, multiplier, graph=False):
    rows, reset, init, expected = [], [], [], []
    for initial, seq in seqs:
      ref = _oracle(initial, seq, period, multiplier, graph)
      for i, (kinds, values) in enumerate(seq):
        rows.append([
            v if k == "finite" else _BAD[k] for k, v in zip(kinds, values)
        ])
        reset.append(i == 0)
        init.append(initial)
        expected.append(ref[i])
    self.values = tf.constant(np.array(rows, np.float32))
    self.reset = tf.constant(reset)
    self.init = tf.constant(np.array(init, np.float32))
    self.expected = expected
    self.expected_apply = tf.constant([e[0] for e in expected])

  def check(self, applied, scales, counters):
    got = list(
        zip(
            np.asarray(applied).tolist(),
            np.asarray(scales).tolist(),
            np.asarray(counters).tolist()))
    assert got == self.expected


# Per-step inputs of the traced runners; a fixed signature keeps batches of
# any length on one trace.
_SIGNATURE = (tf.TensorSpec([None, len(POSITIONS)], tf.float32),
              tf.TensorSpec([None], tf.bool), tf.TensorSpec([None], tf.float32),
              tf.TensorSpec([None], tf.bool))


def _gradients(row):
  """The step's four gradients from a [4] float32 row (dense or sparse)."""
  grads = []
  for j, (dtype, sparse) in enumerate(POSITIONS):
    # Two different elements, so a sparse update to the wrong index shows.
    g = tf.cast(row[j] * tf.constant([1., -0.5]), dtype)
    if sparse:
      g = tf.IndexedSlices(g, tf.constant([1, 0]), tf.constant([2]))
    grads.append(g)
  return grads + [None]


def _make_variables():
  return [
      tf.Variable(tf.cast([1., -2.], dtype), name=f"w{j}")
      for j, (dtype, _) in enumerate(POSITIONS)
  ] + [tf.Variable([3., 4.], name="unused")]


def _flat(variables):
  return tf.concat(
      [tf.reshape(tf.cast(v, tf.float64), [-1]) for v in variables], axis=0)


def _reset_all(reset, variables, snapshot):
  for v, v0 in zip(variables, snapshot):
    v.assign(tf.where(reset, tf.constant(v0), v))


def _snapshot(variables):
  return [v.numpy() for v in variables]


def _assert_skips_change_nothing(batch, states, ignore=()):
  """Skipped steps leave every variable but `ignore` (columns) as before."""
  states = np.asarray(states)
  keep = np.ones(states.shape[1], bool)
  keep[list(ignore)] = False
  reset = batch.reset.numpy()
  for i, (applied, _, _) in enumerate(batch.expected):
    if not applied and i and not reset[i]:
      np.testing.assert_array_equal(states[i, keep], states[i - 1, keep])


# ---------------------------------------------------------------------------
# The loss scale states: DynamicLossScaleState and DynamicLossScale.


def _make_states(period, multiplier):
  """Both dynamic loss scales, as (object, scale variable, counter variable)."""
  state = dynamic_state.DynamicLossScaleState(
      1., growth_steps=period, multiplier=multiplier)
  ls = mp.DynamicLossScale(1., increment_period=period, multiplier=multiplier)
  return [(state, state.current_loss_scale, state.counter),
          (ls, ls._current_loss_scale, ls._num_good_steps)]  # pylint: disable=protected-access


@functools.lru_cache(maxsize=None)
def _state_runner(period, multiplier):
  states = _make_states(period, multiplier)

  @tf.function(input_signature=_SIGNATURE[:3])
  def run(values, reset, init):
    n = tf.shape(values)[0]
    out = [
        tf.TensorArray(d, size=n)
        for _ in states
        for d in (tf.bool, tf.float32, tf.int64)
    ]
    for i in tf.range(n):
      grads = _gradients(values[i])
      results = []
      for state, scale, counter in states:
        scale.assign(tf.where(reset[i], init[i], scale))
        counter.assign(tf.where(reset[i], tf.constant(0, tf.int64), counter))
        _, ok = state.update(grads)
        results += [ok, scale.read_value(), counter.read_value()]
      # Reassigned whole: autograph carries only rebound names through loops.
      out = [ta.write(i, r) for ta, r in zip(out, results)]
    return [ta.stack() for ta in out]

  return run


@settings(max_examples=500, deadline=None)
@given(
    combo=st.sampled_from(COMBOS),
    seqs=st.lists(sequences(), min_size=1, max_size=5))
@example(combo=(1, 4.), seqs=[(2.**24, [(("finite",) * 4, (1.,) * 4)] * 60)])
@example(combo=(2, 2.), seqs=[(2.**24, [(("nan",) * 4, (1.,) * 4)] * 30)])
def test_states_in_tf_function_match_oracle(combo, seqs):
  batch = Batch(seqs, *combo)
  out = [t.numpy() for t in _state_runner(*combo)(batch.values, batch.reset,
                                                  batch.init)]
  batch.check(*out[:3])  # DynamicLossScaleState
  batch.check(*out[3:])  # DynamicLossScale


@settings(max_examples=40, deadline=None)
@given(
    period=st.integers(1, 5),
    multiplier=st.floats(2., 4., width=32),
    seq=sequences(max_runs=3).filter(lambda s: len(s[1]) <= 12))
def test_states_eager_match_oracle(period, multiplier, seq):
  initial, seq_steps = seq
  expected = _oracle(initial, seq_steps, period, multiplier)
  rows = Batch([seq], period, multiplier).values
  for state, scale, counter in _make_states(period, multiplier):
    scale.assign(initial)
    got = []
    for row in rows:
      _, ok = state.update(_gradients(row))
      got.append((bool(ok), float(scale.numpy()), int(counter.numpy())))
    assert got == expected


def test_explicit_examples_reach_floor_and_ceiling():
  ceiling = _oracle(2.**24, [(("finite",) * 4, (1.,) * 4)] * 60, 1, 4.)
  top = np.float32(ceiling[-1][1])
  with np.errstate(over="ignore"):
    assert np.isfinite(top) and np.isinf(top * np.float32(4.))
  assert ceiling[-1] == ceiling[-2]  # Growth stopped before inf.
  floor = _oracle(2.**24, [(("nan",) * 4, (1.,) * 4)] * 30, 2, 2.)
  assert floor[-1] == (False, 1.0, 0)


# ---------------------------------------------------------------------------
# The Keras LossScaleOptimizer (multiplier 2) against a bare twin.


def _keras_inner(name):
  if name == "sgd":
    return keras.optimizers.SGD(0.125, momentum=0.5)
  return keras.optimizers.Adam(0.01)


class _KerasPair:
  """A LossScaleOptimizer and a bare twin, on twin variables."""

  def __init__(self, inner_name, period):
    self.lso = mp.LossScaleOptimizer(
        _keras_inner(inner_name), initial_scale=1.,
        dynamic_growth_steps=period)
    self.twin = _keras_inner(inner_name)
    self.vars = _make_variables()
    self.twin_vars = _make_variables()
    self.lso.build(self.vars)
    self.twin.build(self.twin_vars)
    self.scale = self.lso._loss_scale.current_loss_scale  # pylint: disable=protected-access
    self.counter = self.lso.dynamic_counter
    self.lso_state = self.vars + list(self.lso.variables)
    self.twin_state = self.twin_vars + list(self.twin.variables)
    self.lso_snapshot = _snapshot(self.lso_state)
    self.twin_snapshot = _snapshot(self.twin_state)
    # The column of `iterations` in the flattened states: skips advance it.
    offset = sum(int(np.prod(v.shape)) for v in self.vars)
    self.iterations_column = offset + [
        v is self.lso.iterations for v in self.lso.variables
    ].index(True)

  def step(self, row, reset, init, expected_apply):
    _reset_all(reset, self.lso_state, self.lso_snapshot)
    _reset_all(reset, self.twin_state, self.twin_snapshot)
    self.scale.assign(tf.where(reset, init, self.scale))
    self.counter.assign(tf.where(reset, tf.constant(0, tf.int64),
                                 self.counter))
    scaled = _gradients(row)
    reciprocal = 1. / self.lso.loss_scale
    unscaled = self.lso.get_unscaled_gradients(scaled)
    self.lso.apply_gradients(zip(unscaled, self.vars))
    # The twin unscales on its own: TF 2.4 multiplied by the reciprocal.
    twin_grads = [
        None if g is None else (
            tf.IndexedSlices(g.values * tf.cast(reciprocal, g.dtype),
                             g.indices, g.dense_shape)
            if isinstance(g, tf.IndexedSlices) else
            g * tf.cast(reciprocal, g.dtype)) for g in scaled
    ]
    twin_pairs = list(zip(twin_grads, self.twin_vars))

    def apply():
      self.twin.apply_gradients(twin_pairs)
      return tf.constant(True)

    def skip():
      self.twin.iterations.assign_add(1)
      return tf.constant(False)

    if isinstance(expected_apply, bool):
      apply() if expected_apply else skip()  # pylint: disable=expression-not-assigned
    else:
      tf.cond(expected_apply, apply, skip)
    return (_flat(self.lso_state), _flat(self.twin_state),
            self.scale.read_value(), self.counter.read_value())


@functools.lru_cache(maxsize=None)
def _keras_runner(inner_name, period):
  pair = _KerasPair(inner_name, period)

  @tf.function(input_signature=_SIGNATURE)
  def run(values, reset, init, expected_apply):
    n = tf.shape(values)[0]
    out = [
        tf.TensorArray(d, size=n, element_shape=None)
        for d in (tf.float64, tf.float64, tf.float32, tf.int64)
    ]
    for i in tf.range(n):
      results = pair.step(values[i], reset[i], init[i], expected_apply[i])
      out = [ta.write(i, r) for ta, r in zip(out, results)]
    return [ta.stack() for ta in out]

  return pair, run


def _check_optimizer_run(batch, lso_states, twin_states, scales, counters,
                         iterations_column):
  lso_states, twin_states = np.asarray(lso_states), np.asarray(twin_states)
  assert not np.isnan(lso_states).any()
  np.testing.assert_array_equal(lso_states, twin_states)
  _assert_skips_change_nothing(batch, lso_states, ignore=[iterations_column])
  applied = [e[0] for e in batch.expected]
  batch.check(applied, scales, counters)


@settings(max_examples=150, deadline=None)
@given(
    inner=st.sampled_from(["sgd", "adam"]),
    period=st.integers(1, 5),
    seqs=st.lists(sequences(), min_size=1, max_size=4))
@example(inner="sgd", period=1, seqs=[(2.**24, [(("finite",) * 4,
                                                 (1.,) * 4)] * 110)])
@example(inner="adam", period=3, seqs=[(2.**20, [(("inf",) * 4,
                                                  (1.,) * 4)] * 25)])
def test_keras_optimizer_in_tf_function_matches_oracle_and_twin(
    inner, period, seqs):
  batch = Batch(seqs, period, 2.)
  pair, run = _keras_runner(inner, period)
  results = [
      t.numpy()
      for t in run(batch.values, batch.reset, batch.init, batch.expected_apply)
  ]
  _check_optimizer_run(batch, *results, pair.iterations_column)


@settings(max_examples=25, deadline=None)
@given(
    inner=st.sampled_from(["sgd", "adam"]),
    period=st.integers(1, 5),
    seq=sequences(max_runs=3).filter(lambda s: len(s[1]) <= 10))
def test_keras_optimizer_eager_matches_oracle_and_twin(inner, period, seq):
  batch = Batch([seq], period, 2.)
  pair = _KerasPair(inner, period)
  results = [
      pair.step(batch.values[i], batch.reset[i], batch.init[i],
                batch.expected[i][0]) for i in range(len(batch.expected))
  ]
  _check_optimizer_run(batch, *[np.stack(r) for r in zip(*results)],
                       pair.iterations_column)


# ---------------------------------------------------------------------------
# The v1 MixedPrecisionLossScaleOptimizer against a bare twin.


class _V1Pair:
  """A MixedPrecisionLossScaleOptimizer and a bare twin Momentum optimizer."""

  def __init__(self, period, multiplier):
    self.loss_scale = mp.DynamicLossScale(
        1., increment_period=period, multiplier=multiplier)
    self.opt = mp.MixedPrecisionLossScaleOptimizer(
        tf.compat.v1.train.MomentumOptimizer(0.125, 0.5), self.loss_scale)
    self.twin = tf.compat.v1.train.MomentumOptimizer(0.125, 0.5)
    self.vars, self.twin_vars = _make_variables(), _make_variables()
    self.step_var = tf.Variable(0, dtype=tf.int64)
    self.twin_step_var = tf.Variable(0, dtype=tf.int64)
    # Zero gradients create the Momentum slots and change nothing else.
    zeros = [tf.zeros_like(v) for v in self.vars[:-1]] + [None]
    self.opt._optimizer.apply_gradients(list(zip(zeros, self.vars)))  # pylint: disable=protected-access
    self.twin.apply_gradients(list(zip(zeros, self.twin_vars)))
    self.scale = self.loss_scale._current_loss_scale  # pylint: disable=protected-access
    self.counter = self.loss_scale._num_good_steps  # pylint: disable=protected-access
    inner = self.opt._optimizer  # pylint: disable=protected-access
    self.state = self.vars + [self.step_var] + inner.variables()
    self.twin_state = (self.twin_vars + [self.twin_step_var] +
                       self.twin.variables())
    assert len(self.state) == len(self.twin_state) == 10
    self.snapshot = _snapshot(self.state)
    self.twin_snapshot = _snapshot(self.twin_state)

  def step(self, row, reset, init, expected_apply):
    _reset_all(reset, self.state, self.snapshot)
    _reset_all(reset, self.twin_state, self.twin_snapshot)
    self.scale.assign(tf.where(reset, init, self.scale))
    self.counter.assign(tf.where(reset, tf.constant(0, tf.int64),
                                 self.counter))
    grads = _gradients(row)
    self.opt.apply_gradients(
        list(zip(grads, self.vars)), global_step=self.step_var)

    def apply():
      with tf.control_dependencies([
          self.twin.apply_gradients(
              list(zip(grads, self.twin_vars)),
              global_step=self.twin_step_var)
      ]):
        return tf.constant(True)

    if isinstance(expected_apply, bool):
      if expected_apply:
        apply()
    else:
      tf.cond(expected_apply, apply, lambda: tf.constant(False))
    return (_flat(self.state), _flat(self.twin_state),
            self.scale.read_value(), self.counter.read_value())


@functools.lru_cache(maxsize=None)
def _v1_runner(period, multiplier):
  pair = _V1Pair(period, multiplier)

  @tf.function(input_signature=_SIGNATURE)
  def run(values, reset, init, expected_apply):
    n = tf.shape(values)[0]
    out = [
        tf.TensorArray(d, size=n)
        for d in (tf.float64, tf.float64, tf.float32, tf.int64)
    ]
    for i in tf.range(n):
      results = pair.step(values[i], reset[i], init[i], expected_apply[i])
      out = [ta.write(i, r) for ta, r in zip(out, results)]
    return [ta.stack() for ta in out]

  return run


def _check_v1_run(batch, states, twin_states, scales, counters):
  states, twin_states = np.asarray(states), np.asarray(twin_states)
  assert not np.isnan(states).any()
  np.testing.assert_array_equal(states, twin_states)
  # v1 semantics: a skipped step changes nothing, global_step included.
  _assert_skips_change_nothing(batch, states)
  batch.check([e[0] for e in batch.expected], scales, counters)


@settings(max_examples=250, deadline=None)
@given(
    combo=st.sampled_from(COMBOS),
    seqs=st.lists(sequences(), min_size=1, max_size=4))
@example(combo=(1, 4.), seqs=[(2.**24, [(("finite",) * 4, (1.,) * 4)] * 60)])
def test_v1_optimizer_in_tf_function_matches_oracle_and_twin(combo, seqs):
  # The v1 optimizer builds TF 2.3/2.4's own graph: it shrinks as TF's did.
  batch = Batch(seqs, *combo, graph=True)
  run = _v1_runner(*combo)
  _check_v1_run(
      batch, *[
          t.numpy() for t in run(batch.values, batch.reset, batch.init,
                                 batch.expected_apply)
      ])


@settings(max_examples=25, deadline=None)
@given(
    period=st.integers(1, 5),
    multiplier=st.floats(2., 4., width=32),
    seq=sequences(max_runs=3).filter(lambda s: len(s[1]) <= 10))
def test_v1_optimizer_eager_matches_oracle_and_twin(period, multiplier, seq):
  batch = Batch([seq], period, multiplier)
  with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    pair = _V1Pair(period, multiplier)
  results = [
      pair.step(batch.values[i], batch.reset[i], batch.init[i],
                batch.expected[i][0]) for i in range(len(batch.expected))
  ]
  _check_v1_run(batch, *[np.stack(r) for r in zip(*results)])
