"""The tf_keras target's `KerasTarget` adapter (`TF_USE_LEGACY_KERAS=1`).

tf_keras is imported only when the target is used: every import of a
module that imports it is inside a function.
"""

from typing import Any, Callable

from tf_mixed_precision_compat import keras_target
from tf_mixed_precision_compat.hooks import _adapter


class TfKerasTarget(_adapter.KerasTarget):
  """tf_keras 2.x: TF 2.4's own Keras, plus what it dropped."""

  name = keras_target.TF_KERAS

  def symbol_for(self, spec: Any) -> Any:
    """`REPLACEMENTS[spec.symbol]` for a Keras endpoint, else `spec.symbol`."""
    if not any(path.startswith("keras.") for path in spec.v2 + spec.v1):
      return spec.symbol  # Not a Keras endpoint.
    # pylint: disable-next=g-import-not-at-top
    from tf_mixed_precision_compat import tf_keras_classes
    replacements = tf_keras_classes.REPLACEMENTS
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
    patches.install(journal, replace)

  def guard_checkpoint_read(self, read: Callable[..., Any]
                           ) -> Callable[..., Any]:
    """`read`, leaving nothing assigned if its part deferred to a build fails
    (`deferred`)."""
    # pylint: disable-next=g-import-not-at-top
    from tf_mixed_precision_compat.hooks.tf_keras import deferred
    return deferred.guard_read(read)


ADAPTER = TfKerasTarget()
