"""Every way TF 2.3/2.4 code imports Keras reaches what `install()` hooked.

`AliasFinder` makes `import tensorflow.keras...` yield the modules
`tf.keras...` resolves to; `rebind_early_names` and `warn_early_names` handle
names bound before `install()`. docs/architecture.md says why.
"""

import functools
import importlib
import importlib.abc
import importlib.machinery
import sys
import types
import warnings

PREFIX = "tensorflow.keras"
MOVE_HINT = ("move `import tf_mixed_precision_compat.auto` (or the "
             "`install()` call) above the Keras imports")
_MISSING = object()
# Large module-level tables are data, not where a job keeps a loader.
_MAX_SCANNED_ITEMS = 1000
# The early-name scan leaves these alone: their public modules are hooked as
# holders of the API, and their internal ones must keep Keras' functions.
_LIBRARY_PACKAGES = ("tensorflow", "keras", "tf_keras",
                     "tf_mixed_precision_compat")


def resolve(root, fullname):
  """The module under `root` (`tf.keras`) the import name `fullname` means.

  None if `fullname` (`tensorflow.keras[.<path>]`) names no module there.
  """
  node = root
  for part in fullname.split(".")[2:]:
    child = vars(node).get(part)  # Never triggers a lazy loader.
    if isinstance(child, types.ModuleType):
      node = child
      continue
    try:
      node = importlib.import_module(f"{node.__name__}.{part}")
    except ImportError:
      return None
  return node


class AliasFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
  """Serves `tensorflow.keras[.<path>]` imports from `root` (`tf.keras`).

  `journal` (install()'s) lets `uninstall()` remove the aliases.
  """

  def __init__(self, root, journal):
    self._root = root
    self._journal = journal
    self.active = True

  def find_spec(self, fullname, path=None, target=None):
    del path, target  # The alias does not depend on where it is looked up.
    if not self.active or fullname.split(".")[:2] != PREFIX.split("."):
      return None
    module = resolve(self._root, fullname)
    if module is None:
      return None  # TensorFlow's own path search decides (and fails).
    return importlib.machinery.ModuleSpec(fullname, self, loader_state=module)

  def create_module(self, spec):
    return None  # A throwaway module: the real one keeps its own __spec__.

  def exec_module(self, module):
    name, alias = module.__name__, module.__spec__.loader_state
    # The import system returns what `sys.modules[name]` holds after this
    # call, and binds it on the parent package: journaled.
    sys.modules[name] = alias
    if not self.active:
      return
    self._journal.on_undo(
        lambda: sys.modules.pop(name, None)
        if sys.modules.get(name) is alias else None)
    parent_name, _, child = name.rpartition(".")
    parent = sys.modules.get(parent_name)
    if parent is not None:
      self._journal.set_attr(parent, child, alias)


def install_finder(journal, root):
  """Puts an `AliasFinder` first on `sys.meta_path`, undone by `journal`."""
  finder = AliasFinder(root, journal)
  sys.meta_path.insert(0, finder)

  def remove():
    finder.active = False
    if finder in sys.meta_path:
      sys.meta_path.remove(finder)

  journal.on_undo(remove)


def module_globals(module):
  """A module's namespace, or `{}` for objects posing as modules."""
  try:
    return vars(module)
  except TypeError:
    return {}


def _user_globals():
  """`(name, module, namespace)` of loaded modules outside the libraries.

  Each module once (`__mp_main__` may be `__main__` again).
  """
  seen = set()
  for name, module in list(sys.modules.items()):
    if (isinstance(module, types.ModuleType) and id(module) not in seen and
        name.split(".")[0] not in _LIBRARY_PACKAGES):
      seen.add(id(module))
      yield name, module, module_globals(module)


def rebind_early_names(journal, replacements):
  """Rebinds module globals bound to a replaced function before install.

  Safe: a replacement only adds TF 2.x files and configs to what the original
  accepts. `replacements`: `{id(original): (original, replacement)}`.
  """
  for _, module, namespace in _user_globals():
    for key, value in list(namespace.items()):
      pair = replacements.get(id(value))
      if pair is not None and pair[0] is value:
        journal.set_attr(module, key, pair[1])


def _holds_original(value, originals):
  """Whether `value` holds an original out of reach of a rebind."""
  candidates = []
  if isinstance(value, dict):
    candidates = list(value.values())
  elif isinstance(value, (list, tuple)):
    candidates = list(value)
  elif isinstance(value, types.FunctionType):
    candidates = list(value.__defaults__ or ()) + list(
        (value.__kwdefaults__ or {}).values())
  elif isinstance(value, functools.partial):
    candidates = [value.func]
  return any(originals.get(id(candidate), _MISSING) is candidate
             for candidate in candidates[:_MAX_SCANNED_ITEMS])


def early_names(originals, hidden):
  """Sorted `module.name`s bound before install() to Keras' unhooked objects.

  `originals` (`{id(obj): obj}`, replaced functions) are also found inside
  containers, default arguments and `functools.partial`; `hidden`
  (`{(name, id(obj)): obj}`, replaced at a `tf.keras` path only, such as
  Keras 3's `LossScaleOptimizer`) only as a module global of that name.
  """
  found = set()
  for module_name, _, namespace in _user_globals():
    for key, value in list(namespace.items()):
      if (hidden.get((key, id(value)), _MISSING) is value or
          _holds_original(value, originals)):
        found.add(f"{module_name}.{key}")
  return sorted(found)


def warn_early_names(names):
  """Warns once about `names` (from `early_names`), if any."""
  if not names:
    return
  warnings.warn(
      "tf_mixed_precision_compat.install(): these names were bound to "
      "Keras' own objects before install() and keep them (TF 2.3/2.4 "
      f"behaviour does not reach them): {', '.join(names)}; {MOVE_HINT}.",
      UserWarning, stacklevel=3)
