"""The loss-scale core: TF 2.3's loss scales and the machinery under them.

`tf_mixed_precision_compat.loss_scale` re-exports TF 2.3's `LossScale`,
`FixedLossScale`, `DynamicLossScale` and `get` / `serialize` / `deserialize`
(`_loss_scales`). The rest of the package (`dynamic_state`, `_scaling`,
`_distribute`, `_tracking`) holds the state and arithmetic the Keras
optimizers share; docs/architecture.md describes it. It knows nothing of Keras.

Example:

>>> from tf_mixed_precision_compat import loss_scale
>>> scale = loss_scale.get("dynamic")
>>> float(scale()), scale.increment_period, scale.multiplier
(32768.0, 2000, 2.0)
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
