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
  """Raises `ValueError` if a dense `grad`'s shape cannot be `var`'s."""
  shape = getattr(grad, "shape", None)
  if (not isinstance(grad, tf.IndexedSlices) and shape is not None and
      not tf.TensorShape(shape).is_compatible_with(var.shape)):
    raise ValueError(f'"grads_and_vars": the gradient for {var.name} has '
                     f"shape {tf.TensorShape(shape)}, but the variable has "
                     f"shape {tf.TensorShape(var.shape)}.")


def check_dtype(grad, var):
  """Raises if `grad`'s dtype differs from `var`'s, as TF 2.4's apply kernels.

  `InvalidArgumentError` eagerly, else (its op builders') `TypeError`.
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
  raise TypeError(message)


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

  Returns `grad` (anything else unchanged), or in a graph an equal one whose
  values are read only once its indices were found in range. Raises
  `ValueError` for values not fitting the variable's rows (or, in a graph,
  the indices), `InvalidArgumentError` eagerly for an index out of range or
  mismatched counts (in a graph, when the step runs).
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
