"""The tf_keras target's `KerasTarget` adapter (`TF_USE_LEGACY_KERAS=1`).

tf_keras is imported only when the target is used: every import of a
module that imports it is inside a function.
"""

from typing import Any, Callable

from tf_mixed_precision_compat import _private_api
from tf_mixed_precision_compat import keras_target
from tf_mixed_precision_compat.hooks import _adapter


def _classes():
  """`tf_keras_classes`, which imports tf_keras."""
  # pylint: disable-next=g-import-not-at-top
  from tf_mixed_precision_compat import tf_keras_classes
  return tf_keras_classes


class TfKerasTarget(_adapter.KerasTarget):
  """tf_keras 2.x: TF 2.4's own Keras, plus what it dropped (`classes`)."""

  name = keras_target.TF_KERAS

  def symbol_for(self, spec: Any) -> Any:
    """`REPLACEMENTS[spec.symbol]` for a Keras endpoint, else `spec.symbol`."""
    if not any(path.startswith("keras.") for path in spec.v2 + spec.v1):
      return spec.symbol  # Not a Keras endpoint.
    replacements = _classes().REPLACEMENTS
    if spec.symbol not in replacements:
      raise LookupError(
          f"The tf_keras target has no replacement for the Keras endpoint "
          f"{spec.symbol!r} (tf.{spec.v2[0] if spec.v2 else spec.v1[0]}); "
          "add one to tf_keras_classes.REPLACEMENTS.")
    return replacements[spec.symbol]

  def install(self, journal: Any, replace: _adapter.ReplaceFunction) -> None:
    """tf_keras's config names, private hooks and loading entry points."""
    # pylint: disable-next=g-import-not-at-top
    from tf_mixed_precision_compat.hooks.tf_keras import patches
    classes = _classes()
    tf_keras = classes.tf_keras
    custom_objects = tf_keras.utils.get_custom_objects()
    # TF 2.3/2.4 config class names (not the loss scales, as on Keras 3).
    for name, cls in (("PolicyV1", classes.PolicyV1),
                      ("LossScaleOptimizerV1", classes.SerializedV1)):
      journal.set_item(custom_objects, name, cls)
    patches.restore_tf22_dependencies(journal.set_attr)
    patches.restore_get_gradients(journal.set_attr)
    _patch_optimizer_restore(journal, tf_keras)
    _patch_loading(journal, replace, tf_keras)
    # TF 2.3's `compile` wrapping by a `PolicyV1`'s loss scale.
    model = tf_keras.Model
    journal.set_attr(model, "_get_optimizer",
                     patches.wrap_get_optimizer(
                         _private_api.tf_keras_model_get_optimizer(model)))

  def guard_checkpoint_read(self, read: Callable[..., Any]
                           ) -> Callable[..., Any]:
    """`read`, leaving nothing assigned if its part deferred to a build fails
    (`deferred`)."""
    # pylint: disable-next=g-import-not-at-top
    from tf_mixed_precision_compat.hooks.tf_keras import deferred
    return deferred.guard_read(read, _classes().tf_keras)


def _patch_optimizer_restore(journal, tf_keras):
  """TF 2.x optimizer checkpoints into tf_keras's optimizers (`restore`)."""
  # pylint: disable-next=g-import-not-at-top
  from tf_mixed_precision_compat.hooks.tf_keras import restore
  current = tf_keras.optimizers.Optimizer
  journal.set_attr(current, "_lookup_dependency",
                   restore.wrap_lookup_dependency(
                       _private_api.tf_keras_optimizer_lookup_dependency(
                           current)))
  journal.set_attr(current, "_create_or_restore_slot_variable",
                   restore.make_create_or_restore_slot_variable(tf_keras))
  # OptimizerV2's slots (TF 2.4's class) are checked at restore time too.
  v2 = tf_keras.optimizers.legacy.Optimizer
  journal.set_attr(v2, "_create_or_restore_slot_variable",
                   restore.wrap_v2_create_or_restore_slot_variable(
                       _private_api.tf_keras_v2_create_or_restore_slot_variable(
                           v2)))


def _patch_loading(journal, replace, tf_keras):
  """tf_keras's `load_model`, optimizer configs and H5 weights (`h5`)."""
  # pylint: disable=g-import-not-at-top
  from tf_mixed_precision_compat.hooks.tf_keras import h5
  from tf_mixed_precision_compat.hooks.tf_keras import restore
  # pylint: enable=g-import-not-at-top
  load_model = tf_keras.models.load_model
  replace(load_model,
          h5.wrap_load_model(restore.wrap_load_model(load_model), tf_keras))
  for name, wrap in (("deserialize", h5.wrap_optimizers_deserialize),
                     ("get", h5.wrap_optimizers_get)):
    original = getattr(tf_keras.optimizers, name)
    replace(original, wrap(original, tf_keras))
  journal.set_attr(tf_keras.Model, "load_weights",
                   h5.wrap_load_weights(tf_keras.Model.load_weights, tf_keras))


ADAPTER = TfKerasTarget()
