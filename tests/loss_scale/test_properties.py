"""Property-based tests: every loss scaler agrees with the reference model.

Random gradient sequences (finite, inf, nan, None; float32 or float16; dense
or IndexedSlices) and random parameters are replayed through the real
implementation and through `reference_model.ReferenceDynamicScale`; scale,
counter and the apply/skip verdict must agree exactly at every step.

To afford thousands of sequences, the implementation runs a whole sequence
inside one `tf.function` (a `tf.range` loop), traced once per gradient
structure; the eager variant replays fewer, shorter sequences.
"""

import functools

from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st
import numpy as np
import tensorflow as tf

import tf_mixed_precision_compat as mp
from tf_mixed_precision_compat.loss_scale import _distribute
from tf_mixed_precision_compat.loss_scale import _scaling
from tests.loss_scale import reference_model

KINDS = ("finite", "inf", "nan", "none")
_VALUE = {"finite": 1.5, "inf": np.inf, "nan": np.nan}

params = st.fixed_dictionaries({
    "initial": st.integers(0, 24).map(lambda e: float(2**e)) | st.floats(
        1., 2.**24, allow_nan=False),
    "period": st.integers(1, 5),
    "multiplier": st.sampled_from([2., 3., 4.]) | st.floats(2., 4.),
})
N_GRADS = 3
step_kinds = st.lists(st.sampled_from(KINDS), min_size=N_GRADS,
                      max_size=N_GRADS)


def _grad_values(steps):
  """[num_steps, N_GRADS] float32 values and a None mask."""
  values = np.array([[_VALUE.get(k, 0.) for k in step] for step in steps],
                    np.float32).reshape(-1, N_GRADS)
  present = np.array([[k != "none" for k in step] for step in steps],
                     bool).reshape(-1, N_GRADS)
  return values, present


def _is_finite_step(step):
  return all(k in ("finite", "none") for k in step)


def _reference(p, steps):
  model = reference_model.ReferenceDynamicScale(
      scale=np.float32(p["initial"]), growth_steps=p["period"],
      multiplier=p["multiplier"])
  return model.run(_is_finite_step(s) for s in steps)


@functools.lru_cache(maxsize=None)
def _sequence_runner(dtype_name, sparse, none_mask):
  """A tf.function replaying a whole sequence; None positions are static."""
  dtype = tf.as_dtype(dtype_name)

  # Sequence lengths vary: a relaxed shape keeps it at one trace.
  @tf.function(reduce_retracing=True)
  def run(ls_scale, ls_counter, values, growth_steps, multiplier):
    # The loss scale's variables are passed in, so one trace serves every
    # example with this gradient structure.
    ls = _VariableBackedScale(ls_scale, ls_counter, growth_steps, multiplier)
    n = tf.shape(values)[0]
    applied = tf.TensorArray(tf.bool, size=n)
    scales = tf.TensorArray(tf.float32, size=n)
    counters = tf.TensorArray(tf.int64, size=n)
    for i in tf.range(n):
      grads = []
      for j, present in enumerate(none_mask[0]):
        if not present:
          grads.append(None)
          continue
        g = tf.cast(tf.fill([2], values[i, j]), dtype)
        if sparse:
          g = tf.IndexedSlices(g, tf.constant([0, 1]), tf.constant([2]))
        grads.append(g)
      ok = ls.update(grads)
      applied = applied.write(i, ok)
      scales = scales.write(i, ls_scale.read_value())
      counters = counters.write(i, ls_counter.read_value())
    return applied.stack(), scales.stack(), counters.stack()

  return run


class _VariableBackedScale:
  """Runs DynamicLossScale.update's arithmetic on given variables.

  Hypothesis draws the multiplier and period per example; a DynamicLossScale
  would bake them into the trace. This shim reuses the very functions
  DynamicLossScale.update calls, with the parameters as tensors.
  """

  def __init__(self, scale, counter, growth_steps, multiplier):
    self.scale, self.counter = scale, counter
    self.growth_steps, self.multiplier = growth_steps, multiplier

  def update(self, grads):
    ok = _distribute.all_finite(grads)
    new_scale, new_counter = _scaling.dynamic_update(
        self.scale, self.counter, ok, self.growth_steps, self.multiplier)
    self.scale.assign(new_scale)
    self.counter.assign(new_counter)
    return ok


@settings(max_examples=1500, deadline=None)
@given(p=params, steps=st.lists(step_kinds, min_size=1, max_size=30),
       dtype=st.sampled_from(["float32", "float16"]), sparse=st.booleans())
def test_dynamic_arithmetic_in_tf_function_matches_reference(
    p, steps, dtype, sparse):
  # None positions are fixed per sequence (as a model's variables are).
  mask = tuple(k != "none" for k in steps[0])
  steps = [[("finite" if k == "none" else k) if present else "none"
            for k, present in zip(s, mask)] for s in steps]
  values, _ = _grad_values(steps)
  scale = tf.Variable(p["initial"], dtype=tf.float32)
  counter = tf.Variable(0, dtype=tf.int64)
  run = _sequence_runner(dtype, sparse, (mask,))
  applied, scales, counters = run(scale, counter, tf.constant(values),
                                  tf.constant(p["period"], tf.int64),
                                  tf.constant(p["multiplier"], tf.float32))
  got = list(zip(applied.numpy().tolist(), scales.numpy().tolist(),
                 counters.numpy().tolist()))
  assert got == _reference(p, steps)


@settings(max_examples=150, deadline=None)
@given(p=params, steps=st.lists(step_kinds, min_size=1, max_size=12),
       dtype=st.sampled_from([tf.float32, tf.float16]))
def test_dynamic_loss_scale_eager_matches_reference(p, steps, dtype):
  ls = mp.DynamicLossScale(initial_loss_scale=p["initial"],
                           increment_period=p["period"],
                           multiplier=p["multiplier"])
  got = []
  for step in steps:
    grads = [None if k == "none" else tf.constant([_VALUE[k], 1.], dtype)
             for k in step]
    _, ok = ls.update(grads)
    got.append((bool(ok), float(ls().numpy()),
                int(ls._num_good_steps.numpy())))
  assert got == _reference(p, steps)


@settings(max_examples=30, deadline=None)
@given(p=params, steps=st.lists(step_kinds, min_size=1, max_size=8))
def test_dynamic_loss_scale_in_tf_function_matches_reference(p, steps):
  ls = mp.DynamicLossScale(initial_loss_scale=p["initial"],
                           increment_period=p["period"],
                           multiplier=p["multiplier"])
  values, present = _grad_values(steps)

  @tf.function
  def run():
    out = []
    for i, step in enumerate(steps):
      grads = [tf.constant(values[i, j]) if present[i, j] else None
               for j in range(len(step))]
      ok = ls.update(grads)[1]
      # Read after the update: control dependencies keep the order.
      with tf.control_dependencies([ok]):
        out.append((ok, ls(), ls._num_good_steps.read_value()))
    return out

  got = [(bool(a), float(b), int(c)) for a, b, c in run()]
  assert got == _reference(p, steps)
