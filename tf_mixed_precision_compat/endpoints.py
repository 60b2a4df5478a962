"""Registry of the TensorFlow endpoints this package re-creates.

Each public symbol's TF 2.3.4/2.4.4 paths (v2 and v1), deprecated paths and
warning; the `v1`/`v2` trees, `install()` and the API goldens are built from it.

Example:

>>> from tf_mixed_precision_compat import endpoints
>>> spec = endpoints.lookup(
...     "v2", "mixed_precision.experimental.DynamicLossScale")
>>> spec.symbol.__name__
'DynamicLossScale'
"""

import dataclasses
import operator
import sys
import types
from typing import Any, Callable, Dict, Iterator, Optional, Tuple

__all__ = ["EndpointSpec", "all_specs", "export", "lookup", "namespace"]

_API_VERSIONS = ("v1", "v2")
_PACKAGE = __name__.rpartition(".")[0]


@dataclasses.dataclass(frozen=True)
class EndpointSpec:
  """What is known about one exported symbol.

  Attributes:
    symbol: The Python object (class or function).
    v2: Paths under `tf.` (e.g. `"mixed_precision.experimental.LossScale"`).
    v1: Paths under `tf.compat.v1.`.
    deprecated: The subset of paths TensorFlow marked as deprecated endpoints.
    warning: The deprecation warning the symbol logs when used, or `None`.
  """
  symbol: Any
  v2: Tuple[str, ...]
  v1: Tuple[str, ...]
  deprecated: Tuple[str, ...] = ()
  warning: Optional[str] = None

  def paths(self, api_version: str) -> Tuple[str, ...]:
    """Returns the paths of this symbol in `api_version` ("v1" or "v2")."""
    _check_api_version(api_version)
    return getattr(self, api_version)


_SPECS: Dict[int, EndpointSpec] = {}
_ROOTS: Dict[str, types.ModuleType] = {}


def _check_api_version(api_version: str) -> None:
  if api_version not in _API_VERSIONS:
    raise ValueError(
        f"api_version must be one of {_API_VERSIONS}, got {api_version!r}.")


def export(*v2: str,
           v1: Tuple[str, ...] = (),
           deprecated: Tuple[str, ...] = (),
           warning: Optional[str] = None) -> Callable[[Any], Any]:
  """Decorator registering a symbol under its TensorFlow endpoint paths.

  Args:
    *v2: Paths under `tf.` that TF 2.3.4/2.4.4 exported the symbol as.
    v1: Paths under `tf.compat.v1.`.
    deprecated: Paths (from `v2` or `v1`) TensorFlow marked deprecated.
    warning: The deprecation warning text the symbol logs, if any.

  Returns:
    A decorator registering its argument and returning it unchanged.

  Raises:
    ValueError: If a deprecated path is not exported, or a path is taken.
  """
  unknown = set(deprecated) - set(v2) - set(v1)
  if unknown:
    raise ValueError(f"deprecated paths {sorted(unknown)} are not exported.")

  def decorator(symbol: Any) -> Any:
    spec = EndpointSpec(symbol, tuple(v2), tuple(v1), tuple(deprecated),
                        warning)
    for api_version in _API_VERSIONS:
      for path in spec.paths(api_version):
        existing = _find(api_version, path)
        if existing is not None and existing.symbol is not symbol:
          raise ValueError(f"{api_version} path {path!r} is already "
                           f"registered to {existing.symbol!r}.")
    _SPECS[id(symbol)] = spec
    for api_version in _API_VERSIONS:
      for path in spec.paths(api_version):
        graft(namespace(api_version), path, symbol)
    return symbol

  return decorator


def graft(root: types.ModuleType, path: str, symbol: Any,
          doc: str = "Mirror of the TensorFlow `{}` namespace.",
          set_attr: Callable[..., None] = setattr,
          set_item: Callable[..., None] = operator.setitem) -> None:
  """Sets `root.<path>` to `symbol`, creating the namespaces it lacks.

  A namespace created (its `__doc__` is `doc` of its name) also enters
  `sys.modules` if its name is free, so `from <parent> import <part>` works;
  `install()` passes its journal's `set_attr` and `set_item`.
  """
  *parents, leaf = path.split(".")
  node = root
  for part in parents:
    child = getattr(node, part, None)
    if child is None:
      child = types.ModuleType(f"{node.__name__}.{part}")
      child.__doc__ = doc.format(part)
      set_attr(node, part, child)
      if child.__name__ not in sys.modules:
        set_item(sys.modules, child.__name__, child)
    node = child
  set_attr(node, leaf, symbol)


def namespace(api_version: str) -> types.ModuleType:
  """Returns the module mirroring `tf.compat.v1` ("v1") or `tf` ("v2")."""
  _check_api_version(api_version)
  if api_version not in _ROOTS:
    root = types.ModuleType(f"{_PACKAGE}.{api_version}")
    root.__doc__ = (f"TensorFlow {api_version} endpoints re-created by "
                    f"{_PACKAGE}.")
    sys.modules[root.__name__] = root
    _ROOTS[api_version] = root
  return _ROOTS[api_version]


def all_specs() -> Iterator[EndpointSpec]:
  """Yields every registered symbol's spec, in registration order."""
  return iter(list(_SPECS.values()))


def _find(api_version: str, path: str) -> Optional[EndpointSpec]:
  for spec in _SPECS.values():
    if path in spec.paths(api_version):
      return spec
  return None


def lookup(api_version: str, path: str) -> EndpointSpec:
  """Returns the spec registered at `path` (under `tf` or `tf.compat.v1`).

  Raises:
    ValueError: If `api_version` is not "v1" or "v2".
    KeyError: If nothing is registered at `path`.
  """
  _check_api_version(api_version)
  spec = _find(api_version, path)
  if spec is None:
    raise KeyError(f"no {api_version} endpoint {path!r} is registered.")
  return spec
