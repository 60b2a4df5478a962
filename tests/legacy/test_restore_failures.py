"""A failed restore stays failed; slots are checked and found at restore time.

The checkpoints and TF 2.4.4's outcomes come from
tools/gen_restore_failure_fixtures.py (tests/fixtures/restore_failures/).
After `install()` the same job (its Keras 3 twin, tests/legacy/restore_jobs.py)
restores them with its own `tf.train.Checkpoint` code:

* a deferred restore into an unbuilt model that does not match raises at the
  model's first call, as TF 2.4.4 did, and again at every later call and
  update, and the status' assertions raise; nothing is assigned (TF 2.4.4
  had restored the optimizer's step already);
* a slot of the wrong shape raises at restore time with nothing assigned, as
  TF 2.4.4 did, also when the optimizer has no slots yet; TF 2.4.4 trained
  on afterwards, and so does the job here (its values are the ones it had);
* `get_slot(var, "m")` right after a restore returns the restored slot;
* what the same restore assigns at once beside the model (a plain `step`
  variable, the save counter) is put back when the model's deferred part
  fails (TF 2.4.4 had kept the checkpoint's `step`), and a successful
  restore of that checkpoint is exact.

Eagerly, in `tf.function` and on 2 replicas.
"""

import json
import os
import shutil

import numpy as np
import pytest
import tensorflow as tf

from tests.legacy import restore_jobs as jobs
import tf_mixed_precision_compat as mp
from tf_mixed_precision_compat.legacy import RestoreError

RECORD = jobs.outcomes()


@pytest.fixture(autouse=True)
def _installed():
  mp.install()
  yield
  mp.uninstall()


def _prefix(name):
  return tf.train.latest_checkpoint(jobs.fixture_dir(name))


def _exception_type(name):
  return {"ValueError": ValueError, "AssertionError": AssertionError}[name]


class _Job:
  """The fixture job's objects, optionally on 2 replicas."""

  def __init__(self, mode, strategy=None, width=3, build=False):
    self.strategy = strategy if mode == "mirrored" else None
    with self._scope():
      self.model, self.opt = jobs.Net(width=width), jobs.optimizer()
      if build:
        self.model(jobs.X)
    self.mode = mode
    step = lambda: jobs.step(self.model, self.opt)
    if self.strategy is not None:
      strategy = self.strategy
      step = lambda: strategy.run(lambda: jobs.step(self.model, self.opt))
    # In tf.function each use traces anew, as a job's new attempt (or
    # Keras' fit) makes a new function: TF itself never runs again a
    # tf.function whose first trace created variables and then raised.
    self.step = step if mode == "eager" else lambda: tf.function(step)()

  def _scope(self):
    if self.strategy is None:
      return _Null()
    return self.strategy.scope()

  def call(self):
    if self.strategy is None:
      return self.model(jobs.X)
    return self.strategy.run(lambda: self.model(jobs.X))

  def restore(self, prefix):
    with self._scope():
      return tf.train.Checkpoint(model=self.model,
                                 optimizer=self.opt).restore(prefix)

  def values(self):
    return ([np.asarray(v.numpy()) for v in self.model.weights] +
            [int(self.opt.iterations.numpy()),
             float(self.opt.loss_scale.numpy())])


class _Null:

  def __enter__(self):
    return self

  def __exit__(self, *unused):
    return False


def _rewritten(prefix, out_dir, key, value):
  """A copy of checkpoint `prefix` whose tensor `key` holds `value`."""
  reader = tf.train.load_checkpoint(prefix)
  names = sorted(reader.get_variable_to_shape_map())
  tensors = [value if n == key else reader.get_tensor(n) for n in names]
  os.makedirs(out_dir, exist_ok=True)
  out = os.path.join(out_dir, "ckpt-1")
  tf.raw_ops.SaveV2(prefix=out, tensor_names=names,
                    shape_and_slices=[""] * len(names),
                    tensors=[tf.constant(t) for t in tensors])
  return out


MODES = ["eager", "function", "mirrored"]


def _assert_stays_failed(job, status, first_error):
  """Every later use raises the same error; the status assertions raise."""
  for use in (job.call, job.step, job.call):
    with pytest.raises(RestoreError) as again:
      use()
    assert str(again.value) == str(first_error)
  for check in (status.assert_consumed,
                status.assert_existing_objects_matched,
                status.assert_nontrivial_match):
    with pytest.raises(AssertionError, match="failed"):
      check()
  # Nothing of it was assigned (TF 2.4.4 had restored the step already).
  assert int(job.opt.iterations.numpy()) == 0
  assert float(job.opt.loss_scale.numpy()) == 2.0**10


@pytest.mark.parametrize("mode", MODES)
def test_a_model_of_another_width_fails_at_every_call(mode,
                                                      mirrored_strategy):
  want = RECORD["wrong_width"]
  job = _Job(mode, mirrored_strategy, width=4)
  status = job.restore(_prefix("ckpt_good"))
  assert want["restore"]["raised"] is None  # TF 2.4.4 deferred it too.
  assert want["first_call"]["raised"] == want["second_call"]["raised"]
  with pytest.raises(_exception_type(want["first_call"]["raised"]),
                     match="shape") as first:
    job.call() if mode != "function" else job.step()
  assert isinstance(first.value, RestoreError)
  assert want["train_step"]["raised"] == "ValueError"
  assert want["assert_consumed"]["raised"] == "AssertionError"
  _assert_stays_failed(job, status, first.value)


@pytest.mark.parametrize("mode", MODES)
def test_a_corrupted_kernel_fails_at_every_call(mode, mirrored_strategy,
                                                tmp_path):
  prefix = _rewritten(_prefix("ckpt_good"), str(tmp_path),
                      "model/head/w/.ATTRIBUTES/VARIABLE_VALUE",
                      np.zeros((3, 1), np.float64))
  job = _Job(mode, mirrored_strategy)
  status = job.restore(prefix)
  with pytest.raises(RestoreError, match="dtype float64") as first:
    job.step()
  # The error carries the problem as a record, besides its message.
  (problem,) = first.value.problems
  assert (problem.kind, problem.key, problem.found, problem.expected) == (
      "dtype", "model/head/w/.ATTRIBUTES/VARIABLE_VALUE", np.float64,
      np.float32)
  _assert_stays_failed(job, status, first.value)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("slots_first", [False, True])
def test_a_slot_of_the_wrong_shape_raises_at_restore(mode, slots_first,
                                                     mirrored_strategy):
  case = "bad_slot_slots_exist" if slots_first else "bad_slot_fresh_optimizer"
  want = RECORD[case]
  job = _Job(mode, mirrored_strategy, build=True)
  if slots_first:
    job.step()
  before = job.values()
  with pytest.raises(_exception_type(want["restore"]["raised"]),
                     match=r"shape \(1, 5\) in the checkpoint, \(3, 1\)"):
    job.restore(_prefix("ckpt_bad_slot"))
  assert not want["weights_changed_at_restore"]
  assert not want["iterations_changed_at_restore"]
  after = job.values()
  for a, b in zip(before, after):
    np.testing.assert_array_equal(a, b)
  # As in TF 2.4.4 the job can go on with the values it had (the restore
  # raised at once, before anything was assigned).
  assert want["train_step"]["raised"] is None
  job.step()
  assert int(job.opt.iterations.numpy()) == before[-2] + 1


@pytest.mark.parametrize("mode", MODES)
def test_an_unbuilt_model_with_a_bad_slot_fails_at_every_call(
    mode, mirrored_strategy):
  job = _Job(mode, mirrored_strategy)
  status = job.restore(_prefix("ckpt_bad_slot"))
  with pytest.raises(RestoreError, match=r"shape \(1, 5\)") as first:
    job.step()
  assert [(p.kind, p.found, p.expected) for p in first.value.problems] == [
      ("shape", (1, 5), (3, 1))]
  _assert_stays_failed(job, status, first.value)


@pytest.mark.parametrize("mode", MODES)
def test_get_slot_right_after_a_restore_returns_the_restored_slot(
    mode, mirrored_strategy):
  want = RECORD["get_slot_after_restore"]
  assert want["raised"] is None and want["equals_saved"]
  job = _Job(mode, mirrored_strategy, build=True)
  status = job.restore(_prefix("ckpt_good"))
  slot = job.opt.get_slot(job.model.head.w, "m")
  copies = getattr(getattr(slot, "value", slot), "values", None) or [slot]
  for copy in copies:
    np.testing.assert_array_equal(copy.numpy(), np.asarray(want["value"],
                                                           np.float32))
  assert job.opt.get_slot(job.model.head.w, "momentum") is slot
  status.assert_consumed()
  # The job trains on from the restored state, as one that did not ask.
  other = _Job(mode, mirrored_strategy, build=True)
  other.restore(_prefix("ckpt_good"))
  job.step()
  other.step()
  for a, b in zip(job.values(), other.values()):
    np.testing.assert_array_equal(a, b)
  assert int(job.opt.iterations.numpy()) == RECORD["saved_iterations"] + 1


def test_a_restore_that_failed_once_does_not_hide_in_a_second_restore(
    tmp_path):
  # The job retries with the same objects: the retry raises at once (the
  # model is built now), and the objects still refuse to train.
  job = _Job("eager", width=4)
  job.restore(_prefix("ckpt_good"))
  with pytest.raises(RestoreError):
    job.call()
  shutil.copytree(jobs.fixture_dir("ckpt_good"), str(tmp_path / "copy"))
  with pytest.raises(RestoreError, match="shape"):
    job.restore(tf.train.latest_checkpoint(str(tmp_path / "copy")))
  with pytest.raises(RestoreError):
    job.step()
  assert int(job.opt.iterations.numpy()) == 0


def _step_record():
  with open(os.path.join(jobs.fixture_dir(""),
                         "tf24_step_outcomes.json")) as f:
    return json.load(f)


def _first_call(job):
  """The model's first call (traced in a tf.function in "function" mode)."""
  return tf.function(job.call)() if job.mode == "function" else job.call()


def _mirrored_values(variable):
  """Every replica's copy of `variable` (they must agree), as one value."""
  copies = getattr(variable, "values", None) or [variable]
  values = [np.asarray(c.numpy()) for c in copies]
  for value in values[1:]:
    np.testing.assert_array_equal(value, values[0])
  return values[0]


@pytest.mark.parametrize("mode", MODES)
def test_a_failed_deferred_part_puts_back_what_the_rest_assigned(
    mode, mirrored_strategy):
  want = _step_record()["wrong_width"]
  # TF 2.4.4 assigned the plain variable at restore time and kept it.
  assert want["after_first_call"]["step"] == _step_record()["saved_step"]
  job = _Job(mode, mirrored_strategy, width=4)
  with job._scope():
    step = tf.Variable(0, dtype=tf.int64)
    checkpoint = tf.train.Checkpoint(model=job.model, optimizer=job.opt,
                                     step=step)
    status = checkpoint.restore(_prefix("ckpt_step"))
  # TF's part of the restore (the plain variable) is assigned at once.
  assert _mirrored_values(step) == _step_record()["saved_step"]
  with pytest.raises(RestoreError, match="shape") as first:
    _first_call(job)
  assert int(_mirrored_values(step)) == 0
  assert int(checkpoint.save_counter.numpy()) == 0
  _assert_stays_failed(job, status, first.value)
  assert int(_mirrored_values(step)) == 0


@pytest.mark.parametrize("mode", MODES)
def test_a_checkpoint_with_a_step_beside_the_model_restores_exactly(
    mode, mirrored_strategy):
  # The snapshot taken for a deferred restore changes nothing when the
  # deferred part succeeds.
  job = _Job(mode, mirrored_strategy)
  with job._scope():
    step = tf.Variable(0, dtype=tf.int64)
    status = tf.train.Checkpoint(model=job.model, optimizer=job.opt,
                                 step=step).restore(_prefix("ckpt_step"))
  _first_call(job)
  assert int(_mirrored_values(step)) == _step_record()["saved_step"]
  for variable in job.model.weights:
    np.testing.assert_array_equal(
        _mirrored_values(variable),
        jobs.saved_weight(RECORD, job.model, variable))
  assert int(job.opt.iterations.numpy()) == RECORD["saved_iterations"]
  assert float(job.opt.loss_scale.numpy()) == RECORD["saved_loss_scale"]
  status.assert_existing_objects_matched()
