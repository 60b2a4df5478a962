"""Checks on one (gradient, variable) pair, made before any state changes.

A dtype mismatch or an out-of-range `IndexedSlices` raises before the loss
scale, counter or variables change (eagerly, or as a graph assertion).
"""

import numpy as np
import tensorflow as tf

__all__ = ["check_dense_shape", "check_dtype", "check_sparse"]


def _base_dtype(value):
  dtype = getattr(value, "dtype", None)
  if dtype is None:
    return None
  return tf.as_dtype(dtype).base_dtype


def check_dense_shape(grad, var):
  """Raises `ValueError` if a dense `grad`'s shape cannot be `var`'s.

  (`tf.IndexedSlices` are checked by `check_sparse`.)

  Args:
    grad: A tensor, `tf.IndexedSlices`, NumPy array or Python number.
    var: The variable it is for.

  Raises:
    ValueError: On a shape incompatible with the variable's.
  """
  shape = getattr(grad, "shape", None)
  if (not isinstance(grad, tf.IndexedSlices) and shape is not None and
      not tf.TensorShape(shape).is_compatible_with(var.shape)):
    raise ValueError(f'"grads_and_vars": the gradient for {var.name} has '
                     f"shape {tf.TensorShape(shape)}, but the variable has "
                     f"shape {tf.TensorShape(var.shape)}.")


def check_dtype(grad, var, graph_error=TypeError):
  """Raises if `grad`'s dtype differs from `var`'s.

  TF 2.4 refused the mismatch where its optimizers ran the apply kernel:
  eagerly the kernel raised `InvalidArgumentError`, while tracing a graph the
  op builder raised `TypeError`. The same types are raised here.

  Args:
    grad: A tensor, `tf.IndexedSlices`, NumPy array or Python number.
    var: The variable it is for.
    graph_error: The exception class raised outside eager execution.

  Raises:
    tf.errors.InvalidArgumentError: Eagerly, on a mismatch.
    TypeError: (or `graph_error`) In a graph, on a mismatch.
  """
  grad_dtype = _base_dtype(grad)
  var_dtype = _base_dtype(var)
  if grad_dtype is None or var_dtype is None or grad_dtype == var_dtype:
    return
  message = (f'"grads_and_vars": the gradient for {var.name} has dtype '
             f"{grad_dtype.name}, but the variable has dtype "
             f"{var_dtype.name}; cast the gradient (a value finite in "
             f"{grad_dtype.name} may overflow in {var_dtype.name}).")
  if tf.executing_eagerly():
    raise tf.errors.InvalidArgumentError(None, None, message)
  raise graph_error(message)


def _check_sparse_shapes(grad, var):
  """Raises if the slices' values cannot be scattered into `var`."""
  values = grad.values.shape
  indices = grad.indices.shape
  var_shape = tf.TensorShape(var.shape)
  if indices.rank is not None and indices.rank != 1:
    raise ValueError(f'"grads_and_vars": the IndexedSlices gradient for '
                     f"{var.name} has indices of shape {indices}; they "
                     "must be a vector.")
  if values.rank is None or var_shape.rank is None:
    return
  if not values[1:].is_compatible_with(var_shape[1:]):
    raise ValueError(f'"grads_and_vars": the IndexedSlices gradient for '
                     f"{var.name} has values of shape {values}, but rows of "
                     f"the variable have shape {var_shape[1:]}.")
  if not values[:1].is_compatible_with(indices[:1]):
    message = (f'"grads_and_vars": the IndexedSlices gradient for '
               f"{var.name} has {values[0]} rows of values but "
               f"{indices[0]} indices.")
    if tf.executing_eagerly():
      # Eagerly TF 2.4's kernels raised this type; its graphs ValueError.
      raise tf.errors.InvalidArgumentError(None, None, message)
    raise ValueError(message)


def _range_message(var, rows):
  return (f'"grads_and_vars": the IndexedSlices gradient for {var.name} has '
          f"indices outside [0, {rows}), the variable's rows.")


def check_sparse(grad, var):
  """Checks an `IndexedSlices` gradient against `var` before any update.

  Args:
    grad: A `tf.IndexedSlices` (anything else is returned unchanged).
    var: The variable it is for.

  Returns:
    `grad`, or in a graph an equal `tf.IndexedSlices` whose values can only be
    read once its indices were found in range.

  Raises:
    ValueError: If the values' shape does not fit the variable's rows, or
      (in a graph) the number of indices.
    tf.errors.InvalidArgumentError: Eagerly, if an index is outside the
      variable's rows or the values and indices differ in number. (In a
      graph the step raises it when run, before changing anything.)
  """
  if not isinstance(grad, tf.IndexedSlices):
    return grad
  _check_sparse_shapes(grad, var)
  var_shape = tf.TensorShape(var.shape)
  rows = var_shape[0] if var_shape.rank else None
  if rows is None:
    return grad
  if tf.executing_eagerly():
    indices = np.asarray(grad.indices)
    if indices.size and (indices.min() < 0 or indices.max() >= rows):
      raise tf.errors.InvalidArgumentError(None, None,
                                           _range_message(var, rows))
    return grad
  indices = tf.convert_to_tensor(grad.indices)
  in_range = tf.reduce_all(
      tf.logical_and(indices >= 0, indices < tf.cast(rows, indices.dtype)))
  check = tf.debugging.Assert(in_range, [_range_message(var, rows)])
  with tf.control_dependencies([check]):
    values = tf.identity(grad.values)
  return tf.IndexedSlices(values, grad.indices, grad.dense_shape)
