"""Acceptance: a TF 2.3 job and its TF 2.3.4 checkpoint leave the package.

`inspect`, `convert` and `migrate --write` take tests/cli/job (TF 2.3 code)
and the checkpoint TF 2.3.4 wrote (tests/fixtures/legacy/demo_tf23) to Keras
3 code and a native checkpoint. The migrated job, run in a fresh interpreter
where the package is not importable, continues step for step as the
original job does with the package installed.
"""

import json
import os
import shutil
import subprocess
import sys

import numpy as np

from tests import testing
from tf_mixed_precision_compat.cli import main

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
STEPS = 12


def _wrapper_counts_iterations():
  """Whether keras.optimizers.LossScaleOptimizer.iterations is the inner's.

  Keras 3.7 returns the wrapper's own counter, which no step advances;
  later Keras returns the inner optimizer's.
  """
  import keras  # pylint: disable=g-import-not-at-top
  opt = keras.optimizers.LossScaleOptimizer(keras.optimizers.SGD())
  return opt.iterations is opt.inner_optimizer.iterations


def _run_job(job_dir, checkpoint, out, with_package):
  env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
  env["TF_CPP_MIN_LOG_LEVEL"] = "2"
  if with_package:
    env["PYTHONPATH"] = ROOT
  result = subprocess.run(
      [sys.executable, "tf23_resume_job.py", checkpoint, str(STEPS), out],
      capture_output=True, text=True, env=env, cwd=job_dir, check=False)
  assert result.returncode == 0, result.stderr[-3000:]
  with open(out) as f:
    return json.load(f)


def _final_state(capsys, directory):
  assert main(["inspect", directory, "--json"]) == 0
  (opt,) = json.loads(capsys.readouterr().out)["optimizers"]
  return opt["iterations"], opt["loss_scale"]["value"], opt["loss_scale"][
      "counter"]


def test_tf23_job_and_checkpoint_to_keras3(capsys, tmp_path, monkeypatch):
  old = str(tmp_path / "old")
  shutil.copytree(testing.fixture_path("legacy", "demo_tf23"), old)
  shutil.copytree(testing.fixture_path("legacy", "demo_tf23"),
                  tmp_path / "old_for_package")
  job = str(tmp_path / "job")
  shutil.copytree(os.path.join(ROOT, "tests", "cli", "job"), job)
  shutil.copytree(job, tmp_path / "job_original")
  monkeypatch.chdir(job)
  model = ["--model", "job_model:make_model", "--policy", "mixed_float16"]
  # 1. inspect: the plan, in words.
  assert main(["inspect", old, *model]) == 0
  assert "restores exactly" in capsys.readouterr().out
  # 2. convert.
  new = str(tmp_path / "new")
  assert main(["convert", old, new, *model]) == 0, capsys.readouterr().err
  # 3. migrate.
  assert main(["migrate", "tf23_resume_job.py", "--write"]) == 0
  capsys.readouterr()
  keras3 = _run_job(job, new, str(tmp_path / "k3.json"), False)
  package = _run_job(str(tmp_path / "job_original"),
                     str(tmp_path / "old_for_package"),
                     str(tmp_path / "pkg.json"), True)
  skipped = 0
  assert len(keras3["history"]) == len(package["history"]) == STEPS
  for mine, theirs in zip(keras3["history"], package["history"]):
    assert mine["loss_scale"] == theirs["loss_scale"]
    np.testing.assert_allclose(mine["loss"], theirs["loss"], rtol=1e-3)
    # TF 2.x counted a skipped step in `iterations`; Keras 3 does not.
    skipped = theirs["iterations"] - mine["iterations"]
  if _wrapper_counts_iterations():
    assert skipped == 1  # the corrupted batch's step, and only it
  else:  # Keras 3.7: the job reads the wrapper's unadvanced counter.
    assert {h["iterations"] for h in keras3["history"]} == {0}
    skipped = 1
  # That step overflowed: the scale halved (from TF 2.3.4's 1024).
  assert [h["loss_scale"] for h in keras3["history"]][1:3] == [1024., 512.]
  assert len(keras3["weights"]) == len(package["weights"])
  for mine, theirs in zip(keras3["weights"], package["weights"]):
    np.testing.assert_allclose(mine, theirs, rtol=2**-10, atol=2**-14)
  iterations, scale, counter = _final_state(capsys, new)
  p_iterations, p_scale, p_counter = _final_state(
      capsys, str(tmp_path / "old_for_package"))
  assert (scale, counter) == (p_scale, p_counter)
  assert iterations == p_iterations - skipped == 40 + STEPS - 1
