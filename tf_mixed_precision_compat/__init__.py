"""TensorFlow 2.3/2.4 mixed-precision loss scaling, on today's TensorFlow.

Importing this package patches nothing. Use the classes directly, through the
TensorFlow-shaped trees `tf_mixed_precision_compat.v2` and `.v1`, or call
`install()` (or `import tf_mixed_precision_compat.auto`) to make the old `tf.`
endpoints resolve again.
"""

from tf_mixed_precision_compat import _version_check

_version_check.check()

# pylint: disable=g-import-not-at-top,wrong-import-position
from tf_mixed_precision_compat import endpoints
from tf_mixed_precision_compat import graph_rewrite
from tf_mixed_precision_compat import legacy
from tf_mixed_precision_compat import policy
from tf_mixed_precision_compat.graph_rewrite import (
    disable_mixed_precision_graph_rewrite)
from tf_mixed_precision_compat.graph_rewrite import (
    disable_mixed_precision_graph_rewrite_v1)
from tf_mixed_precision_compat.graph_rewrite import (
    enable_mixed_precision_graph_rewrite)
from tf_mixed_precision_compat.graph_rewrite import (
    enable_mixed_precision_graph_rewrite_v1)
# The functions shadow their module's name; it stays importable by full name.
from tf_mixed_precision_compat.install import install
from tf_mixed_precision_compat.install import installed
from tf_mixed_precision_compat.install import uninstall
from tf_mixed_precision_compat.optimizers.loss_scale_optimizer import (
    LossScaleOptimizer)
from tf_mixed_precision_compat.optimizers import (
    experimental_loss_scale_optimizer as _experimental)
from tf_mixed_precision_compat.loss_scale import deserialize
from tf_mixed_precision_compat.loss_scale import DynamicLossScale
from tf_mixed_precision_compat.loss_scale import FixedLossScale
from tf_mixed_precision_compat.loss_scale import get
from tf_mixed_precision_compat.loss_scale import LossScale
from tf_mixed_precision_compat.loss_scale import serialize
from tf_mixed_precision_compat.policy import get_layer_policy
from tf_mixed_precision_compat.policy import global_policy
from tf_mixed_precision_compat.policy import Policy
from tf_mixed_precision_compat.policy import policy_scope
from tf_mixed_precision_compat.policy import PolicyV1
from tf_mixed_precision_compat.policy import set_global_policy
from tf_mixed_precision_compat.policy import set_policy
from tf_mixed_precision_compat.optimizers.compat_v1_optimizer import (
    MixedPrecisionLossScaleOptimizer)
LossScaleOptimizerV1 = _experimental.LossScaleOptimizerV1
# Opt-in: more memory for overlapping a step's updates (docs/performance.md).
from tf_mixed_precision_compat.optimizers._gated_apply import (
    set_overlap_memory_budget)

__version__ = "0.1.0"

v1 = endpoints.namespace("v1")
v2 = endpoints.namespace("v2")

__all__ = [
    "DynamicLossScale",
    "FixedLossScale",
    "LossScale",
    "LossScaleOptimizer",
    "LossScaleOptimizerV1",
    "MixedPrecisionLossScaleOptimizer",
    "Policy",
    "PolicyV1",
    "deserialize",
    "disable_mixed_precision_graph_rewrite",
    "disable_mixed_precision_graph_rewrite_v1",
    "enable_mixed_precision_graph_rewrite",
    "enable_mixed_precision_graph_rewrite_v1",
    "endpoints",
    "get",
    "get_layer_policy",
    "global_policy",
    "graph_rewrite",
    "install",
    "installed",
    "legacy",
    "policy",
    "policy_scope",
    "serialize",
    "set_global_policy",
    "set_overlap_memory_budget",
    "set_policy",
    "uninstall",
    "v1",
    "v2",
]
