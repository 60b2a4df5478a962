"""Records what real TF 2.3/2.4 do in the public jobs of tests/public_jobs/.

Run with each reference TensorFlow:

  .ref/tf24/bin/python tools/gen_public_job_records.py
  .ref/tf23/bin/python tools/gen_public_job_records.py

Runs every job (as written, without the install line) twice: from the start
with `--out`, which writes its midway checkpoint with the job's own code,
and then with `--resume` from that checkpoint. Keeps the per-step lines (loss
scale, counter, skipped, iterations) of both runs in
tests/fixtures/public_jobs/records_tf<23|24>.json and the checkpoint files in
tests/fixtures/public_jobs/tf<23|24>/<job>/. A job the old TF cannot run (TF
2.3 lacks the non-experimental API) is recorded with the end of its error.
"""

import json
import os
import shutil
import subprocess
import sys
import tempfile

_ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
JOBS = os.path.join(_ROOT, "tests", "public_jobs")
NOT_JOBS = ("__init__.py", "jobreport.py", "test_public_jobs.py")


def job_names():
  return sorted(name[:-3] for name in os.listdir(JOBS)
                if name.endswith(".py") and name not in NOT_JOBS)


def parse(stdout):
  """The per-step records and the checkpoint path a job printed."""
  steps, checkpoint = [], None
  for line in stdout.splitlines():
    if line.startswith("{"):
      item = json.loads(line)
      if "checkpoint" in item:
        checkpoint = item["checkpoint"]
      else:
        steps.append(item)
  return steps, checkpoint


def _run(name, *args):
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
  return subprocess.run(
      [sys.executable, os.path.join(JOBS, name + ".py")] + list(args),
      stdout=subprocess.PIPE, stderr=subprocess.PIPE,
      universal_newlines=True, env=env, cwd=JOBS)


def main():
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  version = "".join(tf.__version__.split(".")[:2])
  fixtures = os.path.join(_ROOT, "tests", "fixtures", "public_jobs")
  ckpt_root = os.path.join(fixtures, "tf" + version)
  shutil.rmtree(ckpt_root, ignore_errors=True)
  out = {"tensorflow_version": tf.__version__, "jobs": {}}
  for name in job_names():
    work = tempfile.mkdtemp()
    result = _run(name, "--out", work)
    if result.returncode != 0:
      out["jobs"][name] = {"error": result.stderr[-500:]}
      shutil.rmtree(work)
      continue
    steps, checkpoint = parse(result.stdout)
    # The folder holding the checkpoint (and the files saved beside it).
    folder = os.path.dirname(checkpoint)
    target = os.path.join(ckpt_root, name)
    shutil.copytree(folder, target)
    state = os.path.join(target, "checkpoint")
    if os.path.exists(state):  # Paths relative to the folder, as TF accepts.
      with open(state) as f:
        text = f.read().replace(os.path.join(folder, ""), "")
      with open(state, "w") as f:
        f.write(text)
    resumed = _run(name, "--resume", target)
    if resumed.returncode != 0:
      raise RuntimeError(name + " does not resume: " + resumed.stderr[-2000:])
    out["jobs"][name] = {"steps": steps,
                         "checkpoint": os.path.relpath(checkpoint, folder),
                         "resumed": parse(resumed.stdout)[0]}
    shutil.rmtree(work)
    print(name, "recorded", flush=True)
  path = os.path.join(fixtures, "records_tf%s.json" % version)
  with open(path, "w") as f:
    json.dump(out, f, indent=1, sort_keys=True)
  print("wrote", path)


if __name__ == "__main__":
  main()
