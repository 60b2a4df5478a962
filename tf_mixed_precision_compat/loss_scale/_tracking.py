"""Per-graph variables for trackables that must checkpoint like TF 2.3's.

TF 2.3's loss scales kept one set of variables per graph (eager, each
`tf.compat.v1` graph); `PerGraphWeights` does the same through the public
Trackable hooks.
"""

from __future__ import annotations

from typing import Any

import tensorflow as tf

from tf_mixed_precision_compat import _private_api


def variables_of(trackable: Any) -> list[tf.Variable]:
  """A trackable's variable children (this graph's), in name order."""
  children = _private_api.trackable_children(trackable, "checkpoint")
  return [v for _, v in sorted(children.items())
          if isinstance(v, tf.Variable)]


def graph_key() -> tf.Graph | None:
  """Identifies the context variables are owned by: None when eager."""
  with tf.init_scope():
    if tf.executing_eagerly():
      return None
    return tf.compat.v1.get_default_graph()


class PerGraphWeights(tf.__internal__.tracking.Trackable):
  """A Trackable whose weights are created and checkpointed per graph."""

  def __init__(self) -> None:
    self._weights: dict[tuple[str, tf.Graph | None], tf.Variable] = {}

  def _add_weight(self, name: str, initial_value: Any,
                  dtype: tf.dtypes.DType) -> tf.Variable:
    """A non-trainable, never-aggregated variable; `name` is its ckpt key."""
    key = (name, graph_key())
    if key in self._weights:
      raise RuntimeError(f"Duplicate variables detected. {key}")
    with tf.init_scope():
      # `use_resource=True` keeps graph-mode variables resource variables even
      # after `tf.compat.v1.disable_v2_behavior()`, as TF 2.3 created them.
      variable = tf.compat.v1.Variable(
          initial_value=initial_value,
          name=name,
          dtype=dtype,
          trainable=False,
          use_resource=True,
          synchronization=tf.VariableSynchronization.AUTO,
          aggregation=tf.VariableAggregation.NONE)
    self._weights[key] = variable
    # A checkpoint restored into this object before the variable existed has
    # queued its value here; apply it now.
    self._handle_deferred_dependencies(name=name, trackable=variable)
    return variable

  def _current_weights(self) -> dict[str, tf.Variable]:
    key = graph_key()
    return {name: v for (name, g), v in self._weights.items() if g is key}

  def _trackable_children(self, save_type: str = "checkpoint",
                          **kwargs: Any) -> dict[str, Any]:
    children = super()._trackable_children(save_type, **kwargs)
    children.update(self._current_weights())
    return children

  def _lookup_dependency(self, name: str,
                         cached_dependencies: Any = None) -> Any:
    found = super()._lookup_dependency(name, cached_dependencies)
    if found is None:
      found = self._weights.get((name, graph_key()))
    return found
