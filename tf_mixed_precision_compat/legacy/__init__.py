"""Resuming TF 2.2/2.3/2.4 mixed-precision Keras jobs on today's TensorFlow.

Restores what TF 2.x Keras jobs wrote (`tf.train.Checkpoint` files, H5
files, Keras SavedModels, model configs) into Keras 3 models and this
package's `LossScaleOptimizer`, exactly or not at all:
`restore_checkpoint(path, model, optimizer)`, `load_model(path)`,
`load_saved_model(path)`, `model_from_json` / `model_from_config`, and
`custom_objects()` / `deserialization_scope()` for Keras 3's own loaders.
Loaders never run Python code from the files unless `safe_mode=False`.
How the restore pipeline works: docs/architecture.md.

Example (resuming a TF 2.3 job; `old.json` is its `model.to_json()`):

    model = model_from_json(open("old.json").read())
    opt = LossScaleOptimizer(keras.optimizers.SGD(0.01, momentum=0.9))
    report = restore_checkpoint("/old/job/checkpoints", model, opt)
    print(report.iterations, report.loss_scale, report.counter)

>>> restore_checkpoint("/no/such/ckpt-1", keras.Sequential())
Traceback (most recent call last):
...
FileNotFoundError: No checkpoint at '/no/such/ckpt-1': ...
"""

import keras  # noqa: F401 (the docstring example uses it)

from tf_mixed_precision_compat.legacy._gate import RestoreError
from tf_mixed_precision_compat.legacy._gate import RestoreReport
from tf_mixed_precision_compat.legacy._loaders import load_model
from tf_mixed_precision_compat.legacy._loaders import load_saved_model
from tf_mixed_precision_compat.legacy._loaders import restore_checkpoint
from tf_mixed_precision_compat.legacy._model_config import custom_objects
from tf_mixed_precision_compat.legacy._model_config import (
    deserialization_scope)
from tf_mixed_precision_compat.legacy._model_config import model_from_config
from tf_mixed_precision_compat.legacy._model_config import model_from_json
# Public too, though outside `__all__`.
from tf_mixed_precision_compat.legacy._read_checkpoint import (  # noqa: F401
    checkpoint_prefix, open_checkpoint)
from tf_mixed_precision_compat.optimizers.loss_scale_optimizer import (
    LossScaleOptimizer)  # noqa: F401  # pylint: disable=unused-import

__all__ = ["RestoreError", "RestoreReport", "custom_objects",
           "deserialization_scope", "load_model", "load_saved_model",
           "model_from_config", "model_from_json", "restore_checkpoint"]
