"""The loss-scale core: TF 2.3's loss scales and the machinery under them.

This package knows nothing of Keras optimizers, policies or loaders; the
optimizers (`optimizers/`) and `policy` build on it. Its modules:

* `_loss_scales`: TF 2.3's `LossScale`, `FixedLossScale`, `DynamicLossScale`
  and `get`/`serialize`/`deserialize`, re-exported here (the public
  `tf_mixed_precision_compat.loss_scale` module of earlier releases).
* `dynamic_state`: the dynamic-scale core shared by `DynamicLossScale` and
  TF 2.4's Keras optimizer state (`DynamicLossScaleState`), and the argument
  checks both use.
* `_scaling`: the dynamic loss-scale arithmetic and the local finite check.
* `_distribute`: cross-replica agreement on whether a step is finite.
* `_tracking`: per-graph variables and their checkpoint hooks.

Imports go `_loss_scales` -> `dynamic_state` -> `_scaling`, `_distribute`,
`_tracking`; none of them imports this `__init__`'s names, so importing any
module of the package first works.
"""

from tf_mixed_precision_compat.loss_scale._loss_scales import deserialize
from tf_mixed_precision_compat.loss_scale._loss_scales import DynamicLossScale
from tf_mixed_precision_compat.loss_scale._loss_scales import FixedLossScale
from tf_mixed_precision_compat.loss_scale._loss_scales import get
from tf_mixed_precision_compat.loss_scale._loss_scales import LossScale
from tf_mixed_precision_compat.loss_scale._loss_scales import serialize

__all__ = [
    "DynamicLossScale", "FixedLossScale", "LossScale", "deserialize", "get",
    "serialize"
]
