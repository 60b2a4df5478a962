"""`install()` / `uninstall()`: the TF 2.3/2.4 endpoints, back under `tf`.

Importing the package patches nothing. `install()` applies every patch (the
endpoints, the active Keras target's hooks from `hooks`, `compile`,
checkpoint restore, import forms) through a journal that `uninstall()`
replays backwards; docs/architecture.md explains the design.

Example:

>>> import tensorflow as tf
>>> install()
>>> tf.mixed_precision.experimental.DynamicLossScale.__module__
'tf_mixed_precision_compat.loss_scale._loss_scales'
>>> uninstall()
>>> hasattr(tf, "mixed_precision")
False
"""

import functools
import itertools
import sys
import threading
import types
from typing import Any

import tensorflow as tf

from tf_mixed_precision_compat import _compile
from tf_mixed_precision_compat import _import_hooks
from tf_mixed_precision_compat import _private_api
from tf_mixed_precision_compat import endpoints
from tf_mixed_precision_compat import hooks
from tf_mixed_precision_compat import keras_target
from tf_mixed_precision_compat.legacy import _checkpoint_restore
from tf_mixed_precision_compat.legacy import _saved_model

__all__ = ["compile_integration_enabled", "disable_compile_integration",
           "enable_compile_integration", "install", "installed", "uninstall"]

_MISSING = object()

_NAMESPACE_DOC = ("TensorFlow 2.3/2.4 `{}` namespace, re-created by "
                  "tf_mixed_precision_compat.install().")

_lock = threading.Lock()
_journal = None  # The undo log while installed, else None.


class _Journal:
  """Applies changes and remembers how to undo each, first value wins."""

  def __init__(self):
    self._undo = {}  # What changed (or a unique key) -> its undo, in order.

  def set_attr(self, obj, name, value):
    key = ("attr", id(obj), name)
    if key not in self._undo:
      # A class's own entry: what it inherits stays inherited on undo.
      old = (vars(obj).get(name, _MISSING) if isinstance(obj, type) else
             getattr(obj, name, _MISSING))
      self._undo[key] = lambda: _restore_attr(obj, name, old)
    setattr(obj, name, value)

  def set_item(self, mapping, key, value):
    undo_key = ("item", id(mapping), key)
    if undo_key not in self._undo:
      old = mapping.get(key, _MISSING)
      self._undo[undo_key] = lambda: _restore_item(mapping, key, old)
    mapping[key] = value

  def on_undo(self, fn):
    self._undo[object()] = fn

  def undo(self):
    """Undoes everything, newest first; raises the first failure at the end."""
    errors = []
    while self._undo:
      try:
        self._undo.popitem()[1]()
      except Exception as e:  # pylint: disable=broad-except
        errors.append(e)
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


def _keras_namespaces(root):
  """Each module a job may reach as `tf.keras.mixed_precision`, once."""
  candidates = [vars(root).get("mixed_precision"),  # What `tf.keras` has.
                getattr(vars(tf).get("keras"), "mixed_precision", None)]
  # An import statement naming `tensorflow.keras...` before install() loaded
  # Keras' API files again as separate modules (and rebound `tf.keras`).
  imported_package = sys.modules.get(_import_hooks.PREFIX)
  if imported_package is not None:
    candidates.append(vars(imported_package).get("mixed_precision"))
  candidates.append(sys.modules.get(f"{_import_hooks.PREFIX}.mixed_precision"))
  return list({id(module): module for module in candidates
               if isinstance(module, types.ModuleType)}.values())


def _modules(prefixes, public_only):
  """Loaded modules named with `prefixes`, then the modules held by `tf`.

  TF's resolved Keras lazy loaders (`tf.optimizers`, a `from tensorflow import
  keras` taken early) hold copies of a module's attributes.
  """
  modules = [module for name, module in list(sys.modules.items())
             if module is not None and name.startswith(prefixes) and
             not (public_only and ".src" in name)]
  return modules + [value for value in vars(tf).values()
                    if isinstance(value, types.ModuleType)]


def _replace_function(journal, replaced, original, replacement, prefixes):
  """Puts `replacement` wherever `original` is public, and where defined.

  `replaced` collects `{id(original): (original, replacement)}`; `prefixes`
  name the public modules of the Keras defining `original`.
  """
  name = original.__name__
  for holder in _modules(prefixes, public_only=True):
    # `vars`, never `getattr`: that would trigger a lazy loader.
    if _import_hooks.module_globals(holder).get(name) is original:
      journal.set_attr(holder, name, replacement)
  defining = _private_api.defining_module(original)
  if defining is not None:
    journal.set_attr(defining, name, replacement)
  replaced[id(original)] = (original, replacement)


def _restore_late_holders(replaced):
  """Puts originals back in Keras modules that bound a replacement late."""
  originals = {id(pair[1]): pair[0] for pair in replaced.values()}
  prefixes = tuple(f"{keras_target.package_name(t)}."
                   for t in keras_target.TARGETS) + (_import_hooks.PREFIX,)
  for module in _modules(prefixes, public_only=False):
    for name, value in list(_import_hooks.module_globals(module).items()):
      original = originals.get(id(value))
      if original is not None:
        setattr(module, name, original)


def _graft_endpoints(journal, keras_namespaces, hidden):
  """Every registered endpoint under `tf`, `tf.compat.v1` and Keras.

  `hidden` collects `{(name, id(old)): old}` of Keras objects the grafts
  cover at a `tf.keras` path (for `_import_hooks.early_names`).
  """
  prefix = "keras.mixed_precision."
  target = hooks.current()
  for spec in endpoints.all_specs():
    symbol = target.symbol_for(spec)
    keras_paths = [path[len(prefix):] for path in spec.v2 + spec.v1
                   if path.startswith(prefix)]
    for path, namespace in itertools.product(keras_paths, keras_namespaces):
      old = vars(namespace).get(path)  # Before `tf.keras` is grafted.
      if old is not None and old is not symbol:
        hidden[(path, id(old))] = old
    grafts = ([(tf, path) for path in spec.v2] +
              [(tf.compat.v1, path) for path in spec.v1] +
              [(namespace, path) for path, namespace in
               itertools.product(keras_paths, keras_namespaces)])
    for root, path in grafts:
      endpoints.graft(root, path, symbol, _NAMESPACE_DOC, journal.set_attr,
                      journal.set_item)


def _apply(journal):
  root = hooks.current().keras_root()  # What `tf.keras` resolves to.
  replaced, hidden = {}, {}
  # Undone last: Keras API modules executed while installed bound a
  # replacement from its defining module.
  journal.on_undo(lambda: _restore_late_holders(replaced))
  _graft_endpoints(journal, _keras_namespaces(root), hidden)
  for target in hooks.patched():  # Keras 3's hooks, then tf_keras's.
    target.install(journal, functools.partial(
        _replace_function, journal, replaced,
        prefixes=(f"{target.package}.", _import_hooks.PREFIX)))
  if not compile_integration_enabled():  # Else enabled before, and stays.
    _patch_compile(journal.set_attr)
  _patch_checkpoint_restore(journal)
  if not _saved_model.serving_enabled():
    _saved_model.enable_serving()
    journal.on_undo(_saved_model.disable_serving)
  _import_hooks.install_finder(journal, root)
  _import_hooks.rebind_early_names(journal, replaced)
  return _import_hooks.early_names(
      {key: pair[0] for key, pair in replaced.items()}, hidden)


def _patch_compile(set_attr):
  """Puts `_compile`'s `compile` in place through `set_attr`."""
  owner = _compile.compile_owner()
  set_attr(owner, "compile", _compile.make_compile(vars(owner)["compile"]))


def _patch_checkpoint_restore(journal):
  """Routes TF 2.x Keras checkpoints through the legacy matcher.

  `tf.train.Checkpoint.restore` reads through `read`; the v1 class restores by
  itself. Each target may guard both (`KerasTarget.guard_checkpoint_read`).
  """
  v2, v1 = tf.train.Checkpoint, tf.compat.v1.train.Checkpoint
  read = _checkpoint_restore.patched_read(v2.read)
  restore = _checkpoint_restore.patched_restore_v1(v1.restore)
  for target in hooks.patched():
    read = target.guard_checkpoint_read(read)
    restore = target.guard_checkpoint_read(restore)
  journal.set_attr(v2, "read", read)
  journal.set_attr(v1, "restore", restore)


def install() -> None:
  """Makes TF 2.3/2.4 mixed-precision code run unchanged on this TensorFlow.

  Grafts every registered endpoint onto `tf` and `tf.compat.v1`, and applies
  the module docstring's patches. A no-op while installed; if it fails
  half-way, everything it changed is undone before the error propagates.

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
    Exception: The first error met, once everything else was restored (the
      package then counts as uninstalled).

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
  """Whether `install()` is in effect (between it and `uninstall()`)."""
  return _journal is not None


def enable_compile_integration() -> None:
  """Makes `Model.compile` wrap optimizers as TF 2.3/2.4's Keras did.

  The one change of `install()` alone: a `PolicyV1` with a loss scale makes
  `compile` wrap the optimizer in `LossScaleOptimizerV1` with it;
  `"mixed_float16"` (ours or Keras 3's), in a dynamic `LossScaleOptimizer`.
  Loss scale optimizers are left alone, and Keras 3 adds no wrapper of its
  own; `compile(..., auto_scale_loss=False)` still disables wrapping.

  It patches `compile` where `keras.Model` inherits it from, never on import.
  A no-op if enabled; enabled before `install()`, it outlives `uninstall()`.

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

  Also undoes that change of `install()`, whose others stay until `uninstall()`.
  """
  with _lock:
    owner: Any = _compile.compile_owner()  # A class; mypy sees no `compile`.
    original = _compile.original_of(vars(owner)["compile"])
    if original is not None:
      owner.compile = original


def compile_integration_enabled() -> bool:
  """Whether `Model.compile` wraps optimizers as TF 2.3/2.4 did.

  True after `enable_compile_integration()` or `install()`, until
  `disable_compile_integration()` or (for `install()`'s) `uninstall()`.
  """
  return _compile.original_of(
      vars(_compile.compile_owner())["compile"]) is not None
