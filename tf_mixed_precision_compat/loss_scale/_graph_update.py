"""TF 2.3/2.4's graph of a dynamic loss-scale update, op for op.

The `tf.compat.v1` optimizer builds its update with this in graphs, so the
executor sees what TF's own class built: the same ops in the same order, the
reads of the scale and counter inside the conditionals, the same control
edges. Ops a job leaves unordered then run in TF's order
(docs/graph_mode.md); values are those of `_scaling.dynamic_update`.
"""

import tensorflow as tf

__all__ = ["update_in_conditionals"]


def _is_all_finite(grads):
  # A Python list, not a stacked tensor, is reduced: TF's graph computes the
  # reduction's axes from it at run time (Rank and Range ops).
  return tf.reduce_all([
      tf.reduce_all(tf.math.is_finite(
          g.values if isinstance(g, tf.IndexedSlices) else g))
      for g in grads if g is not None
  ])


def _assign_if_finite(variable, value):
  return tf.compat.v1.cond(
      tf.math.is_finite(value), lambda: variable.assign(value).op, tf.no_op)


def update_in_conditionals(scale, counter, grads, growth_steps, multiplier):
  """One dynamic loss-scaling step as TF 2.3/2.4 built it, in graphs only.

  Call it in cross-replica context under a strategy. Returns `(update_op,
  is_finite)`: the conditional updating `scale` and `counter`, and whether
  the step's gradients are finite on every replica.
  """
  grads = tf.nest.flatten(grads)
  if tf.distribute.has_strategy():
    distribution = tf.distribute.get_strategy()

    def replica_is_finite(replica_grads):
      return tf.cast(_is_all_finite(replica_grads), tf.float32)

    is_finite_float = distribution.extended.call_for_each_replica(
        replica_is_finite, args=(grads,))
    total = distribution.reduce(tf.distribute.ReduceOp.SUM, is_finite_float,
                                axis=None)
    is_finite = tf.equal(total, distribution.num_replicas_in_sync)
  else:
    is_finite = _is_all_finite(grads)

  def update_if_finite():

    def grow():
      return tf.group(_assign_if_finite(scale, scale * multiplier),
                      counter.assign(0))

    return tf.compat.v1.cond(counter + 1 >= growth_steps, grow,
                             lambda: counter.assign_add(1).op)

  def update_if_not_finite():
    # A true division as TF wrote it (Grappler may fold it into a multiply by
    # the reciprocal, in TF's graph as in this one), built before the assigns
    # as TF built it.
    shrunk = tf.maximum(scale / multiplier, 1)
    return tf.group(counter.assign(0), scale.assign(shrunk))

  update_op = tf.compat.v1.cond(is_finite, update_if_finite,
                                update_if_not_finite)
  return update_op, is_finite
