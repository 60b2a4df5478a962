"""Putting back what a restore assigned when its deferred part fails.

A restore into a model that is not built yet assigns part of the checkpoint
at once (the optimizer's step and loss scale, a step counter, a plain
`tf.Variable` beside the model) and the model's weights only when Keras
builds it. If that deferred part fails, the values assigned at once would
stay: a loud error, but a partial state. A `Snapshot` taken before the
restore (only when such a deferred part exists, so a built model's weights
are never copied for nothing) holds the values of every variable the
restore can reach; `roll_back()` writes them back, and drops what the
restore left waiting on those objects, so that nothing of it lands later.
"""

import keras
import tensorflow as tf

from tf_mixed_precision_compat import _private_api
from tf_mixed_precision_compat.legacy import _checkpoint

_KERAS_VARIABLE = getattr(keras, "Variable", None)


def _is_variable(obj):
  return isinstance(obj, tf.Variable) or (
      _KERAS_VARIABLE is not None and isinstance(obj, _KERAS_VARIABLE))


def _children(obj):
  try:
    return _private_api.trackable_children(obj).values()
  except (AttributeError, TypeError, ValueError):
    return ()


def reachable(roots, skip=frozenset()):
  """(variables, other trackables) reachable from `roots`, each once.

  Args:
    roots: The objects to start from.
    skip: Ids of objects neither collected nor entered.
  """
  variables, trackables, seen = [], [], set(skip)
  stack = list(roots)
  while stack:
    obj = stack.pop()
    if id(obj) in seen:
      continue
    seen.add(id(obj))
    if _is_variable(obj):
      variables.append(obj)
    elif isinstance(obj, tf.__internal__.tracking.Trackable):
      trackables.append(obj)
      stack.extend(_children(obj))
  return variables, trackables


class Snapshot:
  """The values of the variables reachable from some objects, to put back.

  Example:

  >>> step = tf.Variable(0)
  >>> snapshot = Snapshot([step])
  >>> _ = step.assign(7)
  >>> snapshot.roll_back()
  >>> int(step.numpy())
  0
  """

  def __init__(self, roots, skip=frozenset()):
    """Reads the values now.

    Args:
      roots: The objects whose variables (and their dependencies') are kept.
      skip: Ids of objects left out (the models the deferred part builds,
        whose waiting restorations must stay).
    """
    variables, self._trackables = reachable(roots, skip)
    # Read outside any function being traced, as a copy the restore's
    # assignments cannot change.
    with tf.init_scope():
      self._values = [(v, tf.identity(tf.convert_to_tensor(v)))
                      for v in variables]

  def roll_back(self):
    """Writes every value back and drops the restorations left waiting."""
    with tf.init_scope():
      for variable, value in self._values:
        _checkpoint.assign_exact(variable, value)
    for obj in self._trackables:
      try:
        _private_api.deferred_dependencies(obj).clear()
      except AttributeError:  # Not a TF trackable that can wait.
        pass
