"""Records the tf_keras target's reference trajectories with real TF 2.3/2.4.

Run with each reference TensorFlow:

  .ref/tf24/bin/python tools/gen_legacy_keras_trajectories.py
  .ref/tf23/bin/python tools/gen_legacy_keras_trajectories.py

Runs every scenario of tests/targets/both/scenarios.py (TF 2.3/2.4 job code)
and writes, per step, the loss scale, the counter, whether the step was
skipped and the optimizer's iterations to
tests/fixtures/legacy_keras/trajectories_tf<23|24>.json. A scenario the old
TF cannot run is recorded with its error instead.
"""

import json
import os
import sys

import tensorflow as tf

_ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")


def main():
  cpu = tf.config.list_physical_devices("CPU")[0]
  tf.config.set_logical_device_configuration(
      cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
  sys.path.insert(0, os.path.join(_ROOT, "tests", "targets", "both"))
  import scenarios  # pylint: disable=g-import-not-at-top
  out = {"tensorflow_version": tf.__version__, "steps": scenarios.STEPS,
         "poisoned": list(scenarios.POISONED), "scenarios": {}}
  for name, scenario in scenarios.SCENARIOS.items():
    try:
      out["scenarios"][name] = scenario()
    except Exception as e:  # pylint: disable=broad-except
      out["scenarios"][name] = {"error": f"{type(e).__name__}: {e}"}
  version = "".join(tf.__version__.split(".")[:2])
  folder = os.path.join(_ROOT, "tests", "fixtures", "legacy_keras")
  os.makedirs(folder, exist_ok=True)
  path = os.path.join(folder, f"trajectories_tf{version}.json")
  with open(path, "w") as f:
    json.dump(out, f, indent=1, sort_keys=True)
  print("wrote", path)


if __name__ == "__main__":
  main()
