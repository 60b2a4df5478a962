"""Every rewrite `migrate` reports as keeping behaviour, run before and after.

Each job in tests/cli/migrated_jobs is TF 2.3/2.4 code with the install
line. It runs once as written (with the package) and once after `migrate
--write` in an interpreter where the package cannot be imported; losses,
loss scales, counters and final weights must agree step by step.
`iterations` may differ by the skipped steps only (TF 2.x counted them,
Keras 3 does not).
"""

import json
import os
import shutil
import subprocess

import numpy as np
import pytest

from tests.cli import job_runs
from tf_mixed_precision_compat.cli import main

JOBS = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                    "migrated_jobs")

def _run(job_dir, name, out, with_package):
  argv, env = job_runs.command(name, [out], with_package)
  result = subprocess.run(argv, capture_output=True, text=True, env=env,
                          cwd=job_dir, check=False)
  assert result.returncode == 0, result.stderr[-3000:]
  with open(out) as f:
    return json.load(f)


@pytest.mark.parametrize("name, rewrites", [
    ("tf23_policy_loss_scale_loop.py",
     {"Policy.loss_scale", "Optimizer.lr", "Optimizer.variables()",
      "LossScaleOptimizer.apply_gradients"}),
    ("tf23_fit_policy.py", {"keras.mixed_precision.experimental.Policy",
                            "LossScaleOptimizer.loss_scale"}),
    ("tf23_graph_rewrite_keras.py",
     {"tf.train.experimental.enable_mixed_precision_graph_rewrite",
      "tf.train.experimental.disable_mixed_precision_graph_rewrite"}),
    ("tf23_slots_then_restore.py",
     {"Optimizer._create_all_weights", "keras.mixed_precision.experimental."
      "Policy", "Policy.loss_scale", "LossScaleOptimizer.loss_scale"}),
    ("tf23_never_scaled_clipped.py",
     {"keras.mixed_precision.experimental.LossScaleOptimizer",
      "LossScaleOptimizer.apply_gradients"}),
    ("tf24_factory_loop.py",
     {"optimizer = LossScaleOptimizer(...)",
      "LossScaleOptimizer.dynamic_counter",
      "keras.mixed_precision.LossScaleOptimizer"}),
])
def test_migrated_job_matches_the_job_with_the_package(
    name, rewrites, tmp_path, capsys):
  job = tmp_path / "job"
  shutil.copytree(JOBS, job)
  package = _run(job, name, str(tmp_path / "package.json"), True)
  assert main(["migrate", str(job / name), "--write", "--json"]) == 0
  report = json.loads(capsys.readouterr().out)[str(job / name)]
  assert rewrites <= {f["api"] for f in report}
  assert {f["status"] for f in report} <= {"rewrite", "native"}
  migrated = (job / name).read_text()
  assert "tf_mixed_precision_compat" not in migrated
  keras3 = _run(job, name, str(tmp_path / "keras3.json"), False)
  assert len(keras3["history"]) == len(package["history"])
  skipped = 0
  for mine, theirs in zip(keras3["history"], package["history"]):
    for key in ("loss", "loss_scale", "counter", "lr"):
      if key in theirs:
        np.testing.assert_allclose(mine[key], theirs[key], rtol=1e-6,
                                   err_msg=key)
    if "iterations" in theirs:
      assert theirs["iterations"] - mine["iterations"] >= skipped
      skipped = theirs["iterations"] - mine["iterations"]
  if "iterations" in package["history"][0]:
    if job_runs.wrapper_counts_iterations():
      assert skipped == 1  # The overflowing batch, counted by TF 2.x only.
    else:  # Keras 3.7: the job reads the wrapper's unadvanced counter.
      assert {h["iterations"] for h in keras3["history"]} == {0}
  if "loss_scale" in package:
    assert keras3["loss_scale"] == package["loss_scale"]
  for mine, theirs in zip(keras3["weights"], package["weights"]):
    np.testing.assert_allclose(mine, theirs, rtol=1e-6, atol=1e-7)
