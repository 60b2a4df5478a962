"""The Keras 3 target (the default `tf.keras`): its `KerasTarget` adapter."""

from typing import Any

from tf_mixed_precision_compat import keras_target
from tf_mixed_precision_compat.hooks import _adapter


class Keras3Target(_adapter.KerasTarget):
  """Keras 3: the endpoints are the package's own classes; its hooks are
  Keras 3's config names and loading entry points (`keras3_loading`)."""

  name = keras_target.KERAS3

  def symbol_for(self, spec: Any) -> Any:
    return spec.symbol

  def install(self, journal: Any, replace: _adapter.ReplaceFunction) -> None:
    """TF 2.3/2.4's config names and files, taught to Keras 3."""
    # pylint: disable=g-import-not-at-top
    import keras
    from tf_mixed_precision_compat.hooks import keras3_loading
    from tf_mixed_precision_compat.legacy import _config
    from tf_mixed_precision_compat.legacy import _model_config
    # pylint: enable=g-import-not-at-top
    custom_objects = keras.saving.get_custom_objects()
    # TF 2.3/2.4 config class names (not the loss scales: registered
    # globally, one would pass as a rate schedule).
    for name, cls in {**_model_config.custom_objects(),
                      **_config.LSO_CLASSES}.items():
      journal.set_item(custom_objects, name, cls)
    # `replace` puts each one in every public module holding the original.
    for module, name, wrap in (
        (keras.optimizers, "deserialize",
         keras3_loading.wrap_optimizers_deserialize),
        (keras.optimizers, "get", keras3_loading.wrap_optimizers_get),
        (keras.models, "load_model", keras3_loading.wrap_load_model)):
      original = getattr(module, name)
      replace(original, wrap(original))
    journal.set_attr(keras.Model, "load_weights",
                     keras3_loading.wrap_load_weights(keras.Model.load_weights))


ADAPTER = Keras3Target()
