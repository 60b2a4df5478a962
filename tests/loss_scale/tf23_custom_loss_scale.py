"""A user's own TF 2.3 `LossScale` subclass, shared by fixtures and tests.

`tools/gen_tf23_lso_v1_fixtures.py` defines it on TF 2.3.4's
`tf.mixed_precision.experimental.LossScale` and records what TF 2.3.4's
experimental `LossScaleOptimizer` did with it; the tests define it on this
package's `LossScale` and compare. Kept Python 3.8 compatible (the reference
interpreter).
"""


def define(base, tf):
  """Returns the `HalvingLossScale` class derived from `base`.

  The scale starts at `initial` (float32 variable "scale"), halves (never
  below 1) on a step with a non-finite gradient, which is then skipped, and
  stays put otherwise; "steps" (int64) counts every update.
  """

  class HalvingLossScale(base):
    """Halves on overflow, never grows; counts its updates."""

    def __init__(self, initial=1024.):
      super().__init__()
      self._initial = float(initial)
      self._scale = self._add_weight("scale", self._initial, tf.float32)
      self._steps = self._add_weight("steps", 0, tf.int64)

    def __call__(self):
      return tf.convert_to_tensor(self._scale)

    def update(self, grads):
      grads = [g for g in tf.nest.flatten(grads) if g is not None]
      finite = tf.reduce_all(
          tf.stack([tf.reduce_all(tf.math.is_finite(g)) for g in grads]))
      new_scale = tf.where(finite, self._scale,
                           tf.maximum(self._scale / 2., 1.))
      update_op = tf.group(self._scale.assign(new_scale),
                           self._steps.assign_add(1))
      return update_op, finite

    def get_config(self):
      return {"initial": self._initial}

  return HalvingLossScale
