"""How the cli tests run a job: with the package, or where it cannot load.

A migrated job must run without the package: the second form blocks
importing `tf_mixed_precision_compat` in the child interpreter, also when
the package is installed in site-packages.
"""

import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))

_WITHOUT_PACKAGE = """
import importlib.abc, runpy, sys
class _NoPackage(importlib.abc.MetaPathFinder):
  def find_spec(self, name, path=None, target=None):
    if name.split(".")[0] == "tf_mixed_precision_compat":
      raise ImportError("the migrated job imported the package")
sys.meta_path.insert(0, _NoPackage())
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def command(script, args, with_package):
  """`(argv, env)` running `script` with `args`, with or without the package.

  Args:
    script: The job's file, relative to the directory it runs in.
    args: Its arguments (strings).
    with_package: True: the repository's package on PYTHONPATH; False: the
      package cannot be imported.

  Returns:
    The argument vector and environment for `subprocess`.
  """
  env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
  env["TF_CPP_MIN_LOG_LEVEL"] = "2"
  if with_package:
    env["PYTHONPATH"] = ROOT
    return [sys.executable, script, *args], env
  return [sys.executable, "-c", _WITHOUT_PACKAGE, script, *args], env


def wrapper_counts_iterations():
  """Whether keras.optimizers.LossScaleOptimizer.iterations is the inner's.

  Keras 3.7 returns the wrapper's own counter, which no step advances (a
  migrated job reading it sees 0); later Keras returns the inner
  optimizer's.
  """
  import keras  # pylint: disable=g-import-not-at-top
  opt = keras.optimizers.LossScaleOptimizer(keras.optimizers.SGD())
  return opt.iterations is opt.inner_optimizer.iterations
