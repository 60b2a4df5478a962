"""Records what each re-created class's members return, with real TF 2.3/2.4.

Run with each reference TensorFlow:

  .ref/tf24/bin/python tools/gen_member_kinds.py
  .ref/tf23/bin/python tools/gen_member_kinds.py

Runs tests/targets/both/member_kinds.py's probes (every public property and
method, and the OptimizerV2 private methods real jobs call, of the loss-scale
optimizers, loss scales and policies this release has), its loss-scale reads
around an overflowing step in each mode, and the slot-creating private
methods' effects, and writes tests/fixtures/member_kinds/tf<23|24>.json.
"""

import json
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import tensorflow as tf  # pylint: disable=g-import-not-at-top

_ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")


def main():
  cpu = tf.config.list_physical_devices("CPU")[0]
  tf.config.set_logical_device_configuration(
      cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
  tf.get_logger().setLevel("ERROR")
  sys.path.insert(0, os.path.join(_ROOT, "tests", "targets", "both"))
  import member_kinds  # pylint: disable=g-import-not-at-top
  version = "".join(tf.__version__.split(".")[:2])
  out = {"tensorflow_version": tf.__version__, "rows": {}, "reads": {},
         "effects": {}}
  for case, member, releases in member_kinds.cases():
    if version in releases:
      out["rows"]["%s.%s" % (case, member)] = member_kinds.probe(case, member)
  for case in member_kinds.LOSS_SCALE_OPTIMIZERS:
    if version in member_kinds.OPTIMIZERS[case][0]:
      out["reads"][case] = {
          mode: member_kinds.read_around_overflow(case, mode)
          for mode in member_kinds.MODES}
  for case in ("lso", "lso_v1"):
    if version in member_kinds.OPTIMIZERS[case][0]:
      out["effects"][case] = member_kinds.private_method_effects(case)
  folder = os.path.join(_ROOT, "tests", "fixtures", "member_kinds")
  os.makedirs(folder, exist_ok=True)
  path = os.path.join(folder, "tf%s.json" % version)
  with open(path, "w") as f:
    json.dump(out, f, indent=1, sort_keys=True)
  print("wrote", path)


if __name__ == "__main__":
  main()
