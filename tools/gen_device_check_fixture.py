"""Records TF 2.4's mixed_float16 device compatibility messages.

Run with the reference TF 2.4.4:

  .ref/tf24/bin/python tools/gen_device_check_fixture.py

Writes tests/fixtures/policy/device_check_tf24.json: for made-up GPU detail
lists, the log level and text TF 2.4.4 logged for them.
"""

import json
import os
from unittest import mock

from tensorflow.python.keras.mixed_precision import device_compatibility_check
from tensorflow.python.platform import tf_logging

_V100 = {"device_name": "Tesla V100", "compute_capability": (7, 0)}
_K80 = {"device_name": "Tesla K80", "compute_capability": (3, 7)}
CASES = {
    "none": [],
    "one_fast": [_V100],
    "two_fast": [{"device_name": "A100", "compute_capability": (8, 0)}] * 2,
    "one_slow": [_K80],
    "mixed": [_V100, _K80, _K80],
    "no_compute_capability": [{"device_name": "AMD"}, {}],
}


def main():
  out = {}
  for name, details in CASES.items():
    with mock.patch.object(tf_logging, "warn") as warn, \
        mock.patch.object(tf_logging, "info") as info:
      device_compatibility_check._log_device_compatibility_check(  # pylint: disable=protected-access
          "mixed_float16", details)
    logged = warn if warn.called else info
    out[name] = {"details": details,
                 "level": "warning" if warn.called else "info",
                 "text": logged.call_args[0][0]}
  path = os.path.join(os.path.dirname(__file__), "..", "tests", "fixtures",
                      "policy", "device_check_tf24.json")
  with open(path, "w") as f:
    json.dump(out, f, indent=1, sort_keys=True)
    f.write("\n")


if __name__ == "__main__":
  main()
