"""Which Keras `tf.keras` is: the one place the package decides its target.

Two targets share one code base:

* `KERAS3` (the default on TF 2.16+): `tf.keras` is Keras 3; the Keras
  classes are those of `optimizers/` and `policy`.
* `TF_KERAS` (`TF_USE_LEGACY_KERAS=1` with `tf_keras` installed): `tf.keras`
  is tf_keras 2.x, which still has TF 2.4's mixed-precision design; the Keras
  classes are the thin ones of `targets.tf_keras.classes`, built on
  tf_keras's own.

Everything target-independent (the TF1 loss scales, the graph rewrite, the
`tf.compat.v1` optimizer) is shared. `install()` asks `keras_symbol` for the
class to graft at each Keras endpoint. Shared code that must recognise
objects of either Keras (a layer, an optimizer, a global policy) finds the
Keras packages here (`loaded_kerases`, `loaded_tf_keras`, `import_tf_keras`),
never by name itself.

Example:

>>> active() in (KERAS3, TF_KERAS)
True
"""

import importlib
import importlib.util
import os
import sys
import types
from typing import Any, Optional

import tensorflow as tf

from tf_mixed_precision_compat import _private_api

__all__ = ["KERAS3", "TF_KERAS", "active", "import_tf_keras", "keras_symbol",
           "loaded_kerases", "loaded_tf_keras", "select_tf_keras",
           "target_module"]

KERAS3 = "keras3"
TF_KERAS = "tf_keras"


def active() -> str:
  """Returns the target `tf.keras` resolves to now.

  Returns:
    `TF_KERAS` if `tf.keras` is tf_keras (TF_USE_LEGACY_KERAS=1), else
    `KERAS3`.
  """
  # TF's lazy loader resolves `tf.keras` once, from TF_USE_LEGACY_KERAS and
  # what is installed. Its module name may be `tensorflow.keras` (an import
  # statement re-executed Keras' API files under that name), so the package
  # defining its `Model` tells which Keras it is.
  model = getattr(tf.keras, "Model", None)
  name = getattr(model, "__module__", None) or ""
  return TF_KERAS if name.split(".")[0] == "tf_keras" else KERAS3


def loaded_tf_keras() -> Optional[types.ModuleType]:
  """tf_keras if the process already imported it, else None.

  Checks whether an object is a tf_keras one without importing tf_keras: an
  object of a package that was never imported cannot be one of its.

  Returns:
    The `tf_keras` module, or None.
  """
  return sys.modules.get(TF_KERAS)


def loaded_kerases() -> list[types.ModuleType]:
  """The Keras packages already imported: Keras 3's, then tf_keras.

  Returns:
    A list of zero to two modules (`keras`, `tf_keras`); none is imported.
  """
  return [module for module in (sys.modules.get("keras"), loaded_tf_keras())
          if module is not None]


def import_tf_keras() -> Optional[types.ModuleType]:
  """tf_keras, imported if installed (an optional dependency), else None.

  For what must work in a fresh process, e.g. deserializing a config that a
  wrapped tf_keras optimizer wrote.

  Returns:
    The `tf_keras` module, or None if it is not installed.
  """
  try:
    return importlib.import_module(TF_KERAS)
  except ImportError:
    return None


def target_module() -> Optional[types.ModuleType]:
  """Returns the module holding the active target's Keras classes, or None.

  Returns:
    `targets.tf_keras.classes` for `TF_KERAS`; None for `KERAS3`, whose
    classes are the registered endpoints themselves.
  """
  if active() == TF_KERAS:
    return importlib.import_module(f"{__name__}.tf_keras.classes")
  return None


def keras_symbol(symbol: Any) -> Any:
  """Returns what to graft for a registered endpoint `symbol` on this target.

  Args:
    symbol: A registered endpoint symbol (Keras 3 target).

  Returns:
    The active target's replacement for a Keras endpoint, else `symbol`.
  """
  module = target_module()
  if module is None:
    return symbol
  return module.REPLACEMENTS.get(_key(symbol), symbol)


def _key(symbol):
  return f"{symbol.__module__.rpartition('.')[2]}.{symbol.__name__}"


_ENV = "TF_USE_LEGACY_KERAS"
_MOVE = ("import tf_mixed_precision_compat.auto_tf_keras right after "
         "`import tensorflow as tf`, before anything uses tf.keras "
         f"(or set {_ENV}=1 before Python starts)")


def _install_command():
  major, minor = tf.__version__.split(".")[:2]
  return f"pip install tf-keras=={major}.{minor}.*"


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
      isinstance(keras_module, types.ModuleType) and active() == KERAS3):
    uses.append("tf.keras")  # Resolved; TF replaced its loader by Keras 3.
  imported = sys.modules.get("tensorflow.keras")
  model = getattr(imported, "Model", None)
  if imported is not None and not getattr(
      model, "__module__", "").startswith("tf_keras."):
    uses.append("import tensorflow.keras")
  return uses


def _put_tf_keras_first_on_tensorflow_path():
  """What `import tensorflow` does with TF_USE_LEGACY_KERAS=1.

  Import statements naming `tensorflow.keras...` search `tensorflow.__path__`;
  TF puts Keras 3's API directory first unless the variable was set then.
  """
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

  TF reads `TF_USE_LEGACY_KERAS` when `tf.keras` (or `tf.optimizers`, ...)
  is first used, so setting it after `import tensorflow` and before that
  use selects tf_keras, for the whole process (the variable stays set, so
  worker processes it starts choose tf_keras too). Like `import tensorflow`
  under the variable, it also puts tf_keras's API directory first on
  `tensorflow.__path__`, where import statements naming `tensorflow.keras...`
  look. Neither is a patch `uninstall()` undoes: the target is chosen once
  per process. Called by `import tf_mixed_precision_compat.auto_tf_keras`.

  Raises:
    ImportError: tf_keras is not installed (the message names the `pip`
      command).
    RuntimeError: `tf.keras` (or a TF alias of it) already resolved to
      Keras 3, which cannot be undone in this process.

  Example:

  >>> select_tf_keras()  # doctest: +SKIP
  >>> active() == TF_KERAS  # doctest: +SKIP
  True
  """
  if importlib.util.find_spec("tf_keras") is None:
    raise ImportError(
        "The tf_keras target needs the tf_keras package, which is not "
        f"installed: `{_install_command()}` (its version must match "
        f"TensorFlow {tf.__version__}).")
  uses = _keras3_uses()
  if uses:
    raise RuntimeError(
        "Cannot select the tf_keras target: tf.keras already resolved to "
        f"Keras 3 in this process (through {', '.join(uses)}). Place "
        f"{_MOVE}.")
  os.environ[_ENV] = "1"
  _put_tf_keras_first_on_tensorflow_path()
  if active() != TF_KERAS:  # Resolves `tf.keras` now.
    raise RuntimeError(
        f"tf.keras did not resolve to tf_keras although {_ENV}=1 "
        f"(it is {getattr(tf.keras, '__name__', tf.keras)!r}).")
