"""Dumps the endpoint names real TF 2.3/2.4 gave the mixed-precision API.

Run under the reference environments (Python 3.8, real TensorFlow):

  TF_CPP_MIN_LOG_LEVEL=2 .ref/tf23/bin/python tools/dump_tf_endpoints.py
  TF_CPP_MIN_LOG_LEVEL=2 .ref/tf24/bin/python tools/dump_tf_endpoints.py

Each run replaces its own version's entry ("tf23" or "tf24") in
`tests/fixtures/tf_endpoints.json`, so the file holds both. For every symbol
the file records the raw attributes TensorFlow's export decorators set
(`_tf_api_names`, `_tf_api_names_v1`, `_tf_deprecated_api_names`,
`_keras_api_names`, `_keras_api_names_v1`) and, for convenience, the combined
`v2` / `v1` path lists in the registry's spelling (Keras paths start with
"keras."). Symbols are keyed by their defining module and name, since the
same `__name__` may not be unique across versions.

Add modules to `SOURCE_MODULES` to cover more of the API; every object defined
in a listed module that carries export names is dumped.
"""

import importlib
import json
import os
import sys

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUTPUT = os.path.join(REPO_ROOT, "tests", "fixtures", "tf_endpoints.json")

# Modules (TF 2.3 and TF 2.4 layouts; missing ones are skipped) defining the
# symbols: the loss scales, the v1 MixedPrecisionLossScaleOptimizer, the graph
# rewrite switches, and the Keras LossScaleOptimizer / Policy / policy helpers.
SOURCE_MODULES = (
    "tensorflow.python.training.experimental.loss_scale",
    "tensorflow.python.training.experimental.loss_scale_optimizer",
    "tensorflow.python.training.experimental.mixed_precision",
    "tensorflow.python.keras.mixed_precision.experimental.loss_scale_optimizer",
    "tensorflow.python.keras.mixed_precision.experimental.policy",
    "tensorflow.python.keras.mixed_precision.experimental.get_layer_policy",
    "tensorflow.python.keras.mixed_precision.loss_scale_optimizer",
    "tensorflow.python.keras.mixed_precision.policy",
    "tensorflow.python.keras.mixed_precision.get_layer_policy",
)

_ATTRIBUTES = ("_tf_api_names", "_tf_api_names_v1", "_tf_deprecated_api_names",
               "_keras_api_names", "_keras_api_names_v1")


def version_key(version):
  """Returns "tf23" for "2.3.4"."""
  major, minor = version.split(".")[:2]
  return "tf%s%s" % (major, minor)


def _own_attribute(obj, name):
  # Read from the object's own namespace: a subclass inherits its base's
  # export names without being exported itself.
  namespace = getattr(obj, "__dict__", None)
  if namespace is None or not hasattr(namespace, "get"):
    return None
  value = namespace.get(name)
  return None if value is None else list(value)


def collect():
  """Returns `{qualified name: entry}` for the running TensorFlow."""
  symbols = {}
  for module_name in SOURCE_MODULES:
    try:
      module = importlib.import_module(module_name)
    except ImportError:
      continue
    for name, obj in sorted(vars(module).items()):
      if getattr(obj, "__module__", None) != module_name:
        continue
      raw = {a.lstrip("_"): _own_attribute(obj, a) for a in _ATTRIBUTES}
      if not any(raw.values()):
        continue
      entry = {"name": name}
      entry.update({k: v for k, v in raw.items() if v is not None})
      entry["v2"] = sorted(set(entry.get("tf_api_names", [])) |
                           set(entry.get("keras_api_names", [])))
      entry["v1"] = sorted(set(entry.get("tf_api_names_v1", [])) |
                           set(entry.get("keras_api_names_v1", [])))
      entry["deprecated"] = sorted(entry.get("tf_deprecated_api_names", []))
      symbols["%s.%s" % (module_name, name)] = entry
  return symbols


def main():
  os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  data = {}
  if os.path.exists(OUTPUT):
    with open(OUTPUT, encoding="utf-8") as f:
      data = json.load(f)
  data[version_key(tf.__version__)] = {
      "version": tf.__version__,
      "symbols": collect(),
  }
  os.makedirs(os.path.dirname(OUTPUT), exist_ok=True)
  with open(OUTPUT, "w", encoding="utf-8", newline="\n") as f:
    json.dump(data, f, indent=2, sort_keys=True)
    f.write("\n")
  print("Wrote %s endpoints of TensorFlow %s to %s" %
        (len(data[version_key(tf.__version__)]["symbols"]), tf.__version__,
         OUTPUT))


if __name__ == "__main__":
  sys.exit(main())
