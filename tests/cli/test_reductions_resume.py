"""Reductions that save and resume, resumed from the old TF's checkpoint.

tools/gen_reduction_records.py kept the checkpoint real TF 2.4.4 saved
midway through each such reduction (tests/fixtures/reductions/tf24/
NAME_model_dir/). Here it is converted (`convert --model`, the builder of
tests/cli/job_layouts/reduction_builders.py), the reduction migrated
(`migrate --write`), and the migrated job, with the package unimportable,
resumed at that step from the converted checkpoint: its steps from there
are the old TensorFlow's own continued run, within the float16 rounding the
package's run has against the record (TF 2.21's CPU kernels), and its loss
scale, counter, skipped steps and iterations are the record's exactly (the
converted checkpoint carries TF 2.4's iterations, skipped steps counted).
"""

import json
import os
import shutil
import subprocess

import numpy as np
import pytest

from tests.cli import job_runs
from tests.cli import test_reductions
from tf_mixed_precision_compat.cli import main

# name: (the step it saved at, that checkpoint in NAME_model_dir, the
# flags convert needs).
RESUMES = {
    "mlcommons_resnet_runnable": (4, "ckpt-1", ()),
    # bfloat16, no loss-scale optimizer: the plain Keras 3 optimizer.
    "model_garden_detection_base_model": (4, "ctl_step-1",
                                          ("--no-loss-scale",)),
}
_FIXTURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..",
                         "fixtures", "reductions", "tf24")
pytestmark = test_reductions.pytestmark


def _resumed(tmp_path, name):
  start, prefix, flags = RESUMES[name]
  folder = str(tmp_path / "job")
  shutil.copytree(test_reductions.REDUCTIONS, folder)
  findings = test_reductions.migrate(os.path.join(folder, name + ".py"))
  assert not test_reductions._manual(findings)  # pylint: disable=protected-access
  new = str(tmp_path / "new")
  assert main(["convert", os.path.join(_FIXTURES, name + "_model_dir",
                                       prefix), new, *flags, "--model",
               f"tests.cli.job_layouts.reduction_builders:{name}"]) == 0
  out = str(tmp_path / "out.json")
  argv, env = job_runs.command(name + ".py", [out], with_package=False)
  env.update(REDUCTION_MODEL_DIR=new, REDUCTION_START=str(start))
  result = subprocess.run(argv, capture_output=True, text=True, env=env,
                          cwd=folder, check=False)
  assert result.returncode == 0, result.stderr[-3000:]
  with open(out) as f:
    return json.load(f)


@pytest.mark.parametrize("name", sorted(RESUMES))
def test_migrated_job_resumes_from_the_converted_checkpoint(tmp_path, name):
  start = RESUMES[name][0]
  with open(os.path.join(_FIXTURES, name + ".json")) as f:
    record = json.load(f)
  got = _resumed(tmp_path, name)
  continued = record["steps"][start:]
  assert len(got["steps"]) == len(continued)
  for mine, theirs in zip(got["steps"], continued):
    for key in ("skipped", "loss_scale", "counter", "iterations"):
      assert mine[key] == theirs[key], (key, mine, theirs)
    np.testing.assert_allclose(mine["loss"], theirs["loss"], rtol=1e-2)
  for mine, theirs in zip(got["weights"], record["weights"], strict=True):
    np.testing.assert_allclose(mine, theirs, rtol=1e-2, atol=1e-3)
