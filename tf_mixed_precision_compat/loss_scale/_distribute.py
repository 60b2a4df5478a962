"""Cross-replica agreement on whether a step's gradients are all finite.

One overflowing replica skips the step on every replica, as in TF 2.3.
"""

import tensorflow as tf

from tf_mixed_precision_compat.loss_scale import _scaling


def all_finite(grads):
  """Whether all of the nested `grads` are finite on every replica.

  Raises RuntimeError in a replica context, ValueError for per-replica
  values outside a strategy scope.
  """
  flat = tf.nest.flatten(grads)
  if not tf.distribute.has_strategy():
    if any(isinstance(g, tf.distribute.DistributedValues) for g in flat):
      raise ValueError(
          "grads holds per-replica values but no tf.distribute.Strategy is "
          "in scope; call update(grads) inside `with strategy.scope():`.")
    return _scaling.local_all_finite(flat)
  if not tf.distribute.in_cross_replica_context():
    raise RuntimeError(
        "Loss scale update(grads) must be called in a cross-replica context "
        "when a tf.distribute.Strategy is used; call it from "
        "tf.distribute.get_replica_context().merge_call(...) or outside "
        "strategy.run.")
  strategy = tf.distribute.get_strategy()

  def replica_verdict(*local_grads):
    return tf.cast(_scaling.local_all_finite(local_grads), tf.float32)

  verdicts = strategy.run(replica_verdict, args=tuple(flat))
  total = strategy.reduce(tf.distribute.ReduceOp.SUM, verdicts, axis=None)
  return tf.equal(total, float(strategy.num_replicas_in_sync))
