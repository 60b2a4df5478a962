"""The parts of a loss-scaled step that do not depend on the wrapper's state.

Strategy support, the graph a `scale_loss` mark belongs to, the checks made
before the loss scale changes, and apply-or-skip.

Example:

>>> raise_if_strategy_unsupported()  # The default strategy supports it.
>>> smart_cond(True, lambda: print("applied"), lambda: print("skipped"))
applied
"""

import contextlib

import keras
import tensorflow as tf

from tf_mixed_precision_compat import _grad_checks
from tf_mixed_precision_compat.optimizers import _gated_apply


def raise_if_strategy_unsupported():
  """Raises TF 2.4's ValueError unless the strategy supports loss scaling.

  It needs one variable copy per replica: the default, OneDevice, Mirrored
  and MultiWorkerMirrored strategies.
  """
  if not tf.distribute.has_strategy():
    return
  strategy = tf.distribute.get_strategy()
  if isinstance(strategy, (
      tf.distribute.MirroredStrategy,
      tf.compat.v1.distribute.MirroredStrategy,
      tf.distribute.OneDeviceStrategy,
      tf.compat.v1.distribute.OneDeviceStrategy,
      tf.distribute.MultiWorkerMirroredStrategy,
      tf.compat.v1.distribute.experimental.MultiWorkerMirroredStrategy)):
    return
  if isinstance(strategy, (tf.distribute.TPUStrategy,
                           tf.distribute.experimental.TPUStrategy,
                           tf.compat.v1.distribute.experimental.TPUStrategy)):
    raise ValueError(
        "Loss scaling is not supported with TPUStrategy. Loss scaling is "
        "unnecessary with TPUs, since they support bfloat16 instead of "
        "float16 and bfloat16 does not require loss scaling. You should "
        "remove the use of the LossScaleOptimizer when TPUs are used.")
  raise ValueError("Loss scaling is not supported with the "
                   f"tf.distribute.Strategy: {type(strategy).__name__}. Try "
                   "using a different Strategy, e.g. a MirroredStrategy")


def scaled_loss(loss, scale):
  """`loss` times `scale()` in its dtype; a callable for a callable `loss`."""
  if callable(loss):
    return lambda: scaled_loss(loss(), scale)
  return loss * tf.cast(scale(), loss.dtype)


def _multiply_gradient(gradient, factor):
  factor = tf.cast(factor, gradient.dtype)
  if isinstance(gradient, tf.IndexedSlices):
    return tf.IndexedSlices(gradient.values * factor, gradient.indices,
                            dense_shape=gradient.dense_shape)
  return gradient * factor


def unscale_gradients(grads, loss_scale):
  """`grads` times the reciprocal of `loss_scale`; None and sparse kept."""
  reciprocal = 1. / loss_scale
  return [None if g is None else _multiply_gradient(g, reciprocal)
          for g in grads]


def graph_token():
  """What a `scale_loss` mark belongs to: None eagerly, else a graph.

  The outermost `tf.function` graph, so a loss scaled in a nested graph
  (a loop body) pairs up with gradients applied in another of the step.
  """
  if tf.executing_eagerly():
    return None
  graph = tf.compat.v1.get_default_graph()
  while hasattr(getattr(graph, "outer_graph", None), "outer_graph"):
    graph = graph.outer_graph
  return graph


class _Holder:
  """Hides a list from `tf.distribute` so it passes through unchanged.

  `call_for_each_replica` would replace distributed variables by their
  per-replica components; Keras 3 optimizers expect the distributed ones.
  """

  __slots__ = ["value"]

  def __init__(self, value):
    self.value = value


def smart_cond(pred, true_fn, false_fn):
  """`tf.cond` unless `pred` is known now (a bool, or eager)."""
  if isinstance(pred, bool):
    return true_fn() if pred else false_fn()
  static = tf.get_static_value(pred)
  if static is not None:
    return true_fn() if bool(static) else false_fn()

  def branch(fn):
    def wrapped():
      # The branch's ops feed its output, so that a `tf.compat.v1` cond
      # (control flow v1 prunes what its output does not depend on) runs them.
      ops = [x for x in tf.nest.flatten(fn()) if x is not None]
      with tf.control_dependencies(ops):
        return tf.constant(True)
    return wrapped

  return tf.cond(pred, branch(true_fn), branch(false_fn))


def _check_pair(pair):
  """One checked (gradient, variable) pair; TypeError or ValueError if bad."""
  if not isinstance(pair, (tuple, list)) or len(pair) != 2:
    raise TypeError('"grads_and_vars" must be (gradient, variable) pairs, '
                    f"but got the element: {pair!r}")
  grad, var = pair
  if not isinstance(var, (tf.Variable, keras.Variable)):
    raise TypeError('"grads_and_vars" must pair each gradient with a '
                    "tf.Variable or keras.Variable, but got: "
                    f"{var!r}")
  if grad is None:
    return grad, var
  # Keras 3 optimizers would cast a gradient of another dtype, which can
  # overflow after the finite check; TF 2.4 refused it.
  _grad_checks.check_dtype(grad, var)
  _grad_checks.check_dense_shape(grad, var)
  return _grad_checks.check_sparse(grad, var), var


def check_grads_and_vars(grads_and_vars, built_inner=None):
  """Raises what the inner optimizer would, before the loss scale changes.

  Malformed input would otherwise leave a changed scale or counter behind.
  `built_inner`, the adapter once built, checks it knows the variables.
  Returns the checked pairs (see `_grad_checks.check_sparse`).
  """
  checked = tuple(_check_pair(pair) for pair in grads_and_vars)
  present = [v for g, v in grads_and_vars if g is not None]
  if not present:
    # TF 2.4's message (raised there by the inner optimizer).
    raise ValueError("No gradients provided for any variable: %s." %
                     ([v.name for _, v in grads_and_vars],))
  if built_inner is not None:
    built_inner.check_variables_are_known(present)
  return checked


def apply_or_skip(distribution, inner, should_apply, grads, variables, name,
                  experimental_aggregate_gradients):
  """Applies the step in every replica if `should_apply`, else counts it."""

  def in_replica(replica_grads, holder):
    return inner.apply_in_replica(list(zip(replica_grads, holder.value)),
                                  name, experimental_aggregate_gradients)

  def build_apply():
    with inner.clip_after_sum(distribution,
                              experimental_aggregate_gradients):
      applied = distribution.extended.call_for_each_replica(
          in_replica, args=(grads, _Holder(variables)))
      return graph_ops(distribution, applied)

  # TF 2.4.4 counts skipped steps too, as the inner optimizer would have.
  return smart_cond(should_apply, lambda: inner.in_order(build_apply),
                    inner.count_skipped_step)


def graph_ops(distribution, values):
  """`values`' ops on this worker, for a train op to group; [] eagerly."""
  if tf.executing_eagerly():
    return []
  ops = []
  for value in tf.nest.flatten(values):
    if value is None:
      continue
    for local in distribution.experimental_local_results(value):
      # A variable's assignment (OptimizerV2's step count) stands for its op,
      # not for a read of the variable.
      op = local if isinstance(local, tf.Operation) else getattr(
          local, "op", None)
      if op is not None:
        ops.append(op)
  return ops


def update_and_apply(distribution, loss_scale, inner, grads, variables, name,
                     experimental_aggregate_gradients):
  """One step in cross-replica context: the scale's update, then the apply.

  `loss_scale` is the dynamic state, or None for a fixed scale. Returns the
  op running the step when building a graph, else None.
  """
  if loss_scale is None:
    update_op, should_apply = None, True
  else:
    update_op, should_apply = loss_scale.update(grads)
  config = _gated_apply.default_config()
  vetted = (not isinstance(should_apply, bool) and
            _gated_apply.supported(inner.optimizer, grads, variables))
  if vetted and _gated_apply.gates(inner.optimizer, variables, config):
    # Same result as `apply_or_skip`'s conditional, without making every
    # update wait for the verdict (see _gated_apply).
    _gated_apply.apply_when_finite(inner.optimizer, grads, variables,
                                   should_apply, config)
    return update_op
  order = (_gated_apply.large_updates_two_at_a_time(inner.optimizer, config)
           if vetted else contextlib.nullcontext())
  with order:
    applied = apply_or_skip(distribution, inner, should_apply, grads,
                            variables, name, experimental_aggregate_gradients)
  # TF 2.4's train op: the conditional apply and the scale's update (None
  # eagerly, where `tf.group` builds nothing).
  return tf.group(*graph_ops(distribution, [applied, update_op]))


def graph_gradients(optimizer, loss, params):
  """TF 2.4's `LossScaleOptimizer.get_gradients`, for either target's class.

  Unscaled `tf.gradients` of the scaled loss (graphs only); ValueError for
  a variable without a gradient, as TF 2.4.
  """
  params = tf.nest.flatten(params)
  grads = tf.gradients(optimizer.get_scaled_loss(loss), params)
  for grad, param in zip(grads, params):
    if grad is None:
      raise ValueError(
          f"Variable {param} has `None` for gradient. Please make sure that "
          "all of your ops have a gradient defined (i.e. are "
          "differentiable). Common ops without gradient: K.argmax, K.round, "
          "K.eval.")
  return optimizer.get_unscaled_gradients(grads)
