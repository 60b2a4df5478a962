"""Writes and checks the API goldens under `api_golden/`.

The goldens describe every endpoint of the endpoint registry in the text
format TensorFlow 2.3/2.4 used for its own API goldens
(`tensorflow/tools/api/golden/v{1,2}/*.pbtxt`): one file per class and per
namespace module, holding the path, the class's MRO (`is_instance`), its
public attributes (`member`) and its public routines with their argument
specs (`member_method`). A reviewer sees any change of the public surface as a
diff of these files, and because the format is TensorFlow's, our files can be
compared line by line with the goldens of the real TF 2.3.4 classes
(`tools/tf_reference_goldens.py`).

`api_golden/deprecations.json` records, for every endpoint path, whether
TensorFlow marked the path deprecated and the warning text the symbol logs.

Usage:

  python tools/api_golden.py            # same as --check
  python tools/api_golden.py --check    # exit status 1 on any drift
  python tools/api_golden.py --update   # rewrite the goldens

This module only uses the standard library at import time and stays valid
Python 3.8, so the reference environments (real TF 2.3.4/2.4.4 on Python 3.8)
can import its formatting functions. `tf_mixed_precision_compat` is imported
only by `registry_endpoints()`.
"""

import argparse
import difflib
import inspect
import json
import os
import re
import sys
import types

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GOLDEN_DIR = os.path.join(REPO_ROOT, "api_golden")
API_VERSIONS = ("v1", "v2")
DEPRECATIONS_FILE = "deprecations.json"
UPDATE_HINT = ("Run `python tools/api_golden.py --update` to regenerate the "
               "goldens, and commit the result if the change is intended.")

# Classes of these top-level packages are "ours" in an MRO: TensorFlow's
# generator kept listing bases while they came from TensorFlow and stopped
# after the first foreign one (usually `object`).
_API_PACKAGES = ("tensorflow", "keras", "tf_mixed_precision_compat")

# Python 3 spells builtin types `<class 'x'>`; TensorFlow's goldens keep the
# Python 2 spelling so that they did not churn between interpreters.
_NORMALIZED_TYPES = {
    "<class '%s'>" % name: "<type '%s'>" % name
    for name in ("property", "object", "getset_descriptor", "int", "str",
                 "type", "tuple", "module", "collections.defaultdict", "set",
                 "dict", "NoneType", "frozenset", "member_descriptor")
}
_NORMALIZED_TYPES.update({
    "<class '%s'>" % name: "<type 'exceptions.%s'>" % name
    for name in ("Exception", "RuntimeError")
})
_NORMALIZED_TYPES["<class 'abc.ABCMeta'>"] = "<type 'type'>"

_ADDRESS = " at 0x"


# ---------------------------------------------------------------------------
# Formatting of single objects (usable with any TensorFlow version).
# ---------------------------------------------------------------------------


def normalize_type(type_text):
  """Returns TensorFlow's golden spelling of `str(some_type)`."""
  return _NORMALIZED_TYPES.get(type_text, type_text)


def golden_path(path):
  """Returns the golden `path` field for a path relative to `tf`."""
  return "tensorflow.%s" % path if path else "tensorflow"


def golden_file_name(key):
  """Returns the file name of the golden for `key` ("tensorflow.x.Y").

  TensorFlow's goldens live on case-insensitive file systems too, so every
  capital letter becomes a dash plus the lower-case letter.

  >>> golden_file_name("tensorflow.train.experimental.FixedLossScale")
  'tensorflow.train.experimental.-fixed-loss-scale.pbtxt'
  """
  return re.sub("[A-Z]", lambda m: "-" + m.group(0).lower(), key) + ".pbtxt"


def unwrap(obj):
  """Returns `(decorator_argspec_or_None, innermost_target)` of `obj`.

  Follows TensorFlow's decorator convention (`_tf_decorator` holding the
  `decorated_target` and an optional `decorator_argspec`) and `__wrapped__`
  (functools.wraps), so that decorated methods show the signature users call.
  Classes are never unwrapped.
  """
  argspec = None
  seen = set()
  while not isinstance(obj, type) and id(obj) not in seen:
    seen.add(id(obj))
    decorator = getattr(obj, "_tf_decorator", None)
    if decorator is not None and hasattr(decorator, "decorated_target"):
      if argspec is None:
        argspec = getattr(decorator, "decorator_argspec", None)
      obj = decorator.decorated_target
      continue
    wrapped = getattr(obj, "__wrapped__", None) if callable(obj) else None
    if wrapped is None:
      break
    obj = wrapped
  return argspec, obj


def _sanitize_default(value):
  text = str(value)
  if _ADDRESS in text:
    # Object reprs carry memory addresses; keep only the stable part.
    return "%s instance>" % text.split(" at ")[0]
  return text


def argspec_string(func):
  """Returns TensorFlow's golden argspec string of routine `func`.

  The format is that of `tf_inspect.getargspec` in TF 2.3/2.4: keyword-only
  arguments are not listed, `**kwargs` is called `keywords`.

  >>> def f(a, b=1, *args): pass
  >>> argspec_string(f)
  "args=['a', 'b'], varargs=args, keywords=None, defaults=['1'], "
  """
  decorator_argspec, target = unwrap(func)
  if decorator_argspec is not None:
    args = decorator_argspec.args
    varargs = decorator_argspec.varargs
    keywords = getattr(decorator_argspec, "keywords",
                       getattr(decorator_argspec, "varkw", None))
    defaults = decorator_argspec.defaults
  else:
    spec = inspect.getfullargspec(target)
    args, varargs, keywords, defaults = (spec.args, spec.varargs, spec.varkw,
                                         spec.defaults)
  text = "args=%s, varargs=%s, keywords=%s, " % (args, varargs, keywords)
  if defaults:
    text += "defaults=%s, " % [_sanitize_default(d) for d in defaults]
  else:
    text += "defaults=None"
  return text


def _is_api_class(cls):
  module = getattr(cls, "__module__", None) or ""
  return module.split(".")[0] in _API_PACKAGES


def sanitized_mro(cls):
  """Returns the `is_instance` strings of class `cls`."""
  result = []
  for base in inspect.getmro(cls):
    if base.__name__ == "_NewClass":
      # Helper classes made by TensorFlow's deprecated_alias.
      continue
    result.append(normalize_type(str(base)))
    if not _is_api_class(base):
      break
  return result


def _skip_member(parent, name):
  if name == "with_traceback":
    return True
  if name in ("name", "value") and isinstance(parent, type):
    enum_type = sys.modules.get("enum")
    return enum_type is not None and issubclass(parent, enum_type.Enum)
  return False


def _public_children(obj):
  """Yields `(name, value)` of the members the goldens list, sorted."""
  for name in sorted(dir(obj)):
    if name != "__init__" and name.startswith("_"):
      continue
    try:
      value = getattr(obj, name)
    except AttributeError:
      continue
    yield name, value


def _member_entries(parent, children):
  """Splits `children` into sorted `member` and `member_method` entries.

  Returns:
    `(members, methods)`: lists of `(name, mtype)` and `(name, argspec or
    None)`.
  """
  members = []
  methods = []
  for name, child in sorted(children, key=lambda item: item[0]):
    if name != "__init__" and name.startswith("_"):
      continue
    if _skip_member(parent, name):
      continue
    if type(child).__name__ == "HiddenTfApiAttribute":
      continue
    _, target = unwrap(child)
    if inspect.isroutine(target):
      argspec = argspec_string(child) if hasattr(target, "__code__") else None
      methods.append((name, argspec))
    elif inspect.ismodule(target):
      members.append((name, "<type 'module'>"))
    else:
      members.append((name, normalize_type(str(type(target)))))
  return members, methods


def _escape(text):
  """Escapes `text` the way protobuf's text format writes string fields."""
  out = []
  for byte in text.encode("utf-8"):
    if byte == 0x0A:
      out.append("\\n")
    elif byte == 0x0D:
      out.append("\\r")
    elif byte == 0x09:
      out.append("\\t")
    elif byte == 0x22:
      out.append('\\"')
    elif byte == 0x27:
      out.append("\\'")
    elif byte == 0x5C:
      out.append("\\\\")
    elif byte < 0x20 or byte >= 0x7F:
      out.append("\\%03o" % byte)
    else:
      out.append(chr(byte))
  return "".join(out)


def _field(indent, name, value):
  return '%s%s: "%s"\n' % ("  " * indent, name, _escape(value))


def _render(path_key, kind, is_instance, members, methods):
  lines = [_field(0, "path", path_key), "%s {\n" % kind]
  lines.extend(_field(1, "is_instance", item) for item in is_instance)
  for name, mtype in members:
    lines.append("  member {\n")
    lines.append(_field(2, "name", name))
    lines.append(_field(2, "mtype", mtype))
    lines.append("  }\n")
  for name, argspec in methods:
    lines.append("  member_method {\n")
    lines.append(_field(2, "name", name))
    if argspec is not None:
      lines.append(_field(2, "argspec", argspec))
    lines.append("  }\n")
  lines.append("}\n")
  return "".join(lines)


def format_class(path_key, cls):
  """Returns the golden text of class `cls` at `path_key` ("tensorflow.x")."""
  members, methods = _member_entries(cls, _public_children(cls))
  return _render(path_key, "tf_class", sanitized_mro(cls), members, methods)


def format_module(path_key, children):
  """Returns the golden text of a namespace module.

  Args:
    path_key: The golden path ("tensorflow.mixed_precision").
    children: `(name, object)` pairs: the module's members we export.
      Submodules may be given as any module object (or `types.ModuleType`
      placeholders).

  Returns:
    The golden text.
  """
  members, methods = _member_entries(None, children)
  return _render(path_key, "tf_module", [], members, methods)


# ---------------------------------------------------------------------------
# Trees of endpoints.
# ---------------------------------------------------------------------------


def _class_goldens(path, cls, stack, out):
  """Adds goldens of `cls` and of the classes nested in it (as TF did)."""
  key = golden_path(path)
  out[golden_file_name(key)] = format_class(key, cls)
  stack = stack + [cls]
  for name in sorted(dir(cls)):
    # TensorFlow's traversal descended into public and dunder class
    # attributes that are themselves classes, except the type links.
    if name in ("__base__", "__class__"):
      continue
    if name.startswith("_") and not re.match("__.*__$", name):
      continue
    try:
      child = getattr(cls, name)
    except AttributeError:
      continue
    if isinstance(child, type) and not any(child is s for s in stack):
      _class_goldens(path + "." + name, child, stack, out)


def render_tree(endpoints):
  """Returns `{file name: golden text}` for one API version.

  Args:
    endpoints: `{path relative to tf: object}` of the exported symbols. Every
      dotted prefix of a path is a namespace module; its golden lists only
      the members that `endpoints` puts there.

  Returns:
    A dict from golden file name to its text.
  """
  modules = {"": {}}  # module path -> {member name: object}
  for path, obj in endpoints.items():
    parts = path.split(".")
    for depth in range(len(parts)):
      parent = ".".join(parts[:depth])
      modules.setdefault(parent, {})
      if depth < len(parts) - 1:
        child_path = ".".join(parts[:depth + 1])
        modules[parent][parts[depth]] = types.ModuleType(
            golden_path(child_path))
      else:
        modules[parent][parts[depth]] = obj
  out = {}
  for module_path, children in modules.items():
    key = golden_path(module_path)
    out[golden_file_name(key)] = format_module(key, list(children.items()))
  for path, obj in endpoints.items():
    if isinstance(obj, type):
      _class_goldens(path, obj, [], out)
  return out


def registry_endpoints(specs=None):
  """Collects the registry's endpoints.

  Args:
    specs: `EndpointSpec`s; defaults to all registered ones (importing
      `tf_mixed_precision_compat`).

  Returns:
    `(endpoints, deprecations)`: `endpoints[api_version][path] = symbol` and
    `deprecations[api_version][path] = {"deprecated": bool, "symbol": str,
    "warning": str or None}`.
  """
  if specs is None:
    if REPO_ROOT not in sys.path:
      sys.path.insert(0, REPO_ROOT)
    # pylint: disable=g-import-not-at-top
    import tf_mixed_precision_compat  # noqa: F401  # pylint: disable=unused-import
    from tf_mixed_precision_compat import endpoints as endpoints_lib
    specs = list(endpoints_lib.all_specs())
  endpoints = {v: {} for v in API_VERSIONS}
  deprecations = {v: {} for v in API_VERSIONS}
  for spec in specs:
    symbol_name = "%s.%s" % (getattr(spec.symbol, "__module__", "?"),
                             getattr(spec.symbol, "__qualname__",
                                     getattr(spec.symbol, "__name__", "?")))
    for api_version in API_VERSIONS:
      for path in getattr(spec, api_version):
        endpoints[api_version][path] = spec.symbol
        deprecations[api_version][path] = {
            "deprecated": path in spec.deprecated,
            "symbol": symbol_name,
            "warning": spec.warning,
        }
  return endpoints, deprecations


def render_all(specs=None):
  """Returns `{relative file path: text}` of everything under api_golden/."""
  endpoints, deprecations = registry_endpoints(specs)
  files = {}
  for api_version in API_VERSIONS:
    for name, text in render_tree(endpoints[api_version]).items():
      files[api_version + "/" + name] = text
  files[DEPRECATIONS_FILE] = json.dumps(
      deprecations, indent=2, sort_keys=True) + "\n"
  return files


# ---------------------------------------------------------------------------
# Check and update.
# ---------------------------------------------------------------------------


def read_goldens(golden_dir):
  """Returns `{relative file path: text}` of the goldens in `golden_dir`."""
  files = {}
  for api_version in API_VERSIONS:
    folder = os.path.join(golden_dir, api_version)
    if not os.path.isdir(folder):
      continue
    for name in sorted(os.listdir(folder)):
      if name.endswith(".pbtxt"):
        with open(os.path.join(folder, name), encoding="utf-8") as f:
          files[api_version + "/" + name] = f.read()
  deprecations = os.path.join(golden_dir, DEPRECATIONS_FILE)
  if os.path.exists(deprecations):
    with open(deprecations, encoding="utf-8") as f:
      files[DEPRECATIONS_FILE] = f.read()
  return files


def find_drift(expected, actual, max_diff_lines=40):
  """Compares two golden sets.

  Args:
    expected: `{relative path: text}` generated from the code.
    actual: `{relative path: text}` read from disk.
    max_diff_lines: Diff lines shown per changed file.

  Returns:
    A list of human-readable problems; empty when nothing drifted.
  """
  problems = []
  for name in sorted(set(expected) - set(actual)):
    problems.append("missing golden: %s" % name)
  for name in sorted(set(actual) - set(expected)):
    problems.append("stale golden (no such endpoint any more): %s" % name)
  for name in sorted(set(expected) & set(actual)):
    if expected[name] == actual[name]:
      continue
    diff = list(
        difflib.unified_diff(
            actual[name].splitlines(),
            expected[name].splitlines(),
            "golden/" + name,
            "code/" + name,
            lineterm=""))
    if len(diff) > max_diff_lines:
      diff = diff[:max_diff_lines] + ["... (%d more diff lines)" %
                                      (len(diff) - max_diff_lines)]
    problems.append("changed golden: %s\n%s" % (name, "\n".join(diff)))
  return problems


def check(golden_dir=GOLDEN_DIR, specs=None):
  """Returns the drift between `golden_dir` and the code (empty if none)."""
  return find_drift(render_all(specs), read_goldens(golden_dir))


def drift_report(problems):
  """Returns the message printed for `problems` (a `find_drift` result)."""
  return "API goldens are out of date (%d problem(s)):\n%s\n\n%s" % (
      len(problems), "\n".join(problems), UPDATE_HINT)


def update(golden_dir=GOLDEN_DIR, specs=None):
  """Rewrites the goldens in `golden_dir`, removing stale ones.

  Returns:
    The list of relative paths written or removed.
  """
  expected = render_all(specs)
  actual = read_goldens(golden_dir)
  changed = []
  for name in sorted(set(actual) - set(expected)):
    os.remove(os.path.join(golden_dir, name))
    changed.append(name)
  for name, text in sorted(expected.items()):
    if actual.get(name) == text:
      continue
    target = os.path.join(golden_dir, name)
    os.makedirs(os.path.dirname(target), exist_ok=True)
    with open(target, "w", encoding="utf-8", newline="\n") as f:
      f.write(text)
    changed.append(name)
  return changed


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  mode = parser.add_mutually_exclusive_group()
  mode.add_argument("--check", action="store_true",
                    help="fail on any drift (the default)")
  mode.add_argument("--update", action="store_true",
                    help="rewrite the goldens from the code")
  parser.add_argument("--golden_dir", default=GOLDEN_DIR,
                      help="directory holding v1/, v2/ and %s" %
                      DEPRECATIONS_FILE)
  args = parser.parse_args(argv)
  os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
  if args.update:
    changed = update(args.golden_dir)
    print("Updated %d golden file(s) in %s." % (len(changed), args.golden_dir))
    for name in changed:
      print("  " + name)
    return 0
  problems = check(args.golden_dir)
  if problems:
    print(drift_report(problems), file=sys.stderr)
    return 1
  print("API goldens in %s are up to date." % args.golden_dir)
  return 0


if __name__ == "__main__":
  sys.exit(main())
