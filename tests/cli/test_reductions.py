"""Real jobs' mixed-precision data flow, run before and after `migrate`.

Each file of tests/cli/reductions re-creates, in our words and on seeded
data, one public TF 2.3/2.4 job's mixed-precision data flow, with the install
line. tools/gen_reduction_records.py recorded each under real TF 2.4.4 and
2.3.4 (tests/fixtures/reductions). Here each runs on TF 2.21:

- with the package: loss scales, counters, skipped steps and iterations
  equal the record; losses and weights agree within float16 rounding (TF
  2.21's float16 CPU kernels round otherwise than TF 2.4's);
- after `migrate --write`, with the package unimportable: losses, loss
  scales, counters and weights equal the run with the package bit for bit,
  `iterations` lower by the skipped steps only (Keras 3 does not count
  them). A reduction `migrate` leaves MANUAL must say why (see `MANUAL`).

`python -m tests.cli.test_reductions` prints docs/migration.md's table.
"""

import concurrent.futures
import contextlib
import io
import json
import os
import re
import shutil
import subprocess
import tempfile

import numpy as np
import pytest

from tests.cli import job_runs
from tf_mixed_precision_compat.cli import main

_HERE = os.path.dirname(os.path.abspath(__file__))
REDUCTIONS = os.path.join(_HERE, "reductions")
_FIXTURES = os.path.join(_HERE, "..", "fixtures", "reductions")
_DOCS = os.path.join(job_runs.ROOT, "docs", "migration.md")
_TABLE = ("<!-- reductions: start -->", "<!-- reductions: end -->")
_LEGACY = os.environ.get("TF_USE_LEGACY_KERAS") == "1"
pytestmark = pytest.mark.skipif(
    _LEGACY, reason="migrate writes Keras 3 code; its runs need Keras 3")

# Reductions `migrate` leaves MANUAL: a text of the reason its report gives.
# Strict: a reduction that becomes native must leave this table.
MANUAL = {
    "model_garden_bert_training_utils": "is no instance of the experimental",
    "opennmt_grad_accumulation": "Keras 3's optimizers have no get_gradients",
    # Its trainer builds the optimizer before the model exists.
    "tensorflowtts_base_trainer": "build it once",
}
# Reductions whose Keras 3 update depends on `iterations` (Adam's bias
# correction, a step schedule): after the first skipped step, which Keras 3
# does not count, their losses and weights differ as that makes them.
COUNTS_ITERATIONS = {"automl_efficientdet_train_step",  # warm-up schedule
                     "model_garden_ncf",  # Adam
                     "doctr_classification_amp", "nvidia_unet_medical",
                     "nvidia_electra_grad_accumulation"}
# Dynamic-scale reductions that overflow nothing on CPU, with the reason.
NO_OVERFLOW = dict.fromkeys(
    ["transformers_run_tf_glue", "dsoaws_bert_reviews_fit"],
    "Grappler's auto_mixed_precision acts on GPUs only: on CPU the model "
    "computes in float32, where batch OVERFLOW overflows nothing")
# Known bugs of the package a reduction found, by reduction: (reason, a text
# of the failure). Strict: the run with the package must fail with it.
BUGS = {
    "tensorflowtts_base_trainer": (
        "a tf.train.Checkpoint of the optimizer without the model: TF 2.4 "
        "saved no slots (their variables were not in it), the package's "
        "Keras 3 optimizer saves and restores them, so the resumed moments "
        "differ", "Not equal to tolerance"),
}
# Reductions a reference TF cannot run as written (the other release's API),
# by release: the text of its error. TF 2.3 lacks TF 2.4's non-experimental
# API ("has no attribute", the default).
OLD_TF_CANNOT = {"nvidia_dlrm_embeddings": {
    "23": "cannot import name 'LossScaleOptimizer'"}}


def names():
  return sorted(name[:-3] for name in os.listdir(REDUCTIONS)
                if name.endswith(".py") and not name.startswith("_"))


def source(name):
  """The repository a reduction's docstring names on its `Source:` line."""
  with open(os.path.join(REDUCTIONS, name + ".py")) as f:
    found = re.search(r"^Source: ([\w.-]+/[\w.-]+)", f.read(), re.M)
  assert found, f"{name}: its docstring has no 'Source: owner/repo, ...'"
  return found.group(1)


def recorded(name):
  """{release: what it recorded} for TF 2.4.4 and 2.3.4."""
  out = {}
  for version in ("24", "23"):
    with open(os.path.join(_FIXTURES, "tf" + version, name + ".json")) as f:
      out[version] = json.load(f)
  return out


def migrate(path, *flags):
  """`migrate --write --json [flags]` on `path`: its findings."""
  out = io.StringIO()
  with contextlib.redirect_stdout(out):
    # 1: some use is MANUAL.
    assert main(["migrate", path, "--write", "--json", *flags]) in (0, 1)
  return json.loads(out.getvalue())[path]


def _run(folder, name, with_package):
  out = os.path.join(folder, name + ".out.json")
  argv, env = job_runs.command(name + ".py", [out], with_package)
  result = subprocess.run(argv, capture_output=True, text=True, env=env,
                          cwd=folder, check=False)
  if result.returncode:
    return result.stderr[-3000:]
  with open(out) as f:
    return json.load(f)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
  """{name: (package run, findings, migrated run or None, --deviate's
  (findings, run or None) for a reduction left MANUAL)}, two at a time."""
  work = tmp_path_factory.mktemp("reductions")
  folders = {k: str(work / k) for k in ("package", "migrated", "deviated")}
  for folder in folders.values():
    shutil.copytree(REDUCTIONS, folder)
  findings = {name: migrate(os.path.join(folders["migrated"], name + ".py"))
              for name in names()}
  deviated = {name: migrate(os.path.join(folders["deviated"], name + ".py"),
                            "--deviate")
              for name in names() if _manual(findings[name])}
  with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
    before = {n: pool.submit(_run, folders["package"], n, True)
              for n in names()}
    after = {n: pool.submit(_run, folders["migrated"], n, False)
             for n in names() if not _manual(findings[n])}
    past = {n: pool.submit(_run, folders["deviated"], n, False)
            for n, found in deviated.items() if not _manual(found)}
    return {n: (before[n].result(), findings[n],
                after[n].result() if n in after else None,
                (deviated.get(n), past[n].result() if n in past else None))
            for n in names()}


def _manual(findings):
  return [f for f in findings if f["status"] == "manual"]


def test_reductions_cover_fifteen_jobs_of_eight_repositories():
  assert len(names()) >= 15
  assert len({source(n) for n in names()}) >= 8
  assert set(MANUAL) | set(OLD_TF_CANNOT) | set(BUGS) | set(
      NO_OVERFLOW) | COUNTS_ITERATIONS <= set(names())


def _with_bugs(all_names):
  return [n if n not in BUGS else pytest.param(n, marks=pytest.mark.xfail(
      strict=True, raises=AssertionError, reason=BUGS[n][0]))
          for n in all_names]


@pytest.mark.parametrize("name", _with_bugs(names()))
def test_with_the_package_it_does_what_real_tf_did(runs, name):
  try:
    _does_what_real_tf_did(runs[name][0], name)
  except AssertionError as e:
    if name in BUGS and BUGS[name][1] not in str(e):
      raise RuntimeError(f"not the known bug: {e}") from e  # Not xfail.
    raise


def _does_what_real_tf_did(got, name):
  assert isinstance(got, dict), got
  if got["steps"][0]["counter"] is not None and name not in NO_OVERFLOW:
    assert any(step["skipped"] for step in got["steps"])  # An overflow.
  ran = 0
  for version, record in recorded(name).items():
    if "error" in record:
      assert OLD_TF_CANNOT.get(name, {}).get(
          version, "has no attribute") in record["error"]
      continue
    ran += 1
    for mine, theirs in zip(got["steps"], record["steps"], strict=True):
      for key in ("skipped", "loss_scale", "counter", "iterations"):
        assert mine[key] == theirs[key], (version, key, mine, theirs)
      np.testing.assert_allclose(mine["loss"], theirs["loss"], rtol=1e-2)
    for mine, theirs in zip(got["weights"], record["weights"], strict=True):
      np.testing.assert_allclose(mine, theirs, rtol=1e-2, atol=1e-3)
  assert ran


@pytest.mark.parametrize("name", names())
def test_migrated_it_does_the_same_without_the_package(runs, name):
  package, findings, migrated, _ = runs[name]
  if name in MANUAL:
    assert any(MANUAL[name] in f["change"] for f in _manual(findings)), (
        [f["change"] for f in _manual(findings)])
    assert migrated is None
    return
  assert not _manual(findings), _manual(findings)
  _same_run(migrated, package, name)


def _same_run(migrated, package, name):
  """`migrated` did what the run with the package did, bit for bit (Keras
  3's uncounted skipped steps aside)."""
  assert isinstance(migrated, dict), migrated
  skipped, previous = 0, float("inf")
  for mine, theirs in zip(migrated["steps"], package["steps"], strict=True):
    if not (skipped and name in COUNTS_ITERATIONS):
      assert mine["loss"] == theirs["loss"]
    assert mine["skipped"] == theirs["skipped"]
    if mine["loss_scale"] is None:  # No wrapper left: a fixed scale.
      assert theirs["counter"] is None
    else:
      assert (mine["loss_scale"], mine["counter"]) == (
          theirs["loss_scale"], theirs["counter"])
    # An overflow lowers the scale; a step that only accumulates does not.
    skipped += theirs["skipped"] and mine["loss_scale"] is not None and (
        theirs["loss_scale"] < previous)
    previous = theirs["loss_scale"] or 0
    if theirs["iterations"] is not None and (
        job_runs.wrapper_counts_iterations()):
      assert theirs["iterations"] - mine["iterations"] == skipped
  if not (skipped and name in COUNTS_ITERATIONS):
    assert migrated["weights"] == package["weights"]


# MANUAL entries --deviate has no closest form for: TF 2.x's get_gradients,
# a class check Keras 3 cannot answer as TF did, a build whose model is not
# known (and the install line they keep).
_NO_CLOSEST = ("no get_gradients", "no instance of", "build it once",
               "kept until the uses marked MANUAL")


@pytest.mark.parametrize("name", sorted(MANUAL))
def test_deviate_writes_a_native_job_where_migrate_stopped(runs, name):
  package, _, _, (findings, deviated) = runs[name]
  left = _manual(findings)
  assert all(any(k in f["change"] for k in _NO_CLOSEST) for f in left), left
  if left:
    assert deviated is None
    return
  assert isinstance(deviated, dict), deviated  # It runs without the package.
  assert any(f["status"] == "deviation" for f in findings)
  assert len(deviated["steps"]) == len(package["steps"])


def _matches(name, manual):
  if manual:
    return "—"
  if name in COUNTS_ITERATIONS:
    return "until the first skipped step (Keras 3 does not count it)"
  return "yes, bit for bit"


def _migrated_copies():
  """{name: (findings, --deviate's findings or None)}, migrated in-process
  on copies."""
  out = {}
  with tempfile.TemporaryDirectory() as work:
    for name in names():
      path = os.path.join(work, name + ".py")
      shutil.copy(os.path.join(REDUCTIONS, name + ".py"), path)
      findings = migrate(path)
      deviated = None
      if _manual(findings):
        shutil.copy(os.path.join(REDUCTIONS, name + ".py"), path)
        deviated = migrate(path, "--deviate")
      out[name] = (findings, deviated)
  return out


def table(migrated=None):
  """docs/migration.md's table of the reductions.

  Args:
    migrated: {name: (findings, --deviate's findings or None)}; by default
      each reduction is migrated here.
  """
  migrated = migrated or _migrated_copies()
  rows = ["| job | source | uses | rewritten | manual | runs natively | "
          "matches | with --deviate |", "|---|---|---|---|---|---|---|---|"]
  for name in names():
    findings, found = migrated[name]
    manual = len(_manual(findings))
    rewritten = sum(f["status"] == "rewrite" for f in findings)
    deviate = "—"
    if manual:
      deviate = (f"{len(_manual(found))} manual left" if _manual(found)
                 else "runs natively, %d deviations" % sum(
                     f["status"] == "deviation" for f in found))
    rows.append(f"| `{name}` | {source(name)} | {len(findings)} | "
                f"{rewritten} | {manual} | {'no' if manual else 'yes'} | "
                f"{_matches(name, manual)} | {deviate} |")
  return "\n".join(rows)


def test_docs_table_is_the_reductions(runs):
  with open(_DOCS) as f:
    text = f.read()
  start, end = text.index(_TABLE[0]), text.index(_TABLE[1])
  assert text[start + len(_TABLE[0]):end].strip() == table(
      {n: (run[1], run[3][0]) for n, run in runs.items()})


if __name__ == "__main__":
  print(table())
