"""The Keras 3 target (the default `tf.keras`): its `KerasTarget` adapter.

Its Keras classes are the package's own (`optimizers/`, `policy`); its hooks
are Keras 3's config names and loading entry points (`keras3_loading`).
"""

from typing import Any

from tf_mixed_precision_compat import keras_target
from tf_mixed_precision_compat.hooks import _adapter


class Keras3Target(_adapter.KerasTarget):
  """Keras 3: the registered endpoints are its classes themselves."""

  name = keras_target.KERAS3

  def symbol_for(self, spec: Any) -> Any:
    return spec.symbol

  def install(self, journal: Any, replace: _adapter.ReplaceFunction) -> None:
    """TF 2.3/2.4's config names and files, taught to Keras 3.

    Applied on both targets: `keras` stays importable next to tf_keras.
    """
    # pylint: disable=g-import-not-at-top
    import keras
    from tf_mixed_precision_compat.hooks import keras3_loading
    # pylint: enable=g-import-not-at-top
    custom_objects = keras.saving.get_custom_objects()
    for name, cls in _legacy_custom_objects().items():
      journal.set_item(custom_objects, name, cls)
    # The replacements live in `keras3_loading`; every public module
    # holding an original (`keras.optimizers`, `keras.models`,
    # `keras.saving`, the `tensorflow.keras` copies) gets the same one.
    for module, name, wrap in (
        (keras.optimizers, "deserialize",
         keras3_loading.wrap_optimizers_deserialize),
        (keras.optimizers, "get", keras3_loading.wrap_optimizers_get),
        (keras.models, "load_model", keras3_loading.wrap_load_model)):
      original = getattr(module, name)
      replace(original, wrap(original))
    journal.set_attr(keras.Model, "load_weights",
                     keras3_loading.wrap_load_weights(keras.Model.load_weights))


def _legacy_custom_objects():
  """Class names TF 2.3/2.4 wrote into configs, mapped to ours.

  Not the loss-scale classes: configs name them only where a loss scale is
  expected (a TF 2.3 optimizer's or `PolicyV1`'s `loss_scale`), and those
  places resolve them; registered globally, a loss scale would also pass as
  a learning-rate schedule, which TF 2.4 refused.
  """
  # pylint: disable=g-import-not-at-top
  from tf_mixed_precision_compat.legacy import _model_config
  from tf_mixed_precision_compat.optimizers import loss_scale_optimizer
  # pylint: enable=g-import-not-at-top
  objects = _model_config.custom_objects()  # Policy and PolicyV1, as TF 2.4.
  objects.update({
      "LossScaleOptimizer": loss_scale_optimizer.LossScaleOptimizer,
      # TF 2.4.4 deserialized its V1 configs as LossScaleOptimizer.
      "LossScaleOptimizerV1": loss_scale_optimizer.LossScaleOptimizer,
  })
  return objects


ADAPTER = Keras3Target()
