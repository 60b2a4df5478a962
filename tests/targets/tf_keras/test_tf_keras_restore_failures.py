"""Restores on the tf_keras target: TF 2.21's checkpoints, failures, slots.

The TF 2.4.4 job of tools/gen_restore_failure_fixtures.py runs unchanged on
this target (`tf.keras` is tf_keras). Its checkpoints
(tests/fixtures/restore_failures/) and TF 2.4.4's recorded outcomes are the
reference:

* a checkpoint TF 2.21 itself wrote (custom layers with `add_weight`,
  nested layers, a subclassed model; tf_keras's current Adam and its
  OptimizerV2 Adam in the loss-scale optimizer) resumes exactly;
* a deferred restore into a model of another width (or with a corrupted
  kernel) raises at every call,
  what the same restore had assigned at once (the optimizer's step, the
  loss scale's counter, a step `tf.Variable`, the save counter; TF 2.4.4
  kept the checkpoint's) is put back, and the status' assertions raise; the
  same checkpoint restored into a model of the right width is exact;
* a slot of the wrong shape raises at restore time with nothing assigned,
  also when the optimizer has no slots yet, and nothing of that restore
  lands later;
* `get_slot(var, "m")` right after a restore returns the restored slot.

Eagerly, in `tf.function` and on 2 replicas.
"""

import json
import os
import re
import tempfile

import numpy as np
import pytest
import tensorflow as tf

from tests.legacy import restore_jobs

_FIXTURES = os.path.join(os.path.dirname(__file__), "..", "..", "fixtures",
                         "restore_failures")
X = np.ones((2, 4), np.float32)
MODES = ["eager", "function", "mirrored"]


pytestmark = pytest.mark.usefixtures("installed")


def _record():
  with open(os.path.join(_FIXTURES, "tf24_outcomes.json")) as f:
    return json.load(f)


def _prefix(name):
  return tf.train.latest_checkpoint(os.path.join(_FIXTURES, name))


# The fixture job's model, as its TF 2.4 code wrote it.
Lin, Block, Net = restore_jobs.model_classes(
    tf.keras.layers.Layer, tf.keras.Model, tf.matmul, tf.nn.relu)


def _optimizer(kind):
  inner = (tf.keras.optimizers.legacy.Adam(0.01) if kind == "v2" else
           tf.keras.optimizers.Adam(0.01))
  return tf.keras.mixed_precision.LossScaleOptimizer(
      inner, initial_scale=2.0**10, dynamic_growth_steps=2000)


def _variables(opt):
  found = opt.variables
  return found() if callable(found) else found


class _Job:
  """The fixture job's objects and step, optionally on 2 replicas."""

  def __init__(self, mode, strategy, kind="v2", width=3, build=False,
               net=None):
    self.strategy = strategy if mode == "mirrored" else None
    with self._scope():
      self.model, self.opt = (net or Net)(width), _optimizer(kind)
      if build:
        self.model(X)

    def replica_step():
      with tf.GradientTape() as tape:
        loss = tf.reduce_sum(self.model(X))
        scaled = self.opt.get_scaled_loss(loss)
      grads = self.opt.get_unscaled_gradients(
          tape.gradient(scaled, self.model.trainable_variables))
      self.opt.apply_gradients(zip(grads, self.model.trainable_variables))

    step = replica_step
    if self.strategy is not None:
      step = lambda: self.strategy.run(replica_step)
    # Each use traces anew (TF never runs again a tf.function whose first
    # trace created variables and then raised).
    self.step = step if mode == "eager" else lambda: tf.function(step)()

  def _scope(self):
    return self.strategy.scope() if self.strategy else _Null()

  def restore(self, prefix):
    with self._scope():
      return tf.train.Checkpoint(model=self.model,
                                 optimizer=self.opt).restore(prefix)

  def state(self):
    """Every value of the job, by name (replicas' copies must agree)."""
    values = {}
    for v in self.model.weights + _variables(self.opt):
      copies = getattr(v, "values", None) or [v]
      for copy in copies[1:]:
        np.testing.assert_array_equal(copy.numpy(), copies[0].numpy())
      values[_name(v)] = np.asarray(v.numpy())
    values["loss_scale"] = float(self.opt.loss_scale.numpy())
    return values


def _name(variable):
  """A variable's name without the scopes its creation happened to run in.

  An optimizer's variables are named after the scope of their first step
  (`Adam/...`, `cond_1/...` in a loss-scale optimizer's tf.function step)
  or of the restore that created them.
  """
  name = re.sub(r"(^|/)cond(_\d+)?/", r"\1", variable.name)
  name = re.sub(r"^Adam/", "", name)
  return name.split(":")[0]


class _Null:

  def __enter__(self):
    return self

  def __exit__(self, *unused):
    return False


def _assert_same(got, want):
  assert sorted(got) == sorted(want)
  for name in want:
    np.testing.assert_array_equal(got[name], want[name], err_msg=name)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("kind", ["v2", "current"])
def test_a_tf221_checkpoint_resumes_exactly(mode, kind, mirrored_strategy):
  job = _Job(mode, mirrored_strategy, kind, build=True)
  job.step()
  job.step()
  path = tf.train.Checkpoint(model=job.model, optimizer=job.opt).save(
      os.path.join(tempfile.mkdtemp(), "ckpt"))
  resumed = _Job(mode, mirrored_strategy, kind, build=True)
  status = resumed.restore(path)
  job.step()
  resumed.step()
  status.assert_consumed()
  _assert_same(resumed.state(), job.state())


@pytest.mark.parametrize("mode", MODES)
def test_a_model_of_another_width_fails_at_every_call(mode,
                                                      mirrored_strategy):
  want = _record()["wrong_width"]
  job = _Job(mode, mirrored_strategy, width=4)
  status = job.restore(_prefix("ckpt_good"))
  for outcome in ("first_call", "second_call", "train_step"):
    assert want[outcome]["raised"] == "ValueError"
    with pytest.raises(ValueError, match="shape"):
      job.step()
  assert want["assert_consumed"]["raised"] == "AssertionError"
  _assert_failed_and_put_back(job, status, _Job(mode, mirrored_strategy))


def _step_record():
  with open(os.path.join(_FIXTURES, "tf24_step_outcomes.json")) as f:
    return json.load(f)


def _one(variable):
  """A variable's value (every replica's copy must agree)."""
  copies = getattr(variable, "values", None) or [variable]
  for copy in copies[1:]:
    np.testing.assert_array_equal(copy.numpy(), copies[0].numpy())
  return copies[0].numpy()


def _optimizer_values(opt):
  return {"iterations": int(_one(opt.iterations)),
          "loss_scale": float(_one(opt.loss_scale)),
          "counter": int(_one(opt.dynamic_counter))}


def _assert_failed_and_put_back(job, status, fresh, error="shape"):
  """The status raises; the optimizer holds what a fresh one holds."""
  for check in (status.assert_consumed,
                status.assert_existing_objects_matched,
                status.assert_nontrivial_match):
    with pytest.raises(AssertionError, match="failed, nothing of it"):
      check()
  assert _optimizer_values(job.opt) == _optimizer_values(fresh.opt)
  with pytest.raises(ValueError, match=error):
    job.step()  # Still failing: the model's values still wait.
  assert _optimizer_values(job.opt) == _optimizer_values(fresh.opt)


def _restore_with_step(job, prefix):
  with job._scope():
    step = tf.Variable(0, dtype=tf.int64)
    checkpoint = tf.train.Checkpoint(model=job.model, optimizer=job.opt,
                                     step=step)
    return step, checkpoint, checkpoint.restore(prefix)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("kind", ["v2", "current"])
def test_a_failed_deferred_restore_puts_back_what_it_assigned_at_once(
    mode, kind, mirrored_strategy):
  want = _step_record()["wrong_width"]
  job = _Job(mode, mirrored_strategy, kind, width=4)
  step, checkpoint, status = _restore_with_step(job, _prefix("ckpt_step"))
  # As in TF 2.4.4, the step, the optimizer's step and the loss scale are
  # assigned at once; TF 2.4.4 kept them when the model's part failed.
  got = dict(_optimizer_values(job.opt), step=int(_one(step)))
  assert got == want["after_restore"]
  assert want["after_first_call"] == want["after_restore"]
  assert want["first_call"]["raised"] == "ValueError"
  with pytest.raises(ValueError, match="shape"):
    job.step()
  assert int(_one(step)) == 0
  assert int(checkpoint.save_counter.numpy()) == 0
  _assert_failed_and_put_back(job, status,
                              _Job(mode, mirrored_strategy, kind))
  assert int(_one(step)) == 0


def _rewritten(prefix, out_dir, key, value):
  """A copy of checkpoint `prefix` whose tensor `key` holds `value`."""
  reader = tf.train.load_checkpoint(prefix)
  names = sorted(reader.get_variable_to_shape_map())
  out = os.path.join(out_dir, "ckpt-1")
  tf.raw_ops.SaveV2(prefix=out, tensor_names=names,
                    shape_and_slices=[""] * len(names),
                    tensors=[tf.constant(value if n == key else
                                         reader.get_tensor(n))
                             for n in names])
  return out


@pytest.mark.parametrize("mode", MODES)
def test_a_corrupted_kernel_puts_back_what_was_assigned_at_once(
    mode, mirrored_strategy, tmp_path):
  prefix = _rewritten(_prefix("ckpt_step"), str(tmp_path),
                      "model/head/w/.ATTRIBUTES/VARIABLE_VALUE",
                      np.zeros((3, 1), np.float64))
  job = _Job(mode, mirrored_strategy)
  step, checkpoint, status = _restore_with_step(job, prefix)
  assert int(_one(step)) == _step_record()["saved_step"]
  with pytest.raises(ValueError, match="float64"):
    job.step()
  assert int(_one(step)) == 0
  assert int(checkpoint.save_counter.numpy()) == 0
  _assert_failed_and_put_back(job, status, _Job(mode, mirrored_strategy),
                              error="float64")


class LazyBlock(tf.keras.layers.Layer):
  """Makes its `Lin` in `build`: the restore hands it its values then."""

  def __init__(self, width, **kwargs):
    super().__init__(**kwargs)
    self.width = width

  def build(self, input_shape):
    self.lin = Lin(self.width, name="lin")

  def call(self, x):
    return tf.nn.relu(self.lin(x))


class RawLin(tf.keras.layers.Layer):
  """Holds a plain `tf.Variable`: the restore assigns it when tracked."""

  def __init__(self, units, **kwargs):
    super().__init__(**kwargs)
    self.units = units

  def build(self, input_shape):
    self.w = tf.Variable(tf.ones((input_shape[-1], self.units)))

  def call(self, x):
    return tf.matmul(x, self.w)


class LazyNet(tf.keras.Model):

  def __init__(self, width):
    super().__init__()
    self.block = LazyBlock(width)
    self.head = Lin(1)

  def call(self, x):
    return self.head(self.block(x))


class RawNet(tf.keras.Model):

  def __init__(self, width):
    super().__init__()
    self.head = RawLin(width)

  def call(self, x):
    return tf.reduce_sum(self.head(x), axis=-1, keepdims=True)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("net", [LazyNet, RawNet])
def test_values_handed_over_in_build_that_fail_put_back_too(
    mode, net, mirrored_strategy, tmp_path):
  # A checkpoint of the job at width 3, written here (the layout of these
  # layers is TF's own on both versions).
  saved = _Job("eager", None, width=3, build=True, net=net)
  saved.step()
  path = tf.train.Checkpoint(
      model=saved.model, optimizer=saved.opt,
      step=tf.Variable(7, dtype=tf.int64)).save(str(tmp_path / "ckpt"))
  job = _Job(mode, mirrored_strategy, width=4, net=net)
  step, checkpoint, status = _restore_with_step(job, path)
  assert int(_one(step)) == 7
  assert _optimizer_values(job.opt)["iterations"] == 1
  with pytest.raises(ValueError, match="shape"):
    job.step()
  assert int(_one(step)) == 0
  assert int(checkpoint.save_counter.numpy()) == 0
  _assert_failed_and_put_back(job, status,
                              _Job(mode, mirrored_strategy, net=net))


def test_a_failed_deferred_v1_checkpoint_restore_puts_back_too(
    mirrored_strategy):
  job = _Job("eager", mirrored_strategy, width=4)
  step = tf.Variable(0, dtype=tf.int64)
  status = tf.compat.v1.train.Checkpoint(
      model=job.model, optimizer=job.opt, step=step).restore(
          _prefix("ckpt_step"))
  assert int(step.numpy()) == _step_record()["saved_step"]
  with pytest.raises(ValueError, match="shape"):
    job.step()
  assert int(step.numpy()) == 0
  _assert_failed_and_put_back(job, status, _Job("eager", mirrored_strategy))


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("kind", ["v2", "current"])
def test_a_deferred_restore_that_fits_is_exact(mode, kind, mirrored_strategy):
  record = _record()
  job = _Job(mode, mirrored_strategy, kind)
  step, _, status = _restore_with_step(job, _prefix("ckpt_step"))
  with job._scope():
    job.model(X)  # The deferred part: the weights land at the build.
  assert int(_one(step)) == _step_record()["saved_step"]
  assert _optimizer_values(job.opt)["iterations"] == record["saved_iterations"]
  for layer, prefix in ((job.model.head, "net/head/"),
                        (job.model.block.lin, "net/block/lin/")):
    for attr in ("w", "b"):
      np.testing.assert_array_equal(
          _one(getattr(layer, attr)),
          np.asarray(record["saved_weights"][f"{prefix}{attr}:0"],
                     np.float32))
  status.assert_existing_objects_matched()
  status.assert_nontrivial_match()


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("kind", ["v2", "current"])
@pytest.mark.parametrize("slots_first", [False, True])
def test_a_slot_of_the_wrong_shape_raises_at_restore(mode, kind, slots_first,
                                                     mirrored_strategy):
  record = _record()
  want = record["bad_slot_slots_exist" if slots_first else
                "bad_slot_fresh_optimizer"]
  job = _Job(mode, mirrored_strategy, kind, build=True)
  if slots_first:
    job.step()
  iterations = int(job.opt.iterations.numpy())
  before = job.state()
  assert want["restore"]["raised"] == "ValueError"
  with pytest.raises(ValueError,
                     match=r"shape \(1, 5\), the variable \(3, 1\)"):
    job.restore(_prefix("ckpt_bad_slot"))
  assert not want["weights_changed_at_restore"]
  assert not want["iterations_changed_at_restore"]
  # Nothing was assigned, and nothing of the failed restore lands later
  # (the step counter is made at its first use).
  assert int(job.opt.iterations.numpy()) == iterations
  _assert_same(job.state(), before)
  assert want["train_step"]["raised"] is None  # TF 2.4.4 went on, as here.
  job.step()
  assert int(job.opt.iterations.numpy()) == iterations + 1


@pytest.mark.parametrize("mode", MODES)
def test_get_slot_right_after_a_restore_returns_the_restored_slot(
    mode, mirrored_strategy):
  want = _record()["get_slot_after_restore"]
  assert want["raised"] is None and want["equals_saved"]
  job = _Job(mode, mirrored_strategy, build=True)
  job.restore(_prefix("ckpt_good"))
  slot = job.opt.get_slot(job.model.head.w, "m")
  for copy in getattr(slot, "values", None) or [slot]:
    np.testing.assert_array_equal(copy.numpy(),
                                  np.asarray(want["value"], np.float32))
  job.step()
  assert int(job.opt.iterations.numpy()) == _record()["saved_iterations"] + 1
