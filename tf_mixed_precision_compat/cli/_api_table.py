"""TF 2.3/2.4 mixed-precision names, their Keras 3 replacements, what changes.

Keys are qualified names normalised by `normalise` (`keras.` for every
`tensorflow.keras.` path, `tf.` for the rest of `tensorflow.`).
"""

from __future__ import annotations

from typing import Optional

_EXP = "keras.mixed_precision.experimental."
_V1 = "tf.compat.v1.mixed_precision."
_SAME_V1 = ("the same TF class, still shipped (deprecated) under "
            "tf.compat.v1; Keras 3's LossScaleOptimizer does not take it")
_LSO_CHANGES = (
    "Keras 3's dynamic loss scaling: same schedule (initial 2**15, doubled "
    "after dynamic_growth_steps finite steps, halved on overflow, the step "
    "skipped); `loss_scale` is `dynamic_scale`, `get_scaled_loss` is "
    "`scale_loss`, `apply_gradients` unscales the gradients itself; TF's "
    "floor of 1 on the scale is gone; a skipped step no longer counts in "
    "`iterations` (TF 2.x counted it, so Adam's bias correction and "
    "iteration-based schedules shift by the number of skipped steps); "
    "checkpoints use Keras 3's layout (convert old ones with `convert`)")

# name -> (replacement, what changes). Replacement None: no rewrite exists.
FUNCTIONS: dict[str, tuple[Optional[str], str]] = {
    _EXP + "Policy": ("keras.mixed_precision.Policy",
                      "same dtypes; a policy holds no loss scale any more "
                      "(its `loss_scale` argument and property are gone)"),
    _EXP + "set_policy": ("keras.mixed_precision.set_global_policy",
                          "same global policy"),
    _EXP + "global_policy": ("keras.mixed_precision.global_policy",
                             "same global policy (a Keras 3 DTypePolicy)"),
    _EXP + "get_layer_policy": (None, "use `layer.dtype_policy`"),
    _EXP + "LossScaleOptimizer": ("keras.optimizers.LossScaleOptimizer",
                                  _LSO_CHANGES),
    "keras.mixed_precision.LossScaleOptimizer": (
        "keras.optimizers.LossScaleOptimizer", _LSO_CHANGES),
    "tf.compat.v1.train.experimental.MixedPrecisionLossScaleOptimizer": (
        _V1 + "MixedPrecisionLossScaleOptimizer", _SAME_V1),
    "tf.compat.v1.train.experimental.enable_mixed_precision_graph_rewrite": (
        _V1 + "enable_mixed_precision_graph_rewrite", _SAME_V1),
    "tf.compat.v1.train.experimental.disable_mixed_precision_graph_rewrite": (
        _V1 + "disable_mixed_precision_graph_rewrite", _SAME_V1),
}
# The graph rewrite's enable functions, rewritten per optimizer kind.
GRAPH_REWRITE = {
    "tf.train.experimental.enable_mixed_precision_graph_rewrite",
    "tf.compat.v1.train.experimental.enable_mixed_precision_graph_rewrite",
    "tf.compat.v1.mixed_precision.enable_mixed_precision_graph_rewrite",
}
# The v2 disable function: rewritten as a whole call.
GRAPH_REWRITE_OFF = (
    "tf.train.experimental.disable_mixed_precision_graph_rewrite",
    "tf.config.optimizer.set_experimental_options("
    "{'auto_mixed_precision': False})",
    "the same Grappler option switched off (optimizers it wrapped keep "
    "scaling, as in TF 2.x)")
GRAPPLER_ON = ("tf.config.optimizer.set_experimental_options("
               "{'auto_mixed_precision': True})")
GRAPH_REWRITE_CHANGES = (
    "the same Grappler `auto_mixed_precision` rewrite of tf.function "
    "graphs (float16 on GPUs), switched on by TF's own option, and the "
    "Keras optimizer wrapped in Keras 3's LossScaleOptimizer (as TF 2.x "
    "wrapped it in its own). ")
for _cls in ("LossScale", "FixedLossScale", "DynamicLossScale"):
  for _where in ("tf.mixed_precision.experimental.",
                 "tf.train.experimental.",
                 "tf.compat.v1.train.experimental.",
                 "tf.compat.v1.mixed_precision.experimental."):
    FUNCTIONS[_where + _cls] = (_V1 + _cls, _SAME_V1)
# TF 2.4 names Keras 3 has natively: reported, left as they are.
NATIVE = {"keras.mixed_precision.Policy", "keras.mixed_precision.global_policy",
          "keras.mixed_precision.set_global_policy"}

# Methods and attributes of the loss-scale optimizers: (replacement, change).
METHODS: dict[str, tuple[Optional[str], str]] = {
    "get_scaled_loss": ("scale_loss",
                        "same product; Keras 3 reads the scale variable only "
                        "once the optimizer is built (before that, a traced "
                        "tf.function bakes in initial_scale), so build the "
                        "optimizer before the first step"),
    "get_unscaled_gradients": (
        "", "dropped: Keras 3's apply_gradients divides by the scale itself; "
        "the same when the gradients only go to apply_gradients (and "
        "finiteness checks); code that clips or logs them must divide by "
        "`dynamic_scale` itself"),
    "dynamic_counter": ("step_counter", "same counter, a Keras 3 variable"),
    "loss_scale": ("dynamic_scale", "the current scale: Keras 3's "
                   "`dynamic_scale` variable, read as the tensor TF 2.3's "
                   "`loss_scale()` and TF 2.4's `loss_scale` gave"),
}


def is_tf2_lso(name: str) -> bool:
  """Whether `name` is one of TF 2.3/2.4's Keras LossScaleOptimizer classes."""
  return name in FUNCTIONS and name.startswith("keras.") and name.endswith(
      "LossScaleOptimizer")


def normalise(name: str) -> str:
  """`tensorflow.keras.x` -> `keras.x`; `tensorflow.x` -> `tf.x`.

  Example:

  >>> normalise("tensorflow.keras.mixed_precision.experimental.Policy")
  'keras.mixed_precision.experimental.Policy'
  """
  for v2 in ("tensorflow.compat.v2.", "tf.compat.v2."):
    if name.startswith(v2):  # TF 2.x's `tf.compat.v2` is `tf` itself.
      name = "tensorflow." + name[len(v2):]
  for prefix in ("tensorflow.python.keras.", "tensorflow.keras.",
                 "tf.keras.", "tf_keras."):
    if name.startswith(prefix):
      return "keras." + name[len(prefix):]
  if name.startswith("tensorflow."):
    return "tf." + name[len("tensorflow."):]
  return name
