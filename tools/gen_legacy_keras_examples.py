"""Records what real TF 2.3/2.4 print for the examples' loss-scale state.

Run with each reference TensorFlow:

  .ref/tf24/bin/python tools/gen_legacy_keras_examples.py
  .ref/tf23/bin/python tools/gen_legacy_keras_examples.py

Runs every script of examples/ as its authors wrote it (the install line
removed) and keeps the lines that report loss-scale state (loss scale,
counter, skipped steps, iterations, restored step), in
tests/fixtures/legacy_keras/examples_tf<23|24>.json. A script the old TF
cannot run is recorded with the end of its error output.
"""

import json
import os
import subprocess
import sys

_ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
sys.path.insert(0, os.path.join(_ROOT, "tests", "targets", "both"))
import example_state  # pylint: disable=g-import-not-at-top,wrong-import-position


def main():
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  out = {"tensorflow_version": tf.__version__, "examples": {}}
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
  for name in sorted(os.listdir(example_state.EXAMPLES)):
    if not name.endswith(".py"):
      continue
    result = subprocess.run(
        [sys.executable, "-c",
         example_state.original(
             os.path.join(example_state.EXAMPLES, name))],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        universal_newlines=True, env=env, cwd=example_state.EXAMPLES)
    if result.returncode == 0:
      out["examples"][name[:-3]] = example_state.state_lines(
          result.stdout)
    else:
      out["examples"][name[:-3]] = {"error": result.stderr[-500:]}
  version = "".join(tf.__version__.split(".")[:2])
  path = os.path.join(_ROOT, "tests", "fixtures", "legacy_keras",
                      f"examples_tf{version}.json")
  with open(path, "w") as f:
    json.dump(out, f, indent=1, sort_keys=True)
  print("wrote", path)


if __name__ == "__main__":
  main()
