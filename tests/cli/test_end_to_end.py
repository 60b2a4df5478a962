"""Acceptance: a TF 2.3 job and its TF 2.3.4 checkpoint leave the package.

`inspect`, `convert` and `migrate --write` take tests/cli/job (TF 2.3 code)
and the checkpoint TF 2.3.4 wrote (tests/fixtures/legacy/demo_tf23) to Keras
3 code and a native checkpoint; `convert` and `migrate --write` take
tests/cli/job_trainer (model and optimizer on a trainer object) and
tests/fixtures/convert/trainer_tf23 likewise. The migrated job, run in a
fresh interpreter where the package is not importable, continues step for
step as the original job does with the package installed.
"""

import json
import os
import shutil
import subprocess
import sys

import numpy as np

from tests import testing
from tests.cli import job_runs
from tf_mixed_precision_compat.cli import main

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
STEPS = 12

def _start_job(job_dir, script, checkpoint, out, with_package):
  """Starts `script` for STEPS steps on `checkpoint`; `_job_output` waits.

  Without the package, it runs where the package cannot be imported.
  """
  argv, env = job_runs.command(script, [checkpoint, str(STEPS), out],
                               with_package)
  process = subprocess.Popen(  # pylint: disable=consider-using-with
      argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
      env=env, cwd=job_dir)
  return process, out


def _job_output(started):
  process, out = started
  _, stderr = process.communicate()
  assert process.returncode == 0, stderr[-3000:]
  with open(out) as f:
    return json.load(f)


def _runs(tmp_path, script):
  """The migrated job (tmp_path/job) on tmp_path/new and the original one
  with the package on tmp_path/old_for_package, both at once."""
  started = [_start_job(str(tmp_path / "job"), script, str(tmp_path / "new"),
                        str(tmp_path / "k3.json"), False),
             _start_job(str(tmp_path / "job_original"), script,
                        str(tmp_path / "old_for_package"),
                        str(tmp_path / "pkg.json"), True)]
  return [_job_output(s) for s in started]


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
  keras3, package = _runs(tmp_path, "tf23_resume_job.py")
  skipped = 0
  assert len(keras3["history"]) == len(package["history"]) == STEPS
  for mine, theirs in zip(keras3["history"], package["history"]):
    assert mine["loss_scale"] == theirs["loss_scale"]
    np.testing.assert_allclose(mine["loss"], theirs["loss"], rtol=1e-3)
    # TF 2.x counted a skipped step in `iterations`; Keras 3 does not.
    skipped = theirs["iterations"] - mine["iterations"]
  if job_runs.wrapper_counts_iterations():
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


def test_tf23_trainer_job_and_checkpoint_to_keras3(capsys, tmp_path,
                                                   monkeypatch):
  # Model and optimizer on a trainer tf.Module; the job restores
  # tf.train.Checkpoint(trainer=trainer, step=step, epoch=epoch), which
  # migrate leaves as it is: convert keeps that layout in NEW.
  fixture = testing.fixture_path("convert", "trainer_tf23")
  shutil.copytree(fixture, tmp_path / "old")
  shutil.copytree(fixture, tmp_path / "old_for_package")
  job = tmp_path / "job"
  shutil.copytree(os.path.join(ROOT, "tests", "cli", "job_trainer"), job)
  shutil.copytree(job, tmp_path / "job_original")
  monkeypatch.chdir(job)
  # Not the other job's `job_model`, imported by --model before.
  monkeypatch.delitem(sys.modules, "job_model", raising=False)
  assert main(["convert", str(tmp_path / "old"), str(tmp_path / "new"),
               "--model", "job_model:make_model", "--policy",
               "mixed_float16"]) == 0, capsys.readouterr().err
  assert "model at trainer.model, optimizer at trainer.optimizer, epoch " \
      "at epoch, step at step" in capsys.readouterr().err
  # Every use rewritten, nothing left to do by hand.
  assert main(["migrate", "tf23_trainer_job.py", "--write"]) == 0, \
      capsys.readouterr().out
  capsys.readouterr()
  keras3, package = _runs(tmp_path, "tf23_trainer_job.py")
  mine, theirs = keras3["history"], package["history"]
  assert len(mine) == len(theirs) == STEPS
  assert [h["loss_scale"] for h in mine] == [h["loss_scale"] for h in theirs]
  # The third step's corrupted batch overflows: skipped, the scale halved
  # from the checkpoint's 8192. TF 2.x counted it in `iterations`.
  assert [h["loss_scale"] for h in mine][1:3] == [8192., 4096.]
  skipped = [t["iterations"] - m["iterations"] for m, t in zip(mine, theirs)]
  if job_runs.wrapper_counts_iterations():
    assert skipped == [0, 0] + [1] * (STEPS - 2)
  else:  # Keras 3.7: the job reads the wrapper's unadvanced counter.
    assert {h["iterations"] for h in mine} == {0}
  # Up to the skipped step, and the loss right after it (of the weights it
  # left), the same numbers.
  np.testing.assert_allclose([h["loss"] for h in mine[:4]],
                             [h["loss"] for h in theirs[:4]], rtol=1e-3)
  # After it, the job's Adam corrects its moments' bias with `iterations`,
  # one less on Keras 3 (docs/migration.md), so each of its steps is 0.6%
  # to 1.1% shorter than TF 2.x's and the gap grows step by step. Measured
  # over the 8 steps after the skip: losses up to 3.2e-3 apart (relative),
  # weights up to 2.8e-4 (absolute: some weights are nearly 0).
  np.testing.assert_allclose([h["loss"] for h in mine[4:]],
                             [h["loss"] for h in theirs[4:]], rtol=4e-3)
  assert len(keras3["weights"]) == len(package["weights"])
  for a, b in zip(keras3["weights"], package["weights"]):
    np.testing.assert_allclose(a, b, rtol=0, atol=3e-4)
  assert (keras3["step"], keras3["epoch"]) == (
      package["step"], package["epoch"]) == (12 + STEPS, 4)
  iterations, scale, counter = _final_state(capsys, str(tmp_path / "new"))
  p_iterations, p_scale, p_counter = _final_state(
      capsys, str(tmp_path / "old_for_package"))
  assert (scale, counter) == (p_scale, p_counter) == (4096.0, STEPS - 3)
  assert iterations == p_iterations - 1 == 12 + STEPS - 1
