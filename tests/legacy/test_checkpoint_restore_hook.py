"""Old jobs resume with their own `tf.train.Checkpoint` code after `install()`.

The fixtures (tests/fixtures/resume/) were written by
tools/gen_resume_fixtures.py under real TF 2.2.3, 2.3.4 and 2.4.4: each job
trained, saved a checkpoint its own way and trained on, recording every step.
Here the same job, written as it was (TF 2.3's experimental classes for the
TF 2.2/2.3 checkpoints, TF 2.4's for 2.4's, through `tf.keras` after
`install()`), restores with `Checkpoint.restore` or
`CheckpointManager.restore_or_initialize()` and continues: iterations, loss
scale, counter and skipped steps equal the recorded run's step for step;
weights within float16 rounding.
"""

import glob
import json
import os
import shutil

from absl.testing import parameterized
import keras
import numpy as np
import pytest
import tensorflow as tf

from tests import testing
import tf_mixed_precision_compat as mp
from tf_mixed_precision_compat import legacy
from tf_mixed_precision_compat.legacy import RestoreError

BATCH = 8
# TF 2.x slot names -> Keras 3's, for the two optimizers of the fixtures.
SLOT_NAMES = {"sgd": {"momentum": "momentum"},
              "adam": {"m": "momentum", "v": "velocity"}}
SINGLE = sorted(
    os.path.basename(p)[:-len(".json")]
    for p in glob.glob(testing.fixture_path("resume", "*.json"))
    if "mirrored" not in p)
MIRRORED = sorted(
    os.path.basename(p)[:-len(".json")]
    for p in glob.glob(testing.fixture_path("resume", "*mirrored*.json")))


@pytest.fixture(autouse=True)
def _installed():
  mp.install()
  yield
  mp.uninstall()


def _record(case):
  with open(testing.fixture_path("resume", case + ".json")) as f:
    return json.load(f)


def _data():
  """The fixture jobs' data (see tools/gen_resume_fixtures.py)."""
  rng = np.random.RandomState(11)
  x = rng.normal(size=(48, 4)).astype(np.float32)
  w = rng.normal(size=(4, 1)).astype(np.float32)
  y = 0.5 * (x @ w)
  y[3 * BATCH:4 * BATCH] *= 1e4  # This batch overflows at every scale.
  return x, y.astype(np.float32)


class Block(keras.layers.Layer):
  """Keras 3 twin of the fixture job's custom layer."""

  def __init__(self, width, **kwargs):
    super().__init__(**kwargs)
    self.first = keras.layers.Dense(width, activation="relu", name="first",
                                    dtype="mixed_float16")
    self.second = keras.layers.Dense(5, activation="relu", name="second",
                                     dtype="mixed_float16")

  def call(self, x):
    return self.second(self.first(x))


class Net(keras.Model):
  """Keras 3 twin of the fixture job's subclassed model."""

  def __init__(self, width=5):
    super().__init__(name="net")
    self.block = Block(width, name="block", dtype="mixed_float16")
    self.trunk = keras.Sequential(
        [keras.layers.Dense(4, activation="relu", name="trunk_dense",
                            dtype="mixed_float16")], name="trunk")
    self.heads = [keras.layers.Dense(3, name="head0", dtype="mixed_float16"),
                  keras.layers.Dense(1, name="head1", dtype="mixed_float16")]
    self.out = keras.layers.Activation("linear", dtype="float32", name="out")

  def call(self, x):
    x = self.trunk(self.block(x))
    for head in self.heads:
      x = head(x)
    return self.out(x)


def _model(record):
  if record["model"] == "subclassed":
    return Net()  # Not built: restored values wait for its first call.
  return legacy.model_from_json(record["model_json"])


def _optimizer(record):
  """The job's optimizer, written with the API of the TF that saved it."""
  k = tf.keras
  inner = (k.optimizers.SGD(0.05, momentum=0.9)
           if record["optimizer"] == "sgd" else k.optimizers.Adam(0.01))
  if record["tensorflow_version"].startswith("2.4"):
    return k.mixed_precision.LossScaleOptimizer(
        inner, initial_scale=record["initial_scale"],
        dynamic_growth_steps=record["growth_steps"])
  loss_scale = tf.mixed_precision.experimental.DynamicLossScale(
      initial_loss_scale=record["initial_scale"],
      increment_period=record["growth_steps"])
  return k.mixed_precision.experimental.LossScaleOptimizer(inner, loss_scale)


def _layers(model):
  return {layer.name: layer
          for layer in model._flatten_layers(include_self=False)}  # pylint: disable=protected-access


def _weight(model, key):
  layer_name, name = key.split("/")
  return getattr(_layers(model)[layer_name], name)


def _value(variable):
  values = getattr(getattr(variable, "value", variable), "values", None)
  if values:  # Mirrored: every replica's copy must hold the same value.
    copies = [np.asarray(c.numpy()) for c in values]
    for copy in copies[1:]:
      np.testing.assert_array_equal(copy, copies[0])
  return np.asarray(variable.numpy())


class _Job:
  """The resumed job: its objects, its checkpoint and its training step."""

  def __init__(self, record, directory, strategy=None, inside_scope=True):
    self.record = record
    self.strategy = strategy
    with strategy.scope() if strategy else _null():
      self.model = _model(record)
      self.opt = _optimizer(record)
      self.step_var = tf.Variable(0, dtype=tf.int64)
      self.epoch_var = tf.Variable(0, dtype=tf.int64)
    roots = {"model": self.model, "optimizer": self.opt}
    if record["roots"] == "model+optimizer+step+epoch":
      roots.update(step=self.step_var, epoch=self.epoch_var)
    elif record["roots"] == "optimizer+steps+epochs":
      roots = {"steps": self.step_var, "epochs": self.epoch_var,
               "optimizer": self.opt}
    elif record["roots"].startswith("trainer("):
      trainer = tf.Module()
      trainer.model, trainer.optimizer = self.model, self.opt
      trainer.epoch = self.epoch_var
      roots = {"trainer": trainer, "step": self.step_var}
    elif record["roots"].startswith("dicts("):
      roots = {"models": {"main": self.model}, "optimizers": [self.opt],
               "step": self.step_var}
    self.checkpoint = tf.train.Checkpoint(**roots)
    self.directory = directory
    self.inside_scope = inside_scope

  def restore(self, with_status=False):
    """The job's own resume code; returns the status if it kept one.

    A CheckpointManager job resumes with `restore_or_initialize()` (which
    returns the restored path, no status) unless `with_status`, when it
    restores `manager.latest_checkpoint` itself.
    """
    scope = (self.strategy.scope() if self.strategy and self.inside_scope
             else _null())
    with scope:
      if self.record["saver"] == "manager":
        manager = tf.train.CheckpointManager(self.checkpoint, self.directory,
                                             max_to_keep=1)
        self.manager = manager
        if not with_status:
          path = manager.restore_or_initialize()
          assert path == manager.latest_checkpoint
          return None
        return self.checkpoint.restore(manager.latest_checkpoint)
      return self.checkpoint.restore(tf.train.latest_checkpoint(
          self.directory))

  def step_fn(self, mode):
    model, opt = self.model, self.opt

    def replica_step(xb, yb):
      with tf.GradientTape() as tape:
        pred = model(xb, training=True)
        loss = tf.reduce_sum(tf.square(pred - yb)) / BATCH
        scaled = opt.get_scaled_loss(loss)
      grads = tape.gradient(scaled, model.trainable_variables)
      grads = opt.get_unscaled_gradients(grads)
      opt.apply_gradients(zip(grads, model.trainable_variables))
      return loss

    if self.strategy is None:
      return replica_step if mode == "eager" else tf.function(replica_step)
    strategy = self.strategy

    def step(xb, yb):
      per_replica = strategy.experimental_distribute_values_from_function(
          lambda ctx: (tf.split(xb, 2)[ctx.replica_id_in_sync_group],
                       tf.split(yb, 2)[ctx.replica_id_in_sync_group]))
      return strategy.run(replica_step, args=per_replica)

    return step if mode == "eager" else tf.function(step)

  def state(self):
    return (float(_value(self.opt.loss_scale)),
            int(_value(self.opt.dynamic_counter)))

  def run(self, step, first, last):
    x, y = _data()
    records = []
    for s in range(first + 1, last + 1):
      j = (s - 1) % (len(x) // BATCH)
      scale_before, _ = self.state()
      step(tf.constant(x[j * BATCH:(j + 1) * BATCH]),
           tf.constant(y[j * BATCH:(j + 1) * BATCH]))
      scale, counter = self.state()
      records.append({
          "step": s, "iterations": int(self.opt.iterations.numpy()),
          "skipped": scale < scale_before or (scale == 1. and counter == 0),
          "loss_scale": scale, "counter": counter})
    return records


class _null:  # pylint: disable=invalid-name

  def __enter__(self):
    return self

  def __exit__(self, *unused):
    return False


def _copy_fixture(record, tmp_path):
  source = testing.fixture_path("resume",
                                os.path.dirname(record["checkpoint"]))
  target = os.path.join(str(tmp_path), "ckpt")
  shutil.copytree(source, target)
  return target


def _check_saved_state(job, record, slots=True):
  """Every restored number equals what the old job saved, exactly."""
  saved = record["saved"]
  if "model" in record["roots"]:
    for key, value in saved["weights"].items():
      np.testing.assert_array_equal(_value(_weight(job.model, key)),
                                    np.asarray(value, np.float32),
                                    err_msg=key)
  if slots:
    for key, by_name in saved["slots"].items():
      for name, value in by_name.items():
        keras3_name = SLOT_NAMES[record["optimizer"]][name]
        np.testing.assert_array_equal(
            _value(job.opt.get_slot(_weight(job.model, key), keras3_name)),
            np.asarray(value, np.float32), err_msg=f"{key}/{name}")
  assert int(job.opt.iterations.numpy()) == saved["iterations"]
  assert job.state() == (saved["loss_scale"], saved["counter"])


def _expected_after(record):
  """The recorded continuation, as the emulated TF 2.3/2.4 API runs it.

  An optimizer-only checkpoint holds no slots: TF's own resume (recorded)
  starts them fresh, and so must ours. TF 2.2's experimental optimizer did
  not count skipped steps in `iterations`; TF 2.3 and 2.4, whose API the
  resumed job uses, count every step.
  """
  after = [dict(r) for r in record["resumed_after"]]
  if record["tensorflow_version"].startswith("2.2"):
    for i, r in enumerate(after):
      r["iterations"] = record["saved"]["iterations"] + i + 1
  return after


def _assert_trajectory(got, record):
  keys = ("step", "iterations", "skipped", "loss_scale", "counter")
  want = [{k: r[k] for k in keys} for r in _expected_after(record)]
  assert got == want


def _assert_weights(job, record, snapshot, tolerance):
  """Weights as the old job had them, within float16 rounding.

  TF 2.x and Keras 3 compute the float16 forward and backward passes with
  different kernels, so their gradients agree to float16 precision (2**-10
  relative); after one step the float32 weights differ by about that much
  of the step, and the difference compounds over the following steps.
  """
  if "model" not in record["roots"]:
    return
  for key, value in record[snapshot]["weights"].items():
    np.testing.assert_allclose(_value(_weight(job.model, key)),
                               np.asarray(value, np.float32), rtol=tolerance,
                               atol=tolerance, err_msg=key)


def _continue(job, record, step):
  """Runs the recorded continuation; checks weights after its first step."""
  first = record["step"]
  got = job.run(step, first, first + 1)
  _assert_weights(job, record, "first_step", 1e-4)
  got += job.run(step, first + 1, first + len(record["after"]))
  _assert_trajectory(got, record)
  _assert_weights(job, record, "final", 2e-2)


def _set_kept_weights(job, record):
  """An optimizer-only job kept its weights elsewhere (e.g. an H5 file)."""
  if "model" in record["roots"]:
    return
  for key, value in record["saved"]["weights"].items():
    _weight(job.model, key).assign(np.asarray(value, np.float32))


class ResumeTest(parameterized.TestCase):

  @parameterized.named_parameters(
      (f"_{case}_{mode}", case, mode) for case in SINGLE
      for mode in ("eager", "function"))
  def test_resume_continues_like_the_old_job(self, case, mode):
    record = _record(case)
    tmp = self.create_tempdir().full_path
    job = _Job(record, _copy_fixture(record, tmp))
    if record["model"] != "subclassed":
      _set_kept_weights(job, record)
    status = job.restore()
    if status is not None and "model" in record["roots"]:
      status.assert_existing_objects_matched()
    assert int(job.step_var.numpy()) == (
        0 if record["roots"] == "model+optimizer" else record["step"])
    _continue(job, record, job.step_fn(mode))
    if status is not None and "model" in record["roots"]:
      status.assert_consumed()
    if record["saver"] == "manager":
      # save_counter was restored too: the next save does not overwrite.
      # Slots landed when the optimizer built.
      assert job.manager.save().endswith("ckpt-2")

  # Not the optimizer-only jobs: their checkpoints hold no slots, so slots a
  # first step made keep their values, unlike in the recorded fresh resume.
  @parameterized.named_parameters((f"_{case}", case) for case in SINGLE
                                  if "optonly" not in case)
  def test_restore_after_the_first_step_overwrites_it_exactly(self, case):
    record = _record(case)
    tmp = self.create_tempdir().full_path
    job = _Job(record, _copy_fixture(record, tmp))
    step = job.step_fn("function")
    job.run(step, 40, 41)  # Creates the slots and moves every value.
    status = job.restore(with_status=True)
    status.initialize_or_restore()  # Eagerly: values are already there.
    status.assert_consumed()
    _check_saved_state(job, record)
    _continue(job, record, step)

  @parameterized.named_parameters((f"_{case}", case) for case in SINGLE)
  def test_values_land_exactly_when_the_variables_are_created(self, case):
    record = _record(case)
    tmp = self.create_tempdir().full_path
    job = _Job(record, _copy_fixture(record, tmp))
    if record["model"] != "subclassed":
      _set_kept_weights(job, record)
    status = job.restore(with_status=True)
    with self.assertRaisesRegex(AssertionError, "waiting for"):
      status.assert_consumed()  # As TF 2.x: slots wait for their variables.
    if record["model"] == "subclassed":
      job.model(tf.zeros((1, 4)))
    if "model" in record["roots"]:
      job.opt.build(job.model.trainable_variables)
      _check_saved_state(job, record)
      status.assert_consumed()
    else:
      assert int(job.opt.iterations.numpy()) == record["saved"]["iterations"]
      assert job.state() == (record["saved"]["loss_scale"],
                             record["saved"]["counter"])


@pytest.mark.parametrize("case", MIRRORED)
@pytest.mark.parametrize("mode", ["eager", "function"])
@pytest.mark.parametrize("inside_scope", [True, False])
def test_mirrored_resume_continues_like_the_old_job(case, mode, inside_scope,
                                                    mirrored_strategy,
                                                    tmp_path):
  record = _record(case)
  job = _Job(record, _copy_fixture(record, tmp_path), mirrored_strategy,
             inside_scope)
  status = job.restore(with_status=mode == "function")
  _continue(job, record, job.step_fn(mode))
  if status is not None:
    status.assert_consumed()


@pytest.mark.parametrize("mode", ["eager", "function"])
def test_unbuilt_model_first_called_in_a_replica_context(mode,
                                                         mirrored_strategy,
                                                         tmp_path):
  # The subclassed model is built by its first call inside `strategy.run`:
  # its weights land there (each replica's copy), the slots at the first
  # update. A single-device job's checkpoint, continued on 2 replicas.
  record = _record("tf24_nested_adam_save")
  job = _Job(record, _copy_fixture(record, tmp_path), mirrored_strategy)
  status = job.restore(with_status=True)
  assert not job.model.built
  _continue(job, record, job.step_fn(mode))
  status.assert_consumed()


@pytest.mark.parametrize("case", ["tf24_trainer_adam_save",
                                  "tf23_dicts_sgd_manager"])
@pytest.mark.parametrize("inside_scope", [True, False])
def test_nested_layouts_resume_on_two_replicas(case, inside_scope,
                                               mirrored_strategy, tmp_path):
  # Keras objects below a trainer module or in a dict/list, restored inside
  # and outside the strategy's scope, continue like the old single-device
  # job (the loss is a global-batch mean, so the replicas' sum equals it).
  record = _record(case)
  job = _Job(record, _copy_fixture(record, tmp_path), mirrored_strategy,
             inside_scope)
  status = job.restore(with_status=True)
  _continue(job, record, job.step_fn("function"))
  status.assert_consumed()
  assert int(job.step_var.numpy()) == record["step"]


def test_legacy_restore_checkpoint_without_a_model_entry(tmp_path):
  record = _record("tf24_optonly_sgd_save")
  job = _Job(record, _copy_fixture(record, tmp_path))
  prefix = tf.train.latest_checkpoint(job.directory)
  with pytest.raises(RestoreError, match="steps"):
    mp.legacy.restore_checkpoint(prefix, None, job.opt)
  report = mp.legacy.restore_checkpoint(prefix, None, job.opt,
                                        allow_partial=True)
  assert report.iterations == record["saved"]["iterations"]
  assert (report.loss_scale, report.counter) == (
      record["saved"]["loss_scale"], record["saved"]["counter"])
  assert job.state() == (record["saved"]["loss_scale"],
                         record["saved"]["counter"])
  assert any("steps" in key for key in report.unmatched_checkpoint)
  with pytest.raises(TypeError, match="model"):
    mp.legacy.restore_checkpoint(prefix, None, None)


# ---------------------------------------------------------------------------
# Never silent.


def _fresh(case, tmp_path):
  record = _record(case)
  return record, _Job(record, _copy_fixture(record, tmp_path))


def _all_values(job):
  values = [np.asarray(v.numpy()).copy() for v in job.model.weights]
  values += [np.asarray(v.numpy()).copy()
             for v in job.opt.inner_optimizer.variables]
  values += [job.state(), int(job.step_var.numpy())]
  return values


def _assert_same(before, after):
  assert len(before) == len(after)
  for a, b in zip(before, after):
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_a_different_architecture_raises_and_changes_nothing(tmp_path):
  record, job = _fresh("tf23_seq_adam_manager", tmp_path)
  job.model = keras.Sequential([keras.Input((4,)),
                                keras.layers.Dense(7, name="hidden"),
                                keras.layers.Dense(1, name="logits")])
  job.checkpoint = tf.train.Checkpoint(model=job.model, optimizer=job.opt,
                                       step=job.step_var, epoch=job.epoch_var)
  job.opt.build(job.model.trainable_variables)
  before = _all_values(job)
  with pytest.raises(RestoreError, match="shape"):
    job.restore()
  _assert_same(before, _all_values(job))
  del record


def test_no_weight_matching_never_restores_the_scale_alone(tmp_path):
  _, job = _fresh("tf24_func_sgd_save", tmp_path)
  job.model = keras.Sequential([keras.Input((4,)),
                                keras.layers.Dense(1, name="other")])
  job.checkpoint = tf.train.Checkpoint(model=job.model, optimizer=job.opt)
  before = _all_values(job)
  with pytest.raises(RestoreError, match="none of model"):
    job.restore()
  _assert_same(before, _all_values(job))


def test_an_unbuilt_model_that_does_not_match_fails_at_its_first_call(
    tmp_path):
  _, job = _fresh("tf24_nested_adam_save", tmp_path)
  job.model = Net(width=6)
  job.checkpoint = tf.train.Checkpoint(model=job.model, optimizer=job.opt)
  job.restore()
  with pytest.raises(RestoreError, match="shape"):
    job.model(tf.zeros((1, 4)))
  assert int(job.opt.iterations.numpy()) == 0


def test_unmatched_entries_are_named_at_restore_time(tmp_path, tf_log):
  _, job = _fresh("tf23_seq_adam_manager", tmp_path)
  # The job no longer tracks its optimizer: those values stay behind.
  job.checkpoint = tf.train.Checkpoint(model=job.model, step=job.step_var,
                                       epoch=job.epoch_var)
  status = job.checkpoint.restore(tf.train.latest_checkpoint(job.directory))
  status.expect_partial()  # Silences TF at exit, not us at restore time.
  logged = "\n".join(tf_log)
  assert "optimizer/iter/.ATTRIBUTES/VARIABLE_VALUE" in logged
  assert "loss_scale/current_loss_scale" in logged
  with pytest.raises(AssertionError, match="optimizer/iter"):
    status.assert_consumed()
  status.assert_existing_objects_matched()  # Every weight was restored.
  assert int(job.step_var.numpy()) == 7


@pytest.mark.parametrize("version", ["tf22", "tf23", "tf24"])
def test_keras_objects_nested_in_a_trainer_module(version, tmp_path, tf_log):
  # The job's trainer module holds the model and optimizer (and the epoch);
  # its newer code no longer tracks the epoch on the trainer.
  record, job = _fresh(f"{version}_trainer_adam_save", tmp_path)
  trainer = tf.Module()
  trainer.model, trainer.optimizer = job.model, job.opt
  job.checkpoint = tf.train.Checkpoint(trainer=trainer, step=job.step_var)
  status = job.restore(with_status=True)
  assert "trainer/epoch/.ATTRIBUTES/VARIABLE_VALUE" in "\n".join(tf_log)
  job.opt.build(job.model.trainable_variables)
  _check_saved_state(job, record)
  assert int(job.step_var.numpy()) == record["step"]
  with pytest.raises(AssertionError, match="trainer/epoch"):
    status.assert_consumed()
  status.assert_existing_objects_matched()
  # The whole job state restores; nothing is left unconsumed.
  record, job = _fresh(f"{version}_trainer_adam_save", tmp_path / "again")
  status = job.restore(with_status=True)
  job.opt.build(job.model.trainable_variables)
  status.assert_consumed()
  assert int(job.epoch_var.numpy()) == record["epoch"]


def test_keras_objects_reached_twice_are_restored_once(tmp_path, tf_log):
  # The job's trainer holds the model and optimizer that the checkpoint also
  # tracks at its root ("a_trainer" sorts before them).
  record, job = _fresh("tf24_trainer_adam_save", tmp_path)
  trainer = tf.Module()
  trainer.model, trainer.optimizer = job.model, job.opt
  trainer.epoch = job.epoch_var
  job.checkpoint = tf.train.Checkpoint(a_trainer=trainer, trainer=trainer,
                                       model=job.model, optimizer=job.opt,
                                       step=job.step_var)
  status = job.restore(with_status=True)
  job.opt.build(job.model.trainable_variables)
  _check_saved_state(job, record)
  assert int(job.epoch_var.numpy()) == record["epoch"]
  status.assert_existing_objects_matched()
  assert "could not be found" not in "\n".join(tf_log)


def test_a_model_with_an_extra_layer_is_reported_not_silent(tmp_path,
                                                            tf_log):
  record, job = _fresh("tf24_func_sgd_save", tmp_path)
  config = json.loads(record["model_json"])
  job.model = legacy.model_from_json(json.dumps(config))
  extra = keras.layers.Dense(2, name="extra")
  extra.build((None, 1))
  job.model.extra = extra
  job.checkpoint = tf.train.Checkpoint(model=job.model, optimizer=job.opt)
  status = job.restore()
  assert "extra" in "\n".join(tf_log)
  with pytest.raises(AssertionError, match="extra"):
    status.assert_existing_objects_matched()


def test_keras3_checkpoints_still_restore_through_tf(tmp_path):
  model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
  opt = mp.LossScaleOptimizer(keras.optimizers.SGD(0.1))
  opt.build(model.trainable_variables)
  path = tf.train.Checkpoint(model=model, optimizer=opt).save(
      str(tmp_path / "k3"))
  saved = [v.numpy().copy() for v in model.weights]
  for v in model.weights:
    v.assign(tf.zeros_like(v))
  status = tf.train.Checkpoint(model=model, optimizer=opt).restore(path)
  assert type(status).__module__.startswith("tensorflow.")
  for v, value in zip(model.weights, saved):
    np.testing.assert_array_equal(v.numpy(), value)


def test_uninstall_puts_back_tfs_methods():
  mp.uninstall()
  original_read = tf.train.Checkpoint.read
  original_v1 = tf.compat.v1.train.Checkpoint.restore
  mp.install()
  assert tf.train.Checkpoint.read is not original_read
  mp.uninstall()
  assert tf.train.Checkpoint.read is original_read
  assert tf.compat.v1.train.Checkpoint.restore is original_v1
  mp.install()


def test_v1_checkpoint_class_restores_too(tmp_path):
  record, job = _fresh("tf23_func_sgd_save", tmp_path)
  checkpoint = tf.compat.v1.train.Checkpoint(model=job.model,
                                             optimizer=job.opt)
  checkpoint.restore(tf.train.latest_checkpoint(job.directory))
  job.opt.build(job.model.trainable_variables)
  _check_saved_state(job, record)
