"""Records what real TF 2.3/2.4 do in the reductions of tests/cli/reductions/.

Run with each reference TensorFlow:

  .ref/tf24/bin/python tools/gen_reduction_records.py [NAME ...]
  .ref/tf23/bin/python tools/gen_reduction_records.py [NAME ...]

Runs every reduction (or only the named ones) as written, its install line
answered by an empty stand-in package (old TF has no use for it), and keeps
what it wrote (per-step loss, loss scale, counter, skipped, iterations, and
the final weights) in tests/fixtures/reductions/tf<23|24>/NAME.json (and
the checkpoints of the jobs in RESUMES in NAME_model_dir/). A
reduction the old TF cannot run (TF 2.3 lacks TF 2.4's API) is recorded with
the end of its error.
"""

import json
import os
import shutil
import subprocess
import sys
import tempfile

import tensorflow as tf

_ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
REDUCTIONS = os.path.join(_ROOT, "tests", "cli", "reductions")


def names():
  return sorted(name[:-3] for name in os.listdir(REDUCTIONS)
                if name.endswith(".py") and not name.startswith("_"))


def _stub():
  """A folder holding an empty tf_mixed_precision_compat.auto."""
  folder = tempfile.mkdtemp()
  package = os.path.join(folder, "tf_mixed_precision_compat")
  os.mkdir(package)
  for module in ("__init__.py", "auto.py"):
    open(os.path.join(package, module), "w").close()
  return folder


# Reductions that save and resume: their checkpoints are kept beside the
# record (NAME_model_dir/), for the converted resume of
# tests/cli/test_reductions_resume.py.
RESUMES = ("mlcommons_resnet_runnable", "model_garden_detection_base_model")


def record(name, stub, out_dir):
  out = os.path.join(tempfile.mkdtemp(), "out.json")
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=stub)
  if name in RESUMES:
    directory = os.path.join(out_dir, name + "_model_dir")
    shutil.rmtree(directory, ignore_errors=True)
    env["REDUCTION_MODEL_DIR"] = directory
  result = subprocess.run(
      [sys.executable, os.path.join(REDUCTIONS, name + ".py"), out],
      stdout=subprocess.PIPE, stderr=subprocess.PIPE,
      universal_newlines=True, env=env, cwd=REDUCTIONS)
  if result.returncode == 0:
    with open(out) as f:
      recorded = json.load(f)
  else:
    recorded = {"error": result.stderr[-600:]}
  recorded["tensorflow"] = tf.__version__
  with open(os.path.join(out_dir, name + ".json"), "w") as f:
    json.dump(recorded, f, indent=1, sort_keys=True)
    f.write("\n")
  return "error" not in recorded


def main(argv):
  version = "".join(tf.__version__.split(".")[:2])
  if version not in ("23", "24"):
    sys.exit("run under TF 2.3.4 or 2.4.4, not %s" % tf.__version__)
  out_dir = os.path.join(_ROOT, "tests", "fixtures", "reductions",
                         "tf" + version)
  if not os.path.isdir(out_dir):
    os.makedirs(out_dir)
  stub = _stub()
  for name in argv or names():
    print(name, "ran" if record(name, stub, out_dir) else "failed")


if __name__ == "__main__":
  main(sys.argv[1:])
