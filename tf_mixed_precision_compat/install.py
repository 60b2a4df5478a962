"""`install()` / `uninstall()`: the TF 2.3/2.4 endpoints, back under `tf`.

Importing the package patches nothing. `install()` makes an old job run
unchanged:

* every registered endpoint (`endpoints.all_specs()`) resolves under `tf` (its
  v2 paths) and `tf.compat.v1` (its v1 paths), e.g.
  `tf.mixed_precision.experimental.DynamicLossScale`,
  `tf.keras.mixed_precision.experimental.LossScaleOptimizer`,
  `tf.compat.v1.train.experimental.MixedPrecisionLossScaleOptimizer`;
  namespaces TF 2.21 no longer has (`tf.mixed_precision`,
  `tf.keras.mixed_precision.experimental`) are created, and importable
  (`from tensorflow.keras.mixed_precision import experimental`, as TF 2.3's
  guide wrote it);
* the class names TF 2.3/2.4 wrote into configs (`Policy`, `PolicyV1`,
  `LossScaleOptimizer`, `LossScaleOptimizerV1`) are registered with Keras 3
  deserialization (`keras.saving.get_custom_objects()`); the loss-scale
  classes are found only where a config expects a loss scale;
* `Model.compile` wraps optimizers as TF 2.3/2.4 did (see `_compile`;
  `enable_compile_integration()` makes only this change);
* plain `tf.saved_model.load` serves SavedModels written by TF 2.x Keras
  (it otherwise fails on their optimizer object; see `legacy`).
* `keras.optimizers.deserialize` / `get`, `keras.models.load_model` and
  `keras.Model.load_weights` (also reached through `tf.keras`) load what TF
  2.x jobs wrote (optimizer configs, H5 models and SavedModels, TF-format and
  H5 weights) as `legacy` does; Keras 3's own formats go to Keras 3
  unchanged (see `legacy/_entry_points.py`).
* every import form reaches the same: `from tensorflow.keras.models import
  load_model`, `import tensorflow.keras.optimizers as o`, ... yield the
  modules `tf.keras` resolves to, the replaced functions are replaced where
  Keras defines them too, and names bound before `install()` are rebound or
  named in one warning (see `_import_hooks`).

`uninstall()` puts back exactly what was there: attributes, `sys.modules`
entries and custom objects that did not exist are removed, replaced ones are
restored, and the compile integration is disabled unless it was enabled
before `install()`. Both are idempotent and serialized by a lock.

Design note: on TF 2.21 `tf.keras.mixed_precision`, `tf.compat.v1.keras.
mixed_precision` and Keras 3's own `keras.mixed_precision` are one and the same
module object (TF's lazy `tf.keras` loaders resolve to it, and copy its
attributes into every loader a user holds, e.g. `from tensorflow import
keras`). Giving `tf.keras` a separate namespace would leave such references
behind, so the endpoints are grafted onto that shared module: while installed,
`keras.mixed_precision.LossScaleOptimizer` (and `Policy`, `global_policy`,
`set_global_policy`) are ours too. Keras 3's canonical paths are untouched:
`keras.optimizers.LossScaleOptimizer`, `keras.DTypePolicy`,
`keras.config.set_dtype_policy`, `keras.dtype_policies`.

Example:

>>> import tensorflow as tf
>>> install()
>>> tf.mixed_precision.experimental.DynamicLossScale.__module__
'tf_mixed_precision_compat.loss_scale._loss_scales'
>>> uninstall()
>>> hasattr(tf, "mixed_precision")
False
"""

import importlib
import itertools
import sys
import threading
import types
from typing import Any

import keras
import tensorflow as tf

from tf_mixed_precision_compat import _compile
from tf_mixed_precision_compat import _import_hooks
from tf_mixed_precision_compat import _private_api
from tf_mixed_precision_compat import endpoints
from tf_mixed_precision_compat.legacy import _checkpoint_restore
from tf_mixed_precision_compat.legacy import _entry_points
from tf_mixed_precision_compat.legacy import _model_config
from tf_mixed_precision_compat.legacy import _saved_model
from tf_mixed_precision_compat.targets.tf_keras import (
    deferred as _tf_keras_deferred)
from tf_mixed_precision_compat.targets.tf_keras import h5 as _tf_keras_h5
from tf_mixed_precision_compat.targets.tf_keras import (
    restore as _tf_keras_restore)
from tf_mixed_precision_compat.optimizers import loss_scale_optimizer
from tf_mixed_precision_compat import targets

__all__ = ["compile_integration_enabled", "disable_compile_integration",
           "enable_compile_integration", "install", "installed", "uninstall"]

_MISSING = object()

# `import tensorflow.keras.mixed_precision` does not return the module
# `tf.keras.mixed_precision` resolves to: TF puts Keras' `_tf_keras` directory
# on `tensorflow.__path__`, so the import statement loads that file again as a
# separate module named this.
_TF_KERAS_IMPORT_NAME = "tensorflow.keras"

_lock = threading.Lock()
_journal = None  # The undo log while installed, else None.


def _legacy_custom_objects():
  """Class names TF 2.3/2.4 wrote into configs, mapped to ours.

  The loss-scale classes are not among them: configs name them only where
  a loss scale is expected (a TF 2.3 optimizer's or `PolicyV1`'s
  `loss_scale`), and those places resolve them themselves. Registered
  globally, they would also be found where a learning-rate schedule is
  expected, which TF 2.4 refused.
  """
  # Policy and PolicyV1, as TF 2.4 loaded them.
  objects = _model_config.custom_objects()
  objects.update({
      "LossScaleOptimizer": loss_scale_optimizer.LossScaleOptimizer,
      # TF 2.4.4 deserialized its V1 configs as LossScaleOptimizer.
      "LossScaleOptimizerV1": loss_scale_optimizer.LossScaleOptimizer,
  })
  return objects


class _Journal:
  """Applies changes and remembers how to undo each, first value wins."""

  def __init__(self):
    self._undo = []
    self._seen = set()

  def set_attr(self, obj, name, value):
    key = ("attr", id(obj), name)
    if key not in self._seen:
      self._seen.add(key)
      old = getattr(obj, name, _MISSING)
      self._undo.append(lambda: _restore_attr(obj, name, old))
    setattr(obj, name, value)

  def set_item(self, mapping, key, value):
    seen_key = ("item", id(mapping), key)
    if seen_key not in self._seen:
      self._seen.add(seen_key)
      old = mapping.get(key, _MISSING)
      self._undo.append(lambda: _restore_item(mapping, key, old))
    mapping[key] = value

  def on_undo(self, fn):
    self._undo.append(fn)

  def undo(self):
    """Undoes everything, newest first; raises the first failure at the end."""
    errors = []
    while self._undo:
      try:
        self._undo.pop()()
      except Exception as e:  # pylint: disable=broad-except
        errors.append(e)
    self._seen.clear()
    if errors:
      raise errors[0]


def _restore_attr(obj, name, old):
  if old is _MISSING:
    if hasattr(obj, name):
      delattr(obj, name)
  else:
    setattr(obj, name, old)


def _restore_item(mapping, key, old):
  if old is _MISSING:
    mapping.pop(key, None)
  else:
    mapping[key] = old


def _namespace(journal, parent, part):
  """Returns `parent.part`, creating (and registering) a module if missing."""
  child = getattr(parent, part, None)
  if child is not None:
    return child
  name = f"{parent.__name__}.{part}"
  child = types.ModuleType(name)
  child.__doc__ = (f"TensorFlow 2.3/2.4 `{part}` namespace, re-created by "
                   "tf_mixed_precision_compat.install().")
  journal.set_attr(parent, part, child)
  if name not in sys.modules:  # Makes `from <parent> import <part>` work.
    journal.set_item(sys.modules, name, child)
  return child


def _graft(journal, root, path, symbol):
  *parents, leaf = path.split(".")
  node = root
  for part in parents:
    node = _namespace(journal, node, part)
  journal.set_attr(node, leaf, symbol)


def _keras_namespaces(root):
  """The distinct module objects a TF 2.3/2.4 job may reach as its
  `tf.keras.mixed_precision`.

  Args:
    root: The module `tf.keras` resolves to (`_tf_keras_root`).
  """
  candidates = [vars(root).get("mixed_precision"),  # What `tf.keras` has.
                vars(tf).get("keras")]
  candidates[1] = getattr(candidates[1], "mixed_precision", None)
  # An import statement naming `tensorflow.keras...` before install() loaded
  # Keras' API files again as separate modules (and rebound `tf.keras`).
  imported_package = sys.modules.get(_TF_KERAS_IMPORT_NAME)
  if imported_package is not None:
    candidates.append(vars(imported_package).get("mixed_precision"))
  candidates.append(sys.modules.get(f"{_TF_KERAS_IMPORT_NAME}.mixed_precision"))
  unique = []
  for module in candidates:
    if (isinstance(module, types.ModuleType) and
        all(module is not m for m in unique)):
      unique.append(module)
  return unique


def _tf_keras_root():
  """The module `tf.keras` resolves to on the active target."""
  return importlib.import_module(
      _private_api.tf_keras_root_name(targets.active()))


def _public_holders(name, original,
                    prefixes=("keras.", _TF_KERAS_IMPORT_NAME)):
  """Loaded public Keras modules whose attribute `name` is `original`.

  Besides `sys.modules`, TF's resolved Keras lazy loaders (`tf.optimizers`, a
  `from tensorflow import keras` taken early) hold copies of a module's
  attributes.
  """
  candidates = [module for module_name, module in list(sys.modules.items())
                if module is not None and ".src" not in module_name and
                module_name.startswith(prefixes)]
  candidates += [value for value in vars(tf).values()
                 if isinstance(value, types.ModuleType)]
  holders = []
  for module in candidates:
    try:
      value = vars(module).get(name)  # Never triggers a lazy loader.
    except TypeError:
      continue
    if value is original and all(module is not h for h in holders):
      holders.append(module)
  return holders


def _replace_function(journal, replaced, original, replacement,
                      prefixes=("keras.", _TF_KERAS_IMPORT_NAME)):
  """Puts `replacement` wherever `original` is public, and where defined.

  The defining module (e.g. `keras.src.saving.saving_api`) is what Keras API
  modules executed after install() bind from (see `_import_hooks`).
  `replaced` collects `{id(original): (original, replacement)}`.
  """
  name = original.__name__
  for holder in _public_holders(name, original, prefixes):
    journal.set_attr(holder, name, replacement)
  defining = _private_api.defining_module(original)
  if defining is not None:
    journal.set_attr(defining, name, replacement)
  replaced[id(original)] = (original, replacement)


def _restore_late_holders(replaced):
  """Puts originals back in Keras modules that bound a replacement late."""
  originals = {id(pair[1]): pair[0] for pair in replaced.values()}
  prefixes = ("keras.", "tf_keras.", _TF_KERAS_IMPORT_NAME)
  modules = [module for name, module in list(sys.modules.items())
             if module is not None and name.startswith(prefixes)]
  modules += [value for value in vars(tf).values()
              if isinstance(value, types.ModuleType)]
  for module in modules:
    try:
      namespace = vars(module)
    except TypeError:
      continue
    for name, value in list(namespace.items()):
      original = originals.get(id(value))
      if original is not None:
        setattr(module, name, original)


def _patch_entry_points(journal, replaced):
  """Keras 3's loading functions, taught TF 2.x files and configs.

  The replacements live in `legacy/_entry_points.py`; every public module that
  holds the original (`keras.optimizers`, `keras.models`, `keras.saving`,
  the `tensorflow.keras` copies) gets the same replacement.
  """
  for module, name, wrap in (
      (keras.optimizers, "deserialize",
       _entry_points.wrap_optimizers_deserialize),
      (keras.optimizers, "get", _entry_points.wrap_optimizers_get),
      (keras.models, "load_model", _entry_points.wrap_load_model)):
    original = getattr(module, name)
    _replace_function(journal, replaced, original, wrap(original))
  journal.set_attr(keras.Model, "load_weights",
                   _entry_points.wrap_load_weights(
                       keras.Model.load_weights))


def _graft_endpoints(journal, keras_namespaces, hidden):
  """Every registered endpoint under `tf`, `tf.compat.v1` and Keras.

  `hidden` collects `{(name, id(old)): old}` of Keras objects the grafts
  cover at a `tf.keras` path (for `_import_hooks.early_names`).
  """
  prefix = "keras.mixed_precision."
  for spec in endpoints.all_specs():
    symbol = targets.keras_symbol(spec.symbol)
    keras_paths = [path[len(prefix):] for path in spec.v2 + spec.v1
                   if path.startswith(prefix)]
    for path, namespace in itertools.product(keras_paths, keras_namespaces):
      old = vars(namespace).get(path)  # Before `tf.keras` is grafted.
      if old is not None and old is not symbol:
        hidden[(path, id(old))] = old
    for path in spec.v2:
      _graft(journal, tf, path, symbol)
    for path in spec.v1:
      _graft(journal, tf.compat.v1, path, symbol)
    for path, namespace in itertools.product(keras_paths, keras_namespaces):
      _graft(journal, namespace, path, symbol)


def _apply(journal):
  target = targets.target_module()  # None: Keras 3; else the tf_keras target.
  root = _tf_keras_root()
  replaced, hidden = {}, {}
  # Undone last: Keras API modules executed while installed bound a
  # replacement from its defining module.
  journal.on_undo(lambda: _restore_late_holders(replaced))
  _graft_endpoints(journal, _keras_namespaces(root), hidden)
  if target is not None:
    _apply_tf_keras_target(journal, target, replaced)
  custom_objects = keras.saving.get_custom_objects()
  for name, cls in _legacy_custom_objects().items():
    journal.set_item(custom_objects, name, cls)
  if not compile_integration_enabled():  # Else enabled before, and stays.
    _patch_compile(journal.set_attr)
  _patch_checkpoint_restore(journal, target)
  if not _saved_model.serving_enabled():
    _saved_model.enable_serving()
    journal.on_undo(_saved_model.disable_serving)
  _patch_entry_points(journal, replaced)
  _import_hooks.install_finder(journal, root)
  _import_hooks.rebind_early_names(journal, replaced)
  return _import_hooks.early_names(
      {key: pair[0] for key, pair in replaced.items()}, hidden)


def _apply_tf_keras_target(journal, target, replaced):
  """tf_keras's config names and TF 2.3's `compile` wrapping by PolicyV1."""
  custom_objects = target.tf_keras.utils.get_custom_objects()
  for name, cls in target.custom_objects().items():
    journal.set_item(custom_objects, name, cls)
  target.restore_tf22_dependencies(journal.set_attr)
  target.restore_get_gradients(journal.set_attr)
  # TF 2.x optimizer checkpoints into tf_keras's current optimizer classes.
  current = target.tf_keras.optimizers.Optimizer
  journal.set_attr(current, "_lookup_dependency",
                   _tf_keras_restore.wrap_lookup_dependency(
                       _private_api.tf_keras_optimizer_lookup_dependency(
                           current)))
  journal.set_attr(current, "_create_or_restore_slot_variable",
                   _tf_keras_restore.make_create_or_restore_slot_variable(
                       target.tf_keras))
  # OptimizerV2's slots (TF 2.4's class) are checked at restore time too.
  v2 = target.tf_keras.optimizers.legacy.Optimizer
  journal.set_attr(v2, "_create_or_restore_slot_variable",
                   _tf_keras_restore.wrap_v2_create_or_restore_slot_variable(
                       _private_api.tf_keras_v2_create_or_restore_slot_variable(
                           v2)))
  load_model = target.tf_keras.models.load_model
  _replace_function(journal, replaced, load_model,
                    _tf_keras_h5.wrap_load_model(
                        _tf_keras_restore.wrap_load_model(
                            load_model, _entry_points.is_tf2x_saved_model),
                        target.tf_keras),
                    ("tf_keras.", _TF_KERAS_IMPORT_NAME))
  _patch_tf_keras_h5(journal, replaced, target.tf_keras)
  model = target.tf_keras.Model
  journal.set_attr(model, "_get_optimizer",
                   target.wrap_get_optimizer(
                       _private_api.tf_keras_model_get_optimizer(model)))


def _patch_tf_keras_h5(journal, replaced, tf_keras):
  """tf_keras's optimizer config and H5 weight loading (`_tf_keras_h5`)."""
  for name, wrap in (("deserialize", _tf_keras_h5.wrap_optimizers_deserialize),
                     ("get", _tf_keras_h5.wrap_optimizers_get)):
    original = getattr(tf_keras.optimizers, name)
    _replace_function(journal, replaced, original, wrap(original, tf_keras),
                      ("tf_keras.", _TF_KERAS_IMPORT_NAME))
  journal.set_attr(tf_keras.Model, "load_weights",
                   _tf_keras_h5.wrap_load_weights(tf_keras.Model.load_weights))


def _patch_compile(set_attr):
  """`Model.compile` wrapping the optimizer as TF 2.3/2.4 did (`_compile`).

  The replacement goes where `keras.Model` inherits `compile` from (see
  `_compile.compile_owner`).

  Args:
    set_attr: `setattr`, or a journal's `set_attr` to undo it with the rest.
  """
  owner = _compile.compile_owner()
  set_attr(owner, "compile", _compile.make_compile(vars(owner)["compile"]))


def _patch_checkpoint_restore(journal, target):
  """Routes TF 2.x Keras checkpoints through the legacy matcher.

  `tf.train.Checkpoint.restore` reads through `read`, so patching `read`
  serves both; the v1 class restores by itself. On the tf_keras target
  (`target` not None), where TF restores Keras objects itself, a restore
  whose part deferred to a model's build also puts back what it assigned at
  once if that part fails (`_tf_keras_deferred`).
  """
  v2, v1 = tf.train.Checkpoint, tf.compat.v1.train.Checkpoint
  read = _checkpoint_restore.patched_read(v2.read)
  restore = _checkpoint_restore.patched_restore_v1(v1.restore)
  if target is not None:
    read = _tf_keras_deferred.guard_read(read, target.tf_keras)
    restore = _tf_keras_deferred.guard_read(restore, target.tf_keras)
  journal.set_attr(v2, "read", read)
  journal.set_attr(v1, "restore", restore)


def install() -> None:
  """Makes TF 2.3/2.4 mixed-precision code run unchanged on this TensorFlow.

  Grafts every registered endpoint onto `tf` and `tf.compat.v1`, registers
  the TF 2.3/2.4 config class names with Keras 3 deserialization and enables
  TF 2.3/2.4's `Model.compile` optimizer wrapping (see the module docstring).
  Calling it again while installed does nothing. If it fails half-way,
  everything it changed is undone before the error propagates.

  Example:

  >>> install()
  >>> tf.keras.mixed_precision.experimental.LossScaleOptimizer.__name__
  'LossScaleOptimizerV1'
  >>> installed()
  True
  >>> uninstall()
  """
  global _journal
  with _lock:
    if _journal is not None:
      return
    journal = _Journal()
    try:
      early = _apply(journal)
    except BaseException:
      journal.undo()
      raise
    _journal = journal
  _import_hooks.warn_early_names(early)


def uninstall() -> None:
  """Restores exactly what `install()` changed; a no-op if not installed.

  Raises:
    Exception: The first error met while restoring, after every other change
      has been restored (the package then counts as uninstalled).

  Example:

  >>> install(); uninstall()
  >>> installed()
  False
  """
  global _journal
  with _lock:
    if _journal is None:
      return
    journal, _journal = _journal, None
    journal.undo()


def installed() -> bool:
  """Whether `install()` is in effect.

  Returns:
    True between `install()` and `uninstall()`.
  """
  return _journal is not None


def enable_compile_integration() -> None:
  """Makes `Model.compile` wrap optimizers as TF 2.3/2.4's Keras did.

  The one change of `install()` alone: if the model's policy is a `PolicyV1`
  with a loss scale, `compile` wraps the optimizer in `LossScaleOptimizerV1`
  with that loss scale; if the policy is `"mixed_float16"` (ours or Keras
  3's), in a dynamic `LossScaleOptimizer`. An optimizer that already is a loss
  scale optimizer (ours or Keras 3's) is left alone, and Keras 3 never adds
  its own wrapper around ours. `compile(..., auto_scale_loss=False)` still
  disables wrapping.

  This patches `compile` where `keras.Model` inherits it from (the only way
  to influence Keras 3's choice), so it is never done on import. Calling it
  again does nothing. Enabled before `install()`, it stays enabled after
  `uninstall()`.

  Example:

  >>> enable_compile_integration()
  >>> compile_integration_enabled()
  True
  >>> disable_compile_integration()
  """
  with _lock:
    if not compile_integration_enabled():
      # No journal: the replacement holds the function it replaced, which is
      # all `disable_compile_integration` needs.
      _patch_compile(setattr)


def disable_compile_integration() -> None:
  """Puts Keras 3's `Model.compile` back; a no-op if it is not replaced.

  Undoes `enable_compile_integration()`, or the same change made by
  `install()` (the rest of what `install()` did stays until `uninstall()`).
  """
  with _lock:
    owner: Any = _compile.compile_owner()  # A class; mypy sees no `compile`.
    original = _compile.original_of(vars(owner)["compile"])
    if original is not None:
      owner.compile = original


def compile_integration_enabled() -> bool:
  """Whether `Model.compile` wraps optimizers as TF 2.3/2.4 did.

  Returns:
    True after `enable_compile_integration()` or `install()`, until
    `disable_compile_integration()` or (for `install()`'s) `uninstall()`.
  """
  return _compile.original_of(
      vars(_compile.compile_owner())["compile"]) is not None
