"""A failed deferred restore into a tf_keras model leaves no partial state.

An unbuilt model's weights land at its first call, the rest of TF's restore
at once: `guard_read` puts the rest back if a weight fails to land then
(docs/architecture.md, "The tf_keras target").
"""

import functools

import tensorflow as tf
import tf_keras

from tf_mixed_precision_compat import _private_api
from tf_mixed_precision_compat.legacy import _deferred
from tf_mixed_precision_compat.legacy import _gate


def _unbuilt_layers(root):
  """The tf_keras layers not built yet below `root` (not entered)."""

  def unbuilt(obj):
    return isinstance(obj, tf_keras.layers.Layer) and not obj.built

  return [t for t in _deferred.reachable([root], stop=unbuilt)[1]
          if unbuilt(t)]


def _waiting(obj):
  try:
    return _private_api.deferred_dependencies(obj)
  except AttributeError:
    return {}


class _DeferredPart:
  """The layers of one restore still waiting for values, and its undo."""

  def __init__(self, source, snapshot, status, targets):
    self.source, self.error, self._layers = source, None, []
    self._snapshot, self._status = snapshot, status
    self._targets = targets  # (object, method names refused on failure)

  def watch(self, layer):
    """Makes a failure to hand `layer` a waiting value fail the restore
    (a sublayer its `build` makes is watched once it is handed values)."""

    def wrap(original, is_handover):

      @functools.wraps(original)
      def hook(*args, **kwargs):
        name = kwargs.get("name", args[0] if args else None)
        waiting = name in _waiting(layer)
        try:
          result = original(*args, **kwargs)
        except Exception as e:  # pylint: disable=broad-except
          if waiting:
            self.failed(e)
          raise
        if waiting and is_handover:
          child = kwargs.get("trackable", args[1] if len(args) > 1 else None)
          if (isinstance(child, tf_keras.layers.Layer) and _waiting(child) and
              all(child is not w for w in self._layers)):
            self.watch(child)
        if waiting and not any(_waiting(w) for w in self._layers):
          self._release()  # Every waiting value landed: TF's restore, as is.
        return result

      return hook

    self._layers.append(layer)
    _private_api.wrap_layer_restore_hooks(layer, wrap)

  def _release(self):
    """Lets go of the layers, the kept values and the status."""
    for layer in self._layers:
      _private_api.unwrap_layer_restore_hooks(layer)
    self._layers, self._snapshot, self._status = [], None, None
    self._targets = []

  def failed(self, error):
    """Puts back what the restore assigned; its status now raises `error`."""
    if self.error is not None:
      return
    self.error = _private_api.keep_error_as_raised(error)
    self._snapshot.roll_back()
    # A later `tf.function` trace may build the model with fresh weights: its
    # forward pass and the optimizers' updates raise the error from now on.
    _deferred.refuse_use(self._targets,
                         lambda: self.error.with_traceback(None))
    status = self._status
    self._release()
    for name in ("assert_consumed", "assert_existing_objects_matched",
                 "assert_nontrivial_match"):
      # On the instance: TF's status class stays as it is.
      setattr(status, name, self._refusal(name))

  def _refusal(self, name):

    def refuse():
      raise _gate.failure(self.source, self.error) from self.error

    refuse.__name__ = name
    return refuse


def guard_read(read):
  """`read(checkpoint, save_path, ...)` leaving no partial state on failure."""
  layer_class = tf_keras.layers.Layer
  optimizer_classes = (tf_keras.optimizers.Optimizer,
                       tf_keras.optimizers.legacy.Optimizer)

  @functools.wraps(read)
  def guarded(self, save_path, *args, **kwargs):
    models = (save_path is not None and tf.executing_eagerly() and
              _unbuilt_layers(self))
    if not models:
      return read(self, save_path, *args, **kwargs)
    skip = frozenset(id(m) for m in models)
    optimizers = [o for o in _deferred.reachable([self], skip)[1]
                  if isinstance(o, optimizer_classes)]
    for optimizer in optimizers:
      # OptimizerV2 makes its step on first use, where it would take the
      # checkpoint's value unseen: made now, the snapshot holds it.
      getattr(optimizer, "iterations", None)
    snapshot = _deferred.Snapshot([self, self.save_counter], skip)
    status = read(self, save_path, *args, **kwargs)
    waiting = [t for t in _deferred.reachable(models)[1]
               if isinstance(t, layer_class) and _waiting(t)]
    if waiting:
      targets = [(m, ("call",)) for m in models]
      targets += [(o, ("apply_gradients",)) for o in optimizers]
      part = _DeferredPart(save_path, snapshot, status, targets)
      for layer in waiting:
        part.watch(layer)
    return status

  return guarded
