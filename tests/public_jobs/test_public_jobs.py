"""Real public TF 2.3/2.4 jobs plus the one line reproduce real TF per step.

Each job of this folder runs in a subprocess on TF 2.21 with
`import tf_mixed_precision_compat.auto` put before it, on the target of this
run: tf_keras when `TF_USE_LEGACY_KERAS=1` (CI's legacy stage: every job),
Keras 3 otherwise (only the jobs whose other Keras calls Keras 3 still has,
see `KERAS3`). Its per-step loss scale, counter, skipped steps and iterations
must equal what real TF 2.4.4 recorded for the same script (and TF 2.3.4
where it could run it), and resuming from the old TF's midway checkpoint,
through the job's own restore code, must continue with exactly the old TF's
remaining records (tools/gen_public_job_records.py).
"""

import concurrent.futures
import json
import os
import shutil
import subprocess
import sys
import tempfile

import pytest

_HERE = os.path.dirname(os.path.abspath(__file__))
_FIXTURES = os.path.join(_HERE, "..", "fixtures", "public_jobs")
_LEGACY = os.environ.get("TF_USE_LEGACY_KERAS") == "1"

# Jobs that also run on Keras 3, and why the others do not: each stops on a
# Keras 3 change that has nothing to do with mixed precision.
KERAS3 = {
    # No Keras at all: tf.compat.v1 optimizer, graph rewrite, Saver.
    "deepspeech_graph_rewrite": True,
    # `x.dtype.name` on a Keras tensor (a string in Keras 3).
    "tf_guide_mixed_precision": False,
    # `Metric.reset_states()` (Keras 3 has `reset_state()` only).
    "tensorflowtts_melgan": False,
    # `model.stop_training` read before any `fit` (Keras 3 sets it in `fit`
    # only), then `Metric.reset_states()`.
    "model_garden_bert_ctl": False,
    # `compile(experimental_steps_per_execution=...)`, and a
    # `ModelCheckpoint(save_weights_only=True)` path without `.weights.h5`.
    "model_garden_classifier_fit": False,
    # A `tf.Tensor` learning rate (`tf.constant(lr)`) for `Adam`.
    "opennmt_mirrored_trainer": False,
    # Runs with its `--keras3` edits (see EDITS).
    "retinanet_trainer": True,
    # `Metric.reset_state()`, which Keras 3 has too (the harness's spelling).
    "verse_vertebrae_localization": True,
    "verse_vertebrae_localization_tf24_form": True,
}
# Jobs one old release cannot run as written, because they use the other
# release's API, by job and release: the text of that release's error. (TF
# 2.3 lacks the non-experimental API: "has no attribute", the default.)
OLD_TF_CANNOT = {
    # TF 2.3's `opt.loss_scale()`; TF 2.4's experimental class has a tensor.
    "verse_vertebrae_localization": {"24": "'Tensor' object is not callable"},
    # TF 2.4's tensor `opt.loss_scale`; TF 2.3's is a `LossScale`.
    "verse_vertebrae_localization_tf24_form": {"23": "DynamicLossScale"},
}
# Jobs that TF 2.21 runs with their own switch for the edits Keras's current
# optimizers and Keras 3 need (on both targets), none about mixed precision;
# each job's docstring lists them. The old TF ran them as written.
EDITS = {"retinanet_trainer": ("--keras3",)}
# Known bugs of the package these jobs found, by job and test ("steps": the
# full run, "resume": the resumed one): (reason, the text the job's error
# shows). Strict: the test must fail with that error (any other failure is
# reported as one) and an unexpected pass fails, so a mark goes when its bug
# is fixed.
BUGS = {}
# The same, for bugs of the tf_keras target only (TF_USE_LEGACY_KERAS=1).
LEGACY_BUGS = {}
_LAUNCH = ("import sys, runpy; import tf_mixed_precision_compat.auto; "
           "sys.argv = sys.argv[1:]; "
           "runpy.run_path(sys.argv[0], run_name='__main__')")


def _recorded(version):
  with open(os.path.join(_FIXTURES, "records_tf%s.json" % version)) as f:
    return json.load(f)["jobs"]


def _names():
  return sorted(_recorded("24"))


def _parse(stdout):
  return [json.loads(line) for line in stdout.splitlines()
          if line.startswith("{") and "checkpoint" not in json.loads(line)]


def _run(name, *args):
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
  script = os.path.join(_HERE, name + ".py")
  args = EDITS.get(name, ()) + args
  return subprocess.run([sys.executable, "-c", _LAUNCH, script] + list(args),
                        capture_output=True, text=True, env=env, cwd=_HERE)


def _run_resumed(name, version):
  """The job resumed from a copy of the old TF's midway checkpoint."""
  work = tempfile.mkdtemp()
  try:
    folder = os.path.join(work, name)
    shutil.copytree(os.path.join(_FIXTURES, "tf" + version, name), folder)
    return _run(name, "--resume", folder)
  finally:
    shutil.rmtree(work, ignore_errors=True)


def _selected():
  return [n for n in _names() if _LEGACY or KERAS3[n]]


@pytest.fixture(scope="module")
def runs():
  """Every run of this target, two at a time."""
  todo = {}
  for name in _selected():
    todo[(name, "full")] = (_run, name)
    for version in ("24", "23"):
      if "steps" in _recorded(version)[name]:
        todo[(name, "resume" + version)] = (_run_resumed, name, version)
  with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
    futures = {key: pool.submit(fn, *rest)
               for key, (fn, *rest) in todo.items()}
    return {key: future.result() for key, future in futures.items()}


def test_every_job_has_a_keras3_decision():
  assert sorted(KERAS3) == _names()


def test_bugs_name_jobs_and_tests():
  assert set(EDITS) | set(OLD_TF_CANNOT) <= set(_names())
  for bugs in (BUGS, LEGACY_BUGS):
    assert set(bugs) <= set(_names())
    for tests in bugs.values():
      assert set(tests) <= {"steps", "resume"}
      assert all(len(bug) == 2 for bug in tests.values())


def _skip_unless_selected(name):
  if not _LEGACY and not KERAS3[name]:
    pytest.skip("needs tf_keras (TF_USE_LEGACY_KERAS=1): see KERAS3")


class KnownBug(Exception):
  """A job failed with the error of a known bug (see BUGS)."""


def _bug(name, test):
  """(reason, signature) of a known bug failing `test` of job `name` here."""
  bug = BUGS.get(name, {}).get(test)
  if bug is None and _LEGACY:
    bug = LEGACY_BUGS.get(name, {}).get(test)
  return bug


def _params(test):
  """The job names, strict-xfail where a known bug fails `test` here."""
  params = []
  for name in _names():
    bug = _bug(name, test)
    params.append(name if bug is None else pytest.param(
        name, marks=pytest.mark.xfail(strict=True, raises=KnownBug,
                                      reason=bug[0])))
  return params


def _succeeded(result, name, test):
  bug = _bug(name, test)
  if result.returncode != 0 and bug is not None and bug[1] in result.stderr:
    raise KnownBug(bug[0])
  assert result.returncode == 0, result.stderr[-4000:]


@pytest.mark.parametrize("name", _params("steps"))
def test_steps_equal_real_tf(runs, name):
  _skip_unless_selected(name)
  result = runs[(name, "full")]
  _succeeded(result, name, "steps")
  got = _parse(result.stdout)
  assert any(step["skipped"] for step in got)
  ran = 0
  for version in ("24", "23"):
    recorded = _recorded(version)[name]
    if "steps" in recorded:
      assert got == recorded["steps"]
      ran += 1
    else:  # The job uses the other release's API.
      assert OLD_TF_CANNOT.get(name, {}).get(
          version, "has no attribute") in recorded["error"]
  assert ran


@pytest.mark.parametrize("version", ["24", "23"])
@pytest.mark.parametrize("name", _params("resume"))
def test_resumes_old_tf_checkpoint_exactly(runs, name, version):
  _skip_unless_selected(name)
  recorded = _recorded(version)[name]
  if "steps" not in recorded:
    pytest.skip("TF 2.%s could not run this job" % version[1])
  result = runs[(name, "resume" + version)]
  _succeeded(result, name, "resume")
  assert _parse(result.stdout) == recorded["resumed"]
  assert recorded["resumed"]
