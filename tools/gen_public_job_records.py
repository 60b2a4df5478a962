"""Records what real TF 2.3/2.4 do in the public jobs of tests/public_jobs/.

Run with each reference TensorFlow:

  .ref/tf24/bin/python tools/gen_public_job_records.py [JOB ...]
  .ref/tf23/bin/python tools/gen_public_job_records.py [JOB ...]

Runs every job (or only the named ones, keeping the others' records as they
are) as written, without the install line, twice: from the start with
`--out`, which writes its midway checkpoint with the job's own code, and then
with `--resume` from a copy of that checkpoint (a job may write on in the
folder it resumes from; the fixture stays as the old TF wrote it). Keeps the
per-step lines (loss scale, counter, skipped, iterations) of both runs in
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


def _resume(name, target):
  """The job resumed from a copy of its recorded checkpoint folder."""
  work = tempfile.mkdtemp()
  try:
    folder = os.path.join(work, name)
    shutil.copytree(target, folder)
    return _run(name, "--resume", folder)
  finally:
    shutil.rmtree(work, ignore_errors=True)


def main(names):
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  version = "".join(tf.__version__.split(".")[:2])
  fixtures = os.path.join(_ROOT, "tests", "fixtures", "public_jobs")
  ckpt_root = os.path.join(fixtures, "tf" + version)
  path = os.path.join(fixtures, "records_tf%s.json" % version)
  out = {"tensorflow_version": tf.__version__, "jobs": {}}
  if names:
    unknown = sorted(set(names) - set(job_names()))
    if unknown:
      raise SystemExit("no such job: %s" % ", ".join(unknown))
    with open(path) as f:
      out["jobs"] = json.load(f)["jobs"]
    for name in names:
      shutil.rmtree(os.path.join(ckpt_root, name), ignore_errors=True)
  else:
    names = job_names()
    shutil.rmtree(ckpt_root, ignore_errors=True)
  for name in names:
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
    resumed = _resume(name, target)
    if resumed.returncode != 0:
      raise RuntimeError(name + " does not resume: " + resumed.stderr[-2000:])
    out["jobs"][name] = {"steps": steps,
                         "checkpoint": os.path.relpath(checkpoint, folder),
                         "resumed": parse(resumed.stdout)[0]}
    shutil.rmtree(work)
    print(name, "recorded", flush=True)
  with open(path, "w") as f:
    json.dump(out, f, indent=1, sort_keys=True)
  print("wrote", path)


if __name__ == "__main__":
  main(sys.argv[1:])
