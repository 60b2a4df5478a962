"""TF 2.3's `MixedPrecisionLossScaleOptimizer` for `tf.compat.v1` optimizers.

Scales the loss, unscales the gradients and, with a dynamic loss scale,
applies a step only when every replica's gradients are finite; checkpoints use
TF 2.3.4's names (docs/architecture.md describes the step).
"""

import math
from typing import Any, Iterable, Optional, Sequence

import tensorflow as tf

from tf_mixed_precision_compat import _grad_checks
from tf_mixed_precision_compat import _private_api
from tf_mixed_precision_compat import loss_scale as loss_scale_module
from tf_mixed_precision_compat import keras_target
from tf_mixed_precision_compat.endpoints import export
from tf_mixed_precision_compat.loss_scale import dynamic_state
from tf_mixed_precision_compat.loss_scale import _graph_update
from tf_mixed_precision_compat.loss_scale import _loss_scales
from tf_mixed_precision_compat.loss_scale import _tracking
from tf_mixed_precision_compat.optimizers import _step

__all__ = ["MixedPrecisionLossScaleOptimizer"]

_V1Optimizer = tf.compat.v1.train.Optimizer


def is_keras_optimizer(opt: Any) -> bool:
  """Whether `opt` is a Keras optimizer (Keras 3, or tf_keras's, legacy too)."""
  return keras_target.is_optimizer(opt)


def _local_ops(distribution, values):
  """Flattens `values` to the ops/tensors held on this worker's replicas."""
  flat = []
  for value in tf.nest.flatten(values):
    if value is None:
      continue
    flat.extend(
        v for v in distribution.experimental_local_results(value)
        if v is not None)
  return flat


def _check_gradient(grad, var):
  """Rejects, as graph-mode TF did, a gradient the optimizer cannot apply.

  Before the loss scale is updated, so bad input changes nothing (an eager
  gradient of another dtype would abort the process in the apply kernel).
  Returns `grad` (see `_grad_checks.check_sparse`).
  """
  dtype = getattr(grad, "dtype", None)
  dtype = None if dtype is None else tf.as_dtype(dtype).base_dtype
  if dtype is not None and dtype != var.dtype.base_dtype:
    raise TypeError(f'"grads_and_vars": the gradient for {var.name} has dtype '
                    f"{dtype.name}, but the variable has dtype "
                    f"{var.dtype.base_dtype.name}.")
  _grad_checks.check_dense_shape(grad, var)
  return _grad_checks.check_sparse(grad, var)


def _check_tf_loss_scale(loss_scale):
  """Rejects a TF `tf.compat.v1` loss scale not finite as a float32.

  Ours are validated when made; TF's accept 1e39, with which a dynamic
  scale skips every step.
  """
  compat = tf.compat.v1.mixed_precision
  checks = ((compat.FixedLossScale, "_loss_scale_value", "loss_scale_value"),
            (compat.DynamicLossScale, "initial_loss_scale",
             "initial_loss_scale"))
  for cls, attr, arg_name in checks:
    if isinstance(loss_scale, cls):
      value = float(getattr(loss_scale, attr))
      if not math.isfinite(value):
        raise ValueError(f'"{arg_name}" of loss_scale must be finite, but '
                         f"got: {value}")
      dynamic_state.check_float32_finite(value, arg_name)


@export(
    v1=("mixed_precision.MixedPrecisionLossScaleOptimizer",
        "train.experimental.MixedPrecisionLossScaleOptimizer"),
    deprecated=("train.experimental.MixedPrecisionLossScaleOptimizer",))
class MixedPrecisionLossScaleOptimizer(_V1Optimizer):  # type: ignore[misc,valid-type]
  """A `tf.compat.v1.train.Optimizer` wrapper that applies loss scaling.

  The loss is multiplied by the loss scale before gradients are computed,
  which are divided by it afterwards, so small float16 gradients do not
  flush to zero. With a dynamic loss scale, steps with Inf or NaN gradients
  are skipped (nothing changes, `global_step` neither) and the scale shrinks.

  Example:

  >>> opt = MixedPrecisionLossScaleOptimizer(
  ...     tf.compat.v1.train.GradientDescentOptimizer(0.5), loss_scale=128)
  >>> var = tf.Variable(1.)
  >>> opt.minimize(lambda: var * 2., var_list=[var])
  >>> float(var.numpy())
  0.0
  """

  def __init__(self, opt: tf.compat.v1.train.Optimizer,
               loss_scale: Any) -> None:
    """Wraps `opt`.

    Args:
      opt: A `tf.compat.v1.train.Optimizer` (GradientDescent, Momentum, Adam,
        ...). Keras optimizers are not accepted; use the Keras
        `LossScaleOptimizer` for those.
      loss_scale: What `tf_mixed_precision_compat.get` accepts: a Python int or
        float (a fixed loss scale), the string `"dynamic"`, or a `LossScale`
        instance (ours, or TensorFlow's `tf.compat.v1.mixed_precision` one).

    Raises:
      ValueError: If `opt` is not a `tf.compat.v1.train.Optimizer`, or
        `loss_scale` is None or not an accepted loss scale.
    """
    if not isinstance(opt, _V1Optimizer):
      message = ('"opt" must be an instance of Optimizer, but got: %s' %
                 type(opt))
      if is_keras_optimizer(opt):
        message += (". Keras optimizers are wrapped with "
                    "tf.keras.mixed_precision.LossScaleOptimizer instead.")
      raise ValueError(message)
    # Resolved before any state is set, so a bad value leaves nothing behind.
    resolved = loss_scale_module.get(loss_scale)
    if resolved is None:
      raise ValueError("loss_scale cannot be None")
    _check_tf_loss_scale(resolved)
    self._optimizer = opt
    super().__init__(_private_api.v1_optimizer_use_locking(opt),
                     opt.get_name())
    self._loss_scale = resolved
    # The checkpoint keys TF 2.3.4 used for object-based checkpoints.
    self._track_trackable(self._optimizer, "base_optimizer")
    self._track_trackable(self._loss_scale, "loss_scale")

  def _doing_dynamic_loss_scaling(self):
    # Any loss scale but a fixed one is asked, step by step, whether to apply:
    # that covers DynamicLossScale and user-defined subclasses alike.
    return not isinstance(self._loss_scale, _loss_scales.FIXED_TYPES)

  def compute_gradients(self,
                        loss: Any,
                        var_list: Optional[Sequence[Any]] = None,
                        gate_gradients: int = _V1Optimizer.GATE_OP,
                        aggregation_method: Any = None,
                        colocate_gradients_with_ops: bool = False,
                        grad_loss: Any = None) -> list[tuple[Any, Any]]:
    """Computes unscaled gradients of the loss scaled by the loss scale.

    Args:
      loss: A tensor to minimize, or a callable taking no arguments returning
        it (required when executing eagerly).
      var_list: Optional list or tuple of variables to differentiate against;
        defaults to the graph's trainable variables (or, for a callable loss,
        those it reads).
      gate_gradients: `GATE_NONE`, `GATE_OP` or `GATE_GRAPH`.
      aggregation_method: How gradient terms are combined
        (`tf.AggregationMethod`).
      colocate_gradients_with_ops: Whether to colocate gradients with their
        ops.
      grad_loss: Optional tensor holding the gradient computed for `loss`.

    Returns:
      A list of `(gradient, variable)` pairs; a gradient may be None or a
      `tf.IndexedSlices`, as from the wrapped optimizer.

    Raises:
      RuntimeError: If executing eagerly and `loss` is not callable.
      ValueError: If the wrapped optimizer rejects the arguments.
    """
    grads_and_vars = self._optimizer.compute_gradients(
        loss=self._scale_loss(loss),
        var_list=var_list,
        gate_gradients=gate_gradients,
        aggregation_method=aggregation_method,
        colocate_gradients_with_ops=colocate_gradients_with_ops,
        grad_loss=grad_loss)
    grads = self._unscale_grads([g for g, _ in grads_and_vars])
    return list(zip(grads, [v for _, v in grads_and_vars]))

  def _scale_loss(self, loss):
    scale = self._loss_scale()  # Read first, as TF 2.3 did.
    return _step.scaled_loss(loss, lambda: scale)

  def _unscale_grads(self, grads):
    # Multiplying by the float32 reciprocal, as TF 2.3 did, keeps the values
    # bit-identical to its; it is cast for float16/bfloat16 gradients, which
    # TF 2.3 could not unscale at all.
    return _step.unscale_gradients(grads, self._loss_scale())

  def apply_gradients(self, grads_and_vars: Iterable[tuple[Any, Any]],
                      global_step: Optional[tf.Variable] = None,
                      name: Optional[str] = None) -> Any:
    """Applies the gradients if they are all finite.

    With a dynamic loss scale the loss scale is updated from the gradients,
    and the returned op applies them only when all are finite (on every
    replica); otherwise nothing is applied and `global_step` is not
    incremented. With a fixed loss scale the gradients are applied directly.

    Args:
      grads_and_vars: List of `(gradient, variable)` pairs as returned by
        `compute_gradients()`; None gradients are ignored.
      global_step: Optional variable to increment by one when the gradients
        are applied.
      name: Optional name for the returned op; defaults to the wrapped
        optimizer's name.

    Returns:
      An op that conditionally applies the gradients (None when executing
      eagerly, where the step has then already happened).

    Raises:
      ValueError: In a cross-replica context, if no variable has a gradient,
        or (dynamic loss scale) for a gradient's shape not its variable's.
      TypeError: (Dynamic loss scale) For a gradient's dtype not its
        variable's.
    """
    if tf.distribute.in_cross_replica_context():
      raise ValueError("apply_gradients() must be called in a replica context.")
    grads_and_vars = tuple(grads_and_vars)
    if not self._doing_dynamic_loss_scaling():
      return self._optimizer.apply_gradients(grads_and_vars, global_step, name)
    # Every replica drops its None gradients the same way, so merge_call sees
    # one structure across replicas (eager replicas may differ in which
    # variables they touched; see the v1 Optimizer's filtering).
    present = tuple((g, v) for g, v in grads_and_vars if g is not None)
    if not present:
      raise ValueError("No gradients provided for any variable: %s." %
                       ([str(v) for _, v in grads_and_vars],))
    present = tuple((_check_gradient(g, v), v) for g, v in present)
    return tf.distribute.get_replica_context().merge_call(
        self._distributed_apply, args=(present, global_step, name))

  def _distributed_apply(self,
                         distribution,
                         grads_and_vars,
                         global_step=None,
                         name=None):
    """Updates the loss scale and maybe applies, in cross-replica context."""
    name = name if name is not None else self.get_name()
    update_op, should_apply = self._update_loss_scale(
        [g for g, _ in grads_and_vars])

    def apply_fn():
      return self._apply_gradients(distribution, grads_and_vars, global_step,
                                   name + "-wrapped")

    maybe_apply = tf.__internal__.smart_cond.smart_cond(
        should_apply, apply_fn, tf.no_op)
    return tf.group(
        *_local_ops(distribution, [maybe_apply, update_op]), name=name)

  def _update_loss_scale(self, grads):
    """The loss scale's `update`, in graphs built as TF's own class built it.

    TF's conditionals instead of `_scaling`'s selects, so the executor
    orders what a job leaves unordered as with TF's class (same values;
    docs/graph_mode.md).
    """
    scale = self._loss_scale
    if (tf.executing_eagerly() or
        not isinstance(scale, loss_scale_module.DynamicLossScale) or
        type(scale).update is not loss_scale_module.DynamicLossScale.update):
      return scale.update(grads)
    # This graph's variables, as checkpoints find them; a scale made in
    # another graph has none here and is left to its own update's error.
    current = _private_api.lookup_dependency(scale, "current_loss_scale")
    counter = dynamic_state.counter_variable(scale)
    if current is None or counter is None:
      return scale.update(grads)
    return _graph_update.update_in_conditionals(
        current, counter, grads, scale.increment_period, scale.multiplier)

  def _apply_gradients(self, distribution, grads_and_vars, global_step, name):
    """Applies unconditionally: each replica runs the wrapped optimizer."""
    update_ops = distribution.extended.call_for_each_replica(
        self._optimizer.apply_gradients,
        args=(grads_and_vars, global_step, name))
    # The strategy's group, as TF's class: one replica's apply op is returned
    # as is, without a NoOp around it.
    return distribution.group(update_ops)

  # The wrapped optimizer does all the applying; these are never reached.
  def _apply_dense(self, *args):
    raise RuntimeError("This function should never be called")

  _apply_sparse = _resource_apply_dense = _apply_dense
  _resource_apply_sparse = _apply_dense

  def get_slot(self, var: Any, name: str) -> Any:
    """Returns the wrapped optimizer's slot `name` for `var`, or None.

    (TF 2.3.4 returned None.) `get_slot_names()` is deliberately not
    delegated, as in TF 2.3.4: checkpoints would save each slot twice, away
    from its `base_optimizer` key. Ask the wrapped optimizer for its names.

    Args:
      var: A variable passed to `minimize()` or `apply_gradients()`.
      name: A slot name of the wrapped optimizer (e.g. "momentum").

    Returns:
      The slot variable, or None if the wrapped optimizer has none.
    """
    return self._optimizer.get_slot(var, name)

  def variables(self) -> list[tf.Variable]:
    """The wrapped optimizer's variables plus the loss scale's, this graph's."""
    return self._optimizer.variables() + _tracking.variables_of(
        self._loss_scale)
