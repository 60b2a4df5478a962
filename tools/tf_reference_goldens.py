"""Writes API goldens of the real TensorFlow 2.3/2.4 mixed-precision symbols.

Run under the reference environments (Python 3.8, real TensorFlow):

  TF_CPP_MIN_LOG_LEVEL=2 .ref/tf23/bin/python tools/tf_reference_goldens.py
  TF_CPP_MIN_LOG_LEVEL=2 .ref/tf24/bin/python tools/tf_reference_goldens.py

The files go to `tests/fixtures/tf_goldens/tf23/{v1,v2}/` (or `tf24/`) and
are produced by the same formatter as our own goldens (`tools/api_golden.py`),
so tests can compare ours with TensorFlow's line by line.

Which endpoints: every path that `tools/dump_tf_endpoints.py` finds on the
symbols of its `SOURCE_MODULES` (loss scales, the v1 loss scale optimizer,
the graph-rewrite switches, the Keras mixed-precision API), plus every path
in our registry (`api_golden/deprecations.json`) that this TensorFlow has.
Module goldens list only those members.
"""

import json
import os
import shutil
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

# pylint: disable=g-import-not-at-top,wrong-import-position
import api_golden
import dump_tf_endpoints

OUTPUT_ROOT = os.path.join(api_golden.REPO_ROOT, "tests", "fixtures",
                           "tf_goldens")


def _resolve(root, path):
  node = root
  for part in path.split("."):
    node = getattr(node, part, None)
    if node is None:
      return None
  return node


def wanted_paths():
  """Returns `{api_version: set of paths}` to describe."""
  paths = {v: set() for v in api_golden.API_VERSIONS}
  for entry in dump_tf_endpoints.collect().values():
    for api_version in api_golden.API_VERSIONS:
      paths[api_version].update(entry[api_version])
  record = os.path.join(api_golden.GOLDEN_DIR, api_golden.DEPRECATIONS_FILE)
  if os.path.exists(record):
    with open(record, encoding="utf-8") as f:
      registered = json.load(f)
    for api_version in api_golden.API_VERSIONS:
      paths[api_version].update(registered.get(api_version, {}))
  return paths


def main():
  os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  roots = {"v2": tf, "v1": tf.compat.v1}
  out_dir = os.path.join(OUTPUT_ROOT,
                         dump_tf_endpoints.version_key(tf.__version__))
  for api_version, paths in sorted(wanted_paths().items()):
    endpoints = {}
    for path in sorted(paths):
      obj = _resolve(roots[api_version], path)
      if obj is None:
        print("TF %s has no %s endpoint %s; skipped." %
              (tf.__version__, api_version, path))
        continue
      endpoints[path] = obj
    folder = os.path.join(out_dir, api_version)
    shutil.rmtree(folder, ignore_errors=True)
    os.makedirs(folder)
    files = api_golden.render_tree(endpoints)
    for name, text in sorted(files.items()):
      with open(os.path.join(folder, name), "w", encoding="utf-8",
                newline="\n") as f:
        f.write(text)
    print("Wrote %d %s goldens of TF %s to %s" %
          (len(files), api_version, tf.__version__, folder))


if __name__ == "__main__":
  sys.exit(main())
