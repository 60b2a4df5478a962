"""Selecting the tf_keras target after `import tensorflow` (`auto_tf_keras`).

TF reads `TF_USE_LEGACY_KERAS` when `tf.keras` is first used; `select_tf_keras`
sets it then, or says why it is too late.
"""

import importlib.util
import os
import sys
import types

import tensorflow as tf

from tf_mixed_precision_compat import _private_api
from tf_mixed_precision_compat import keras_target

__all__ = ["select_tf_keras"]

_ENV = "TF_USE_LEGACY_KERAS"


def _keras3_uses():
  """Where `tf.keras` (or a TF Keras alias) already resolved to Keras 3."""
  uses = []
  for prefix, namespace in (("tf", tf), ("tf.compat.v1", tf.compat.v1),
                            ("tf.compat.v2", tf.compat.v2)):
    for name, value in sorted(vars(namespace).items()):
      version = _private_api.keras_lazy_loader_version(value)
      # TF keeps `tf.optimizers` etc. as `tf._optimizers`.
      use = f"{prefix}.{name.lstrip('_')}"
      if version not in (None, "tf_keras") and use not in uses:
        uses.append(use)
  keras_module = vars(tf).get("keras")
  if (not _private_api.is_keras_lazy_loader(keras_module) and
      isinstance(keras_module, types.ModuleType) and
      keras_target.active() == keras_target.KERAS3):
    uses.append("tf.keras")  # Resolved; TF replaced its loader by Keras 3.
  imported = sys.modules.get("tensorflow.keras")
  model = getattr(imported, "Model", None)
  if imported is not None and not getattr(
      model, "__module__", "").startswith("tf_keras."):
    uses.append("import tensorflow.keras")
  return uses


def _put_tf_keras_first_on_tensorflow_path():
  """What `import tensorflow` does with TF_USE_LEGACY_KERAS=1 (import
  statements naming `tensorflow.keras...` search `tensorflow.__path__`)."""
  spec = importlib.util.find_spec("tf_keras.api._v2.keras")
  if spec is None or not spec.submodule_search_locations:
    return
  api_dir = os.path.dirname(list(spec.submodule_search_locations)[0])
  path = tf.__path__
  if path and path[0] != api_dir:
    if api_dir in path:
      path.remove(api_dir)
    path.insert(0, api_dir)


def select_tf_keras() -> None:
  """Makes `tf.keras` tf_keras, as `TF_USE_LEGACY_KERAS=1` would have.

  Sets the variable, which TF reads when `tf.keras` (or `tf.optimizers`, ...)
  is first used, for the whole process and the workers it starts, and puts
  tf_keras's API directory first on `tensorflow.__path__`, as `import
  tensorflow` under it does. `uninstall()` undoes neither: the target is
  chosen once per process. Called by `auto_tf_keras`.

  Raises:
    ImportError: tf_keras is not installed (the message names the `pip`
      command).
    RuntimeError: `tf.keras` (or a TF alias of it) already resolved to
      Keras 3, which cannot be undone in this process.

  Example:

  >>> select_tf_keras()  # doctest: +SKIP
  >>> keras_target.active() == keras_target.TF_KERAS  # doctest: +SKIP
  True
  """
  if importlib.util.find_spec("tf_keras") is None:
    major, minor = tf.__version__.split(".")[:2]
    raise ImportError(
        "The tf_keras target needs the tf_keras package, which is not "
        f"installed: `pip install tf-keras=={major}.{minor}.*` (its version "
        f"must match TensorFlow {tf.__version__}).")
  uses = _keras3_uses()
  if uses:
    raise RuntimeError(
        "Cannot select the tf_keras target: tf.keras already resolved to "
        f"Keras 3 in this process (through {', '.join(uses)}). Place import "
        "tf_mixed_precision_compat.auto_tf_keras right after `import "
        "tensorflow as tf`, before anything uses tf.keras (or set "
        f"{_ENV}=1 before Python starts).")
  os.environ[_ENV] = "1"
  _put_tf_keras_first_on_tensorflow_path()
  if keras_target.active() != keras_target.TF_KERAS:  # Resolves `tf.keras` now.
    raise RuntimeError(
        f"tf.keras did not resolve to tf_keras although {_ENV}=1 "
        f"(it is {getattr(tf.keras, '__name__', tf.keras)!r}).")
