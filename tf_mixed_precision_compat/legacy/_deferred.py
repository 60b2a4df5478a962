"""A restore's part that waits for a build: the hook, the rollback, refusal.

Shared by the `Checkpoint` hook (`_checkpoint_restore`) and the tf_keras
target (`targets/tf_keras/`); docs/architecture.md says why each exists.
"""

import functools

import keras
import tensorflow as tf

from tf_mixed_precision_compat import _private_api
from tf_mixed_precision_compat.legacy import _gate

_KERAS_VARIABLE = getattr(keras, "Variable", None)


def _is_variable(obj):
  return isinstance(obj, tf.Variable) or (
      _KERAS_VARIABLE is not None and isinstance(obj, _KERAS_VARIABLE))


def _children(obj):
  try:
    return _private_api.trackable_children(obj).values()
  except (AttributeError, TypeError, ValueError):
    return ()


def reachable(roots, skip=frozenset(), stop=lambda obj: False):
  """(variables, other trackables) reachable from `roots`, each once.

  Args:
    roots: The objects to start from.
    skip: Ids of objects neither collected nor entered.
    stop: Whether a trackable is collected but not entered.
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
      if not stop(obj):
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
        _gate.assign_exact(variable, value)
    for obj in self._trackables:
      try:
        _private_api.deferred_dependencies(obj).clear()
      except AttributeError:  # Not a TF trackable that can wait.
        pass


def on_build(obj, callback):
  """Calls `callback()` right after `obj.build(...)` (once).

  Wraps the instance's own `build` attribute, put back when it fires (see
  docs/architecture.md, "Waiting for a build").
  """
  had_own = "build" in vars(obj)
  original = obj.build

  @functools.wraps(original)
  def build(*args, **kwargs):
    result = original(*args, **kwargs)
    if had_own:
      object.__setattr__(obj, "build", original)
    else:
      object.__delattr__(obj, "build")
    callback()
    return result

  object.__setattr__(obj, "build", build)


def failure(source, error):
  """What a failed restore's status assertions raise."""
  return AssertionError(f"Restoring {source!r} failed, nothing of it is "
                        f"restored: {error}")


def refuse_use(targets, error):
  """Makes each `(object, method names)` of `targets` raise `error()`."""
  for obj, names in targets:
    for name in names:
      original = getattr(obj, name, None)
      if original is None:
        continue

      @functools.wraps(original)
      def refuse(*unused_args, **unused_kwargs):
        raise error()

      # Not through Keras' `__setattr__`: the wrapper is no tracked state.
      object.__setattr__(obj, name, refuse)
