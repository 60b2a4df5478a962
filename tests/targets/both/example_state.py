"""The loss-scale state an example prints, shared with its fixture generator.

Kept Python 3.8 compatible: tools/gen_legacy_keras_examples.py imports it
under the reference TensorFlow's interpreter.
"""

import os
import re

EXAMPLES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                        "..", "examples")
INSTALL_LINE = "import tf_mixed_precision_compat.auto"
_STATE_LINE = re.compile(
    r"^(steps run|loss scale|skipped steps|dynamic counter|resumed loss scale"
    r"|restored global step|restored iterations|overflowed \(skipped\) steps"
    r"|steps):")
_RANDOM_VALUE = re.compile(
    r"(loss scale|dynamic counter|skipped\) steps|min|->) \d+")


def state_lines(stdout):
  """The lines of `stdout` reporting loss-scale state, in order."""
  return [line for line in stdout.splitlines() if _STATE_LINE.match(line)]


def without_random_values(lines):
  """`lines` with the values an unseeded run may change replaced by N."""
  return [_RANDOM_VALUE.sub(lambda m: m.group(1) + " N",
                            line.replace(": ", " ")) for line in lines]


def original(path):
  """The script at `path` without the install line."""
  with open(path) as f:
    return "".join(line for line in f
                   if not line.strip().startswith(INSTALL_LINE))
