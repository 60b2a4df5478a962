"""The arithmetic of dynamic loss scaling, shared by every loss scaler here.

`dynamic_update` grows the scale after enough finite steps and halves it on a
non-finite one, bit-identically to TF 2.3/2.4 and in every mode
(docs/architecture.md has the algorithm and why it uses `tf.where`).
"""

import tensorflow as tf

from tf_mixed_precision_compat import _private_api


# Eagerly, a check of this many gradients or more runs as one compiled
# function call instead of two eager ops per gradient.
_EAGER_COMPILE_MIN_GRADS = 8

# Under XLA, gradients of at most this many elements are concatenated into
# one check per dtype.
_XLA_CONCAT_MAX_ELEMENTS = 1 << 16


def _finite_checks(grads):
  """Scalar bool tensors whose conjunction says whether `grads` are finite.

  One check per gradient, each running as soon as its gradient exists;
  under XLA small gradients are concatenated into one check per dtype (one
  reduction each compiles far slower; see docs/performance.md).
  """
  present = [g.values if isinstance(g, tf.IndexedSlices) else g
             for g in grads if g is not None]
  if not _private_api.in_xla_context():
    return [tf.reduce_all(tf.math.is_finite(g)) for g in present]
  checks, small = [], {}
  for g in present:
    size = g.shape.num_elements()
    if size is not None and size <= _XLA_CONCAT_MAX_ELEMENTS:
      small.setdefault(g.dtype, []).append(tf.reshape(g, [-1]))
    else:
      checks.append(tf.reduce_all(tf.math.is_finite(g)))
  checks.extend(
      tf.reduce_all(tf.math.is_finite(
          flats[0] if len(flats) == 1 else tf.concat(flats, axis=0)))
      for flats in small.values())
  return checks


def _all_finite_graph(grads):
  checks = _finite_checks(grads)
  if not checks:
    return tf.constant(True)
  if len(checks) == 1:
    return checks[0]
  return tf.reduce_all(tf.stack(checks))


# Traced once per gradient structure, as a training loop passes the same
# shapes at every step; shapes that keep changing (sparse gradients) are
# relaxed to unknown ones, which are then checked one by one.
_all_finite_compiled = tf.function(
    _all_finite_graph, autograph=False, reduce_retracing=True)


def local_all_finite(grads):
  """Whether every gradient in the flat list `grads` is finite; None skipped."""
  present = [g for g in grads if g is not None]
  if (len(present) >= _EAGER_COMPILE_MIN_GRADS and tf.executing_eagerly() and
      not tf.distribute.has_strategy()):
    return _all_finite_compiled(present)
  return _all_finite_graph(present)


def dynamic_update(scale, counter, is_finite, growth_steps, multiplier):
  """The next `(scale, counter)` tensors of dynamic loss scaling."""
  scale = tf.convert_to_tensor(scale)
  counter = tf.convert_to_tensor(counter)
  next_count = counter + 1
  grow = tf.logical_and(is_finite, next_count >= growth_steps)
  grown = scale * multiplier
  grown = tf.where(tf.math.is_finite(grown), grown, scale)
  shrunk = tf.maximum(
      tf.math.divide_no_nan(scale, tf.cast(multiplier, scale.dtype)), 1.)
  new_scale = tf.where(is_finite, tf.where(grow, grown, scale), shrunk)
  new_counter = tf.where(tf.logical_and(is_finite, tf.logical_not(grow)),
                         next_count, tf.zeros_like(counter))
  return new_scale, new_counter
