"""MixedPrecisionLossScaleOptimizer against a TF 2.3.4 recording.

tests/fixtures/v1_optimizer/ was recorded by real TF 2.3.4
(tools/gen_tf23_v1_fixtures.py): a Momentum optimizer wrapped with a
DynamicLossScale, trained in a tf.compat.v1 Session on scripted gradients
(two steps overflow), plus the Saver checkpoint written at the end. The same
run is replayed here in a Session, eagerly, in a tf.function and under a
2-replica MirroredStrategy (eager, tf.function and graph mode), and must match
step by step, bit for bit.
"""

import json
import math
import os
import subprocess
import sys
import textwrap

from absl.testing import parameterized
import numpy as np
import pytest
import tensorflow as tf

import tf_mixed_precision_compat as mp
from tf_mixed_precision_compat import endpoints
from tf_mixed_precision_compat.optimizers.compat_v1_optimizer import (
    MixedPrecisionLossScaleOptimizer)
from tests import testing

with open(testing.fixture_path("v1_optimizer", "run.json")) as f:
  RUN = json.load(f)
SPEC = RUN["spec"]
TF23_SAVER_PREFIX = testing.fixture_path("v1_optimizer", "tf23_saver",
                                         "model.ckpt")
STATE_KEYS = ("loss_scale", "good_steps", "global_step", "w", "b",
              "w_momentum", "b_momentum")
TF_LOSS_SCALE = tf.compat.v1.mixed_precision.DynamicLossScale
REPO = testing.REPO_ROOT


def _num(x):
  return float(x) if isinstance(x, str) else x


STEPS = [([_num(v) for v in gw], _num(gb)) for gw, gb in SPEC["steps"]]


def _loss_scale(cls=mp.DynamicLossScale):
  return cls(**SPEC["loss_scale"])


def _optimizer(loss_scale):
  return MixedPrecisionLossScaleOptimizer(
      tf.compat.v1.train.MomentumOptimizer(SPEC["learning_rate"],
                                           SPEC["momentum"]), loss_scale)


def _as_list(value):
  return np.asarray(value).tolist()


def _state_tensors(opt, w, b, global_step):
  return {
      "loss_scale": opt._loss_scale(),
      "good_steps": opt._loss_scale._num_good_steps,
      "global_step": global_step,
      "w": w,
      "b": b,
      "w_momentum": opt.get_slot(w, "momentum"),
      "b_momentum": opt.get_slot(b, "momentum"),
  }


class GraphModel:
  """The recorded graph, built with our optimizer in the default graph."""

  def __init__(self, loss_scale_cls=mp.DynamicLossScale):
    self.gw = tf.compat.v1.placeholder(tf.float32, [2], name="gw")
    self.gb = tf.compat.v1.placeholder(tf.float32, [], name="gb")
    self.w = tf.compat.v1.get_variable(
        "w", initializer=tf.constant(SPEC["w_init"]), use_resource=True)
    self.b = tf.compat.v1.get_variable(
        "b", initializer=tf.constant(SPEC["b_init"]), use_resource=True)
    self.global_step = tf.compat.v1.train.get_or_create_global_step()
    loss = tf.reduce_sum(self.w * self.gw) + self.b * self.gb
    self.opt = _optimizer(_loss_scale(loss_scale_cls))
    self.train_op = self.opt.minimize(loss, global_step=self.global_step)
    self.state = _state_tensors(self.opt, self.w, self.b, self.global_step)

  def feed(self, step):
    return {self.gw: step[0], self.gb: step[1]}

  def read(self, sess):
    return {k: _as_list(v) for k, v in sess.run(self.state).items()}


def replay_graph(loss_scale_cls=mp.DynamicLossScale):
  with tf.Graph().as_default(), tf.compat.v1.Session() as sess:
    model = GraphModel(loss_scale_cls)
    sess.run(tf.compat.v1.global_variables_initializer())
    record = []
    for step in STEPS:
      sess.run(model.train_op, model.feed(step))
      record.append(model.read(sess))
  return record


def _make_vars():
  w = tf.Variable(SPEC["w_init"], name="w")
  b = tf.Variable(SPEC["b_init"], name="b")
  # Not get_or_create_global_step: eagerly that is one process-wide variable.
  global_step = tf.Variable(0, dtype=tf.int64, name="global_step")
  return w, b, global_step


def replay_eager(use_function, loss_scale_cls=mp.DynamicLossScale):
  w, b, global_step = _make_vars()
  opt = _optimizer(_loss_scale(loss_scale_cls))

  def train(gw, gb):
    loss = lambda: tf.reduce_sum(w * gw) + b * gb
    opt.minimize(loss, global_step=global_step, var_list=[w, b])

  if use_function:
    train = tf.function(train)
  record = []
  for gw, gb in STEPS:
    train(tf.constant(gw), tf.constant(gb))
    state = _state_tensors(opt, w, b, global_step)
    record.append({k: _as_list(v) for k, v in state.items()})
  return record


def _replica_feed(step, replica):
  """Replica 0 gets the recorded gradients, replica 1 zeros: their sum is the
  recording and a non-finite value is seen by one replica only."""
  gw, gb = step
  if replica == 0:
    return gw, gb
  return [0.0, 0.0], 0.0


def replay_mirrored(strategy, use_function):
  with strategy.scope():
    w, b, global_step = _make_vars()
    opt = _optimizer(_loss_scale())

  def replica_step(gw, gb):
    loss = lambda: tf.reduce_sum(w * gw) + b * gb
    grads_and_vars = opt.compute_gradients(loss, var_list=[w, b])
    return opt.apply_gradients(grads_and_vars, global_step=global_step)

  def train(gw, gb):
    # A tf.function may not return the (graph) op, so nothing is returned.
    strategy.run(replica_step, args=(gw, gb))

  if use_function:
    train = tf.function(train)
  record = []
  for step in STEPS:
    values = [_replica_feed(step, r) for r in range(2)]
    gw = testing.per_replica(strategy, [np.float32(v[0]) for v in values])
    gb = testing.per_replica(strategy, [np.float32(v[1]) for v in values])
    train(gw, gb)
    state = _state_tensors(opt, w, b, global_step)
    record.append({k: _as_list(v) for k, v in state.items()})
  return record


def replay_mirrored_graph():
  with tf.Graph().as_default(), tf.compat.v1.Session() as sess:
    strategy = tf.compat.v1.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    feeds = [(tf.compat.v1.placeholder(tf.float32, [2]),
              tf.compat.v1.placeholder(tf.float32, [])) for _ in range(2)]
    with strategy.scope():
      w = tf.compat.v1.get_variable(
          "w", initializer=tf.constant(SPEC["w_init"]), use_resource=True)
      b = tf.compat.v1.get_variable(
          "b", initializer=tf.constant(SPEC["b_init"]), use_resource=True)
      global_step = tf.compat.v1.train.get_or_create_global_step()
      opt = _optimizer(_loss_scale())

      def replica_step():
        replica = tf.distribute.get_replica_context().replica_id_in_sync_group
        gw = tf.where(tf.equal(replica, 0), feeds[0][0], feeds[1][0])
        gb = tf.where(tf.equal(replica, 0), feeds[0][1], feeds[1][1])
        loss = tf.reduce_sum(w * gw) + b * gb
        return opt.minimize(loss, global_step=global_step)

      train_op = strategy.group(
          strategy.extended.call_for_each_replica(replica_step))
    state = _state_tensors(opt, w, b, global_step)
    sess.run(tf.compat.v1.global_variables_initializer())
    record = []
    for step in STEPS:
      feed = {}
      for r, (gw_ph, gb_ph) in enumerate(feeds):
        feed[gw_ph], feed[gb_ph] = _replica_feed(step, r)
      sess.run(train_op, feed)
      record.append({k: _as_list(v) for k, v in sess.run(state).items()})
  return record


def run_json_subprocess(test, script):
  """Runs `script` in a fresh interpreter; returns the JSON it prints last."""
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=REPO)
  proc = subprocess.run([sys.executable, "-c", script], cwd=REPO, env=env,
                        capture_output=True, text=True, timeout=900,
                        check=False)
  test.assertEqual(proc.returncode, 0, proc.stderr[-3000:])
  return json.loads(proc.stdout.strip().splitlines()[-1])


def assert_matches_recording(record):
  assert len(record) == len(RUN["per_step"])
  for i, (got, want) in enumerate(zip(record, RUN["per_step"])):
    for key in STATE_KEYS:
      assert got[key] == want[key], (i, key, got[key], want[key])


class ReplayTest(parameterized.TestCase):
  """Every way of running the recorded steps reproduces TF 2.3.4 exactly."""

  def test_fixture_has_skipped_steps(self):
    # Guards the recording itself: at least one overflow left everything but
    # the loss scale untouched.
    steps = RUN["per_step"]
    skipped = [i for i in range(1, len(steps))
               if steps[i]["global_step"] == steps[i - 1]["global_step"]]
    self.assertGreaterEqual(len(skipped), 1)
    for i in skipped:
      self.assertEqual(steps[i]["w"], steps[i - 1]["w"])
      self.assertEqual(steps[i]["loss_scale"], steps[i - 1]["loss_scale"] / 2)

  def test_session(self):
    assert_matches_recording(replay_graph())

  def test_session_with_tf_compat_v1_loss_scale(self):
    assert_matches_recording(replay_graph(TF_LOSS_SCALE))

  def test_eager(self):
    assert_matches_recording(replay_eager(use_function=False))

  def test_eager_with_tf_compat_v1_loss_scale(self):
    assert_matches_recording(replay_eager(False, TF_LOSS_SCALE))

  def test_tf_function(self):
    assert_matches_recording(replay_eager(use_function=True))

  def test_mirrored_eager(self):
    assert_matches_recording(
        replay_mirrored(_strategy(), use_function=False))

  def test_mirrored_tf_function(self):
    assert_matches_recording(
        replay_mirrored(_strategy(), use_function=True))

  def test_mirrored_default_collectives_subprocess(self):
    script = textwrap.dedent("""
        import json, sys
        import tensorflow as tf
        cpu = tf.config.list_physical_devices("CPU")[0]
        tf.config.set_logical_device_configuration(
            cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
        from tests.optimizers import test_compat_v1_optimizer as t
        strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
        out = [t.replay_mirrored(strategy, use_function=False),
               t.replay_mirrored(strategy, use_function=True)]
        json.dump(out, sys.stdout)
        """)
    eager, function = run_json_subprocess(self, script)
    assert_matches_recording(eager)
    assert_matches_recording(function)

  def test_mirrored_graph_call_for_each_replica(self):
    assert_matches_recording(replay_mirrored_graph())

  @parameterized.parameters("disable_eager_execution", "disable_v2_behavior")
  def test_tf1_style_process(self, switch):
    script = textwrap.dedent("""
        import json, sys
        import tensorflow as tf
        tf.compat.v1.%s()
        cpu = tf.config.list_physical_devices("CPU")[0]
        tf.config.set_logical_device_configuration(
            cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
        from tests.optimizers import test_compat_v1_optimizer as t
        assert not tf.executing_eagerly()
        out = {"session": t.replay_graph(),
               "mirrored": t.replay_mirrored_graph()}
        model = t.GraphModel()
        saver = tf.compat.v1.train.Saver()
        with tf.compat.v1.Session() as sess:
          saver.restore(sess, t.TF23_SAVER_PREFIX)
          out["restored"] = model.read(sess)
        json.dump(out, sys.stdout)
        """ % switch)
    out = run_json_subprocess(self, script)
    assert_matches_recording(out["session"])
    assert_matches_recording(out["mirrored"])
    self.assertEqual(out["restored"], RUN["per_step"][-1])


def _strategy():
  """A 2-replica MirroredStrategy with its default (collective) reduction.

  conftest.py gives every test fresh collective keys, so instances in one
  process no longer collide.
  """
  return tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])


class SaverCheckpointTest(parameterized.TestCase):

  def test_graph_has_tf23_variable_names(self):
    with tf.Graph().as_default():
      GraphModel()
      names = sorted(v.op.name for v in tf.compat.v1.global_variables())
    self.assertEqual(names, RUN["global_variables"])

  def test_tf23_checkpoint_restores_exactly(self):
    with tf.Graph().as_default(), tf.compat.v1.Session() as sess:
      model = GraphModel()
      saver = tf.compat.v1.train.Saver()
      saver.restore(sess, TF23_SAVER_PREFIX)
      self.assertEqual(model.read(sess), RUN["per_step"][-1])
      # The restored counter is live: one more finite step completes the
      # increment period (2) and doubles the scale, as it would have in TF.
      self.assertEqual(RUN["per_step"][-1]["good_steps"], 1)
      sess.run(model.train_op, model.feed(STEPS[0]))
      after = model.read(sess)
    self.assertEqual(after["loss_scale"],
                     RUN["per_step"][-1]["loss_scale"] * 2)
    self.assertEqual(after["good_steps"], 0)
    self.assertEqual(after["global_step"],
                     RUN["per_step"][-1]["global_step"] + 1)

  def test_our_checkpoint_has_tf23_names_and_values(self):
    prefix = os.path.join(self.create_tempdir().full_path, "model.ckpt")
    with tf.Graph().as_default(), tf.compat.v1.Session() as sess:
      model = GraphModel()
      sess.run(tf.compat.v1.global_variables_initializer())
      for step in STEPS:
        sess.run(model.train_op, model.feed(step))
      tf.compat.v1.train.Saver().save(sess, prefix, write_meta_graph=False)
    reader = tf.train.load_checkpoint(prefix)
    written = {name: _as_list(reader.get_tensor(name))
               for name, _ in tf.train.list_variables(prefix)}
    self.assertEqual(written, RUN["checkpoint"])
    # Dtypes too: TF 2.3.4 reads float32 scale and int64 counter.
    dtypes = reader.get_variable_to_dtype_map()
    self.assertEqual(dtypes["current_loss_scale"], tf.float32)
    self.assertEqual(dtypes["good_steps"], tf.int64)
    self.assertEqual(dtypes["global_step"], tf.int64)


class ObjectCheckpointTest(parameterized.TestCase):
  """tf.train.Checkpoint keys match TF's compat.v1 optimizer (TF 2.3 copy)."""

  def _trained(self, opt_cls, loss_scale):
    var = tf.Variable([1.0, 2.0])
    opt = opt_cls(tf.compat.v1.train.MomentumOptimizer(0.5, 0.5), loss_scale)
    opt.minimize(lambda: tf.reduce_sum(var * [1.0, 4.0]), var_list=[var])
    opt.minimize(lambda: tf.reduce_sum(var * [2.0, 1.0]), var_list=[var])
    return var, opt

  def test_keys_and_values_match_tf_and_restore_both_ways(self):
    tmp = self.create_tempdir().full_path
    ours_var, ours = self._trained(
        MixedPrecisionLossScaleOptimizer,
        mp.DynamicLossScale(initial_loss_scale=8, increment_period=1))
    tf_var, theirs = self._trained(
        tf.compat.v1.mixed_precision.MixedPrecisionLossScaleOptimizer,
        TF_LOSS_SCALE(initial_loss_scale=8, increment_period=1))
    ours_path = tf.train.Checkpoint(var=ours_var, opt=ours).write(
        os.path.join(tmp, "ours"))
    tf_path = tf.train.Checkpoint(var=tf_var, opt=theirs).write(
        os.path.join(tmp, "tf"))

    def contents(path):
      reader = tf.train.load_checkpoint(path)
      return {
          name: _as_list(reader.get_tensor(name))
          for name, _ in tf.train.list_variables(path)
          if not name.startswith("_CHECKPOINTABLE_OBJECT_GRAPH")
      }

    ours_contents = contents(ours_path)
    self.assertEqual(ours_contents, contents(tf_path))
    self.assertEqual(ours_contents["opt/loss_scale/current_loss_scale/"
                                   ".ATTRIBUTES/VARIABLE_VALUE"], 32.0)
    self.assertEqual(ours_contents["opt/loss_scale/good_steps/"
                                   ".ATTRIBUTES/VARIABLE_VALUE"], 0)

    # TF's checkpoint into a fresh one of ours (restore before creation).
    var = tf.Variable([0.0, 0.0])
    fresh = MixedPrecisionLossScaleOptimizer(
        tf.compat.v1.train.MomentumOptimizer(0.5, 0.5),
        mp.DynamicLossScale(initial_loss_scale=2, increment_period=1))
    tf.train.Checkpoint(var=var, opt=fresh).read(tf_path).assert_consumed()
    self.assertEqual(float(fresh._loss_scale()), 32.0)
    self.assertEqual(_as_list(var), _as_list(tf_var))
    # Slots are created on first use and take the restored value then.
    fresh.apply_gradients([(tf.constant([0.0, 0.0]), var)])
    tf_momentum = _as_list(theirs._optimizer.get_slot(tf_var, "momentum"))
    self.assertEqual(_as_list(fresh.get_slot(var, "momentum")),
                     [v * 0.5 for v in tf_momentum])


class ComputeGradientsTest(parameterized.TestCase):

  def test_loss_is_scaled_and_gradients_unscaled_in_graph(self):
    with tf.Graph().as_default(), tf.compat.v1.Session() as sess:
      w = tf.compat.v1.get_variable("w", initializer=[1.0, 2.0])
      unused = tf.compat.v1.get_variable("unused", initializer=3.0)
      table = tf.compat.v1.get_variable("table", initializer=[[1.0], [2.0],
                                                              [3.0]])
      loss = (tf.reduce_sum(w * [3.0, 5.0]) +
              tf.reduce_sum(tf.gather(table, [2, 0])) * 7.0)
      opt = MixedPrecisionLossScaleOptimizer(
          tf.compat.v1.train.GradientDescentOptimizer(1.0), 1024)
      grads_and_vars = opt.compute_gradients(loss, [w, unused, table])
      (gw, vw), (gu, vu), (gt, vt) = grads_and_vars
      self.assertIs(vw, w)
      self.assertIs(vu, unused)
      self.assertIs(vt, table)
      self.assertIsNone(gu)
      self.assertIsInstance(gt, tf.IndexedSlices)
      # The scaled loss really flowed back: the raw gradient is 1024x.
      raw = tf.compat.v1.gradients(loss * 1024.0, [w])[0]
      sess.run(tf.compat.v1.global_variables_initializer())
      gw_val, gt_val, raw_val = sess.run([gw, gt, raw])
    self.assertEqual(gw_val.tolist(), [3.0, 5.0])
    self.assertEqual(raw_val.tolist(), [3072.0, 5120.0])
    self.assertEqual(gt_val.values.tolist(), [[7.0], [7.0]])
    self.assertEqual(gt_val.indices.tolist(), [2, 0])

  @parameterized.named_parameters(("eager", False), ("function", True))
  def test_callable_loss(self, use_function):
    w = tf.Variable([1.0, 2.0])
    table = tf.Variable([[1.0], [2.0], [3.0]])
    unused = tf.Variable(3.0)
    opt = MixedPrecisionLossScaleOptimizer(
        tf.compat.v1.train.GradientDescentOptimizer(1.0),
        mp.DynamicLossScale(initial_loss_scale=2.**10))
    seen = []

    def loss():
      value = (tf.reduce_sum(w * [3.0, 5.0]) +
               tf.reduce_sum(tf.gather(table, [1])) * 7.0)
      seen.append(value)
      return value

    def grads():
      return opt.compute_gradients(loss, var_list=[w, unused, table])

    if use_function:
      grads = tf.function(grads)
    (gw, _), (gu, _), (gt, _) = grads()
    self.assertIsNone(gu)
    self.assertIsInstance(gt, tf.IndexedSlices)
    self.assertEqual(_as_list(gw), [3.0, 5.0])
    self.assertEqual(_as_list(gt.values), [[7.0]])

  def test_float16_gradients_are_unscaled_in_float16(self):
    w = tf.Variable(tf.constant([1.0, 2.0], tf.float16))
    opt = MixedPrecisionLossScaleOptimizer(
        tf.compat.v1.train.GradientDescentOptimizer(1.0), 2.**12)
    (g, _), = opt.compute_gradients(
        lambda: tf.reduce_sum(w * tf.constant([1e-4, 3.0], tf.float16)),
        var_list=[w])
    self.assertEqual(g.dtype, tf.float16)
    self.assertEqual(_as_list(g), [np.float16(1e-4).item(), 3.0])

  def test_tensor_loss_eagerly_raises_like_v1_optimizer(self):
    w = tf.Variable(1.0)
    opt = MixedPrecisionLossScaleOptimizer(
        tf.compat.v1.train.GradientDescentOptimizer(1.0), "dynamic")
    with self.assertRaisesRegex(RuntimeError, "should be a function"):
      opt.compute_gradients(w * 2.0, var_list=[w])


def _dynamic_opt(inner=None, **kwargs):
  kwargs.setdefault("initial_loss_scale", 4.0)
  kwargs.setdefault("increment_period", 2)
  return MixedPrecisionLossScaleOptimizer(
      inner or tf.compat.v1.train.GradientDescentOptimizer(0.5),
      mp.DynamicLossScale(**kwargs))


class ApplyGradientsTest(parameterized.TestCase):

  @parameterized.named_parameters(("eager", False), ("function", True))
  def test_skipped_step_changes_nothing_but_the_scale(self, use_function):
    var = tf.Variable([1.0, 2.0])
    global_step = tf.Variable(0, dtype=tf.int64)
    opt = _dynamic_opt(tf.compat.v1.train.MomentumOptimizer(0.5, 0.5))

    def apply(grad):
      opt.apply_gradients([(grad, var)], global_step=global_step)

    if use_function:
      apply = tf.function(apply)
    apply(tf.constant([1.0, 1.0]))
    momentum = _as_list(opt.get_slot(var, "momentum"))
    apply(tf.constant([np.nan, 1.0]))
    self.assertEqual(_as_list(var), [0.5, 1.5])
    self.assertEqual(_as_list(opt.get_slot(var, "momentum")), momentum)
    self.assertEqual(int(global_step), 1)
    self.assertEqual(float(opt._loss_scale()), 2.0)
    apply(tf.constant([1.0, 1.0]))
    self.assertEqual(int(global_step), 2)
    self.assertEqual(_as_list(var), [-0.25, 0.75])

  def test_none_gradients_are_ignored(self):
    a, b = tf.Variable(1.0), tf.Variable(2.0)
    opt = _dynamic_opt()
    opt.apply_gradients([(None, a), (tf.constant(2.0), b)])
    self.assertEqual(float(a), 1.0)
    self.assertEqual(float(b), 1.0)
    self.assertEqual(int(opt._loss_scale._num_good_steps), 1)

  def test_sparse_gradients_are_applied_and_checked(self):
    table = tf.Variable([[1.0], [2.0], [3.0]])
    opt = _dynamic_opt()
    grad = tf.IndexedSlices(tf.constant([[2.0]]), tf.constant([1]),
                            tf.constant([3, 1]))
    opt.apply_gradients([(grad, table)])
    self.assertEqual(_as_list(table), [[1.0], [1.0], [3.0]])
    bad = tf.IndexedSlices(tf.constant([[np.inf]]), tf.constant([0]),
                           tf.constant([3, 1]))
    opt.apply_gradients([(bad, table)])
    self.assertEqual(_as_list(table), [[1.0], [1.0], [3.0]])
    self.assertEqual(float(opt._loss_scale()), 2.0)

  def test_all_none_gradients_raise_before_any_change(self):
    var = tf.Variable(1.0)
    opt = _dynamic_opt()
    with self.assertRaisesRegex(ValueError,
                                "No gradients provided for any variable"):
      opt.apply_gradients([(None, var)])
    self.assertEqual(int(opt._loss_scale._num_good_steps), 0)

  def test_fixed_loss_scale_applies_directly(self):
    var = tf.Variable(1.0)
    global_step = tf.Variable(0, dtype=tf.int64)
    opt = MixedPrecisionLossScaleOptimizer(
        tf.compat.v1.train.GradientDescentOptimizer(0.5),
        mp.FixedLossScale(8))
    opt.minimize(lambda: var * 4.0, global_step=global_step, var_list=[var])
    self.assertEqual(float(var), -1.0)
    # As in TF 2.3.4, a fixed loss scale never checks the gradients.
    opt.apply_gradients([(tf.constant(np.inf), var)], global_step=global_step)
    self.assertTrue(math.isinf(float(var)))
    self.assertEqual(int(global_step), 2)

  def test_fixed_loss_scale_from_tf_compat_v1_in_session(self):
    with tf.Graph().as_default(), tf.compat.v1.Session() as sess:
      var = tf.compat.v1.get_variable("v", initializer=1.0)
      opt = MixedPrecisionLossScaleOptimizer(
          tf.compat.v1.train.GradientDescentOptimizer(0.5),
          tf.compat.v1.mixed_precision.FixedLossScale(16))
      train = opt.minimize(var * 4.0)
      sess.run(tf.compat.v1.global_variables_initializer())
      sess.run(train)
      self.assertEqual(sess.run(var), -1.0)

  @parameterized.named_parameters(
      ("gradient_descent",
       lambda: tf.compat.v1.train.GradientDescentOptimizer(0.25)),
      ("momentum", lambda: tf.compat.v1.train.MomentumOptimizer(0.25, 0.9)),
      ("adam", lambda: tf.compat.v1.train.AdamOptimizer(0.25)),
      ("adagrad", lambda: tf.compat.v1.train.AdagradOptimizer(0.25)),
      ("rmsprop", lambda: tf.compat.v1.train.RMSPropOptimizer(0.25)),
  )
  def test_equals_tf_compat_v1_wrapper_in_session(self, make_inner):
    """TF's own (TF 2.3-derived) wrapper as an oracle, incl. Adam's non-slot
    beta powers, which must not advance on skipped steps."""
    feeds = [[1.0, -2.0], [np.inf, 1.0], [0.5, 0.25], [3.0, 1.0],
             [np.nan, 0.0], [-1.0, 2.0]]

    def run(wrapper_cls, loss_scale_cls):
      with tf.Graph().as_default(), tf.compat.v1.Session() as sess:
        g = tf.compat.v1.placeholder(tf.float32, [2])
        var = tf.compat.v1.get_variable("v", initializer=[1.0, 2.0])
        step = tf.compat.v1.train.get_or_create_global_step()
        opt = wrapper_cls(make_inner(),
                          loss_scale_cls(initial_loss_scale=8,
                                         increment_period=2))
        train = opt.minimize(tf.reduce_sum(var * g), global_step=step)
        tensors = [var, step, opt._loss_scale()] + opt.variables()
        sess.run(tf.compat.v1.global_variables_initializer())
        out = []
        for feed in feeds:
          sess.run(train, {g: feed})
          out.append([_as_list(t) for t in sess.run(tensors)])
        names = sorted(v.op.name for v in tf.compat.v1.global_variables())
        return out, names

    ours = run(MixedPrecisionLossScaleOptimizer, mp.DynamicLossScale)
    theirs = run(
        tf.compat.v1.mixed_precision.MixedPrecisionLossScaleOptimizer,
        TF_LOSS_SCALE)
    self.assertEqual(ours, theirs)


class AccessorTest(parameterized.TestCase):

  def test_slots_variables_and_name_delegate(self):
    var = tf.Variable([1.0, 2.0])
    inner = tf.compat.v1.train.AdamOptimizer(0.1, name="MyAdam")
    opt = MixedPrecisionLossScaleOptimizer(inner, "dynamic")
    opt.minimize(lambda: tf.reduce_sum(var), var_list=[var])
    self.assertEqual(opt.get_name(), "MyAdam")
    # Not delegated (see get_slot): the wrapper owns no slots, as in TF 2.3.4.
    self.assertEqual(opt.get_slot_names(), [])
    self.assertEqual(opt._optimizer.get_slot_names(), ["m", "v"])
    self.assertIs(opt.get_slot(var, "m"), inner.get_slot(var, "m"))
    self.assertIsNone(opt.get_slot(var, "nope"))
    names = sorted(v.name for v in opt.variables())
    self.assertEqual(
        names,
        sorted([v.name for v in inner.variables()] +
               ["current_loss_scale:0", "good_steps:0"]))
    self.assertLen(names, 6)  # m, v, beta1_power, beta2_power + 2.

  def test_variables_in_a_graph(self):
    with tf.Graph().as_default() as g:
      var = tf.compat.v1.get_variable("v", initializer=1.0)
      opt = MixedPrecisionLossScaleOptimizer(
          tf.compat.v1.train.MomentumOptimizer(0.1, 0.5), "dynamic")
      opt.minimize(var * 1.0)
      names = [v.op.name for v in opt.variables()]
      self.assertTrue(all(v.graph is g for v in opt.variables()))
    self.assertEqual(names, ["v/Momentum", "current_loss_scale",
                             "good_steps"])


class ErrorTest(parameterized.TestCase):
  """Exceptions and messages as TF 2.3.4's (checked against TF's copy)."""

  def _both(self, *args):
    errors = []
    for cls in (MixedPrecisionLossScaleOptimizer,
                tf.compat.v1.mixed_precision.MixedPrecisionLossScaleOptimizer):
      with self.assertRaises(ValueError) as cm:
        cls(*args)
      errors.append(str(cm.exception))
    return errors

  def test_non_optimizer(self):
    ours, theirs = self._both("sgd", "dynamic")
    self.assertEqual(ours, theirs)
    self.assertEqual(
        ours, "\"opt\" must be an instance of Optimizer, but got: "
        "<class 'str'>")

  def test_keras_optimizer(self):
    import keras  # pylint: disable=g-import-not-at-top
    ours, theirs = self._both(keras.optimizers.SGD(), "dynamic")
    self.assertTrue(ours.startswith(theirs), (ours, theirs))
    self.assertIn("tf.keras.mixed_precision.LossScaleOptimizer", ours)

  def test_none_loss_scale(self):
    ours, theirs = self._both(
        tf.compat.v1.train.GradientDescentOptimizer(1.0), None)
    self.assertEqual(ours, theirs)
    self.assertEqual(ours, "loss_scale cannot be None")

  @parameterized.named_parameters(("string", "static"), ("list", [2.0]),
                                  ("below_one", 0.5), ("nan", float("nan")),
                                  ("inf", float("inf")))
  def test_bad_loss_scale(self, value):
    with self.assertRaisesRegex(ValueError, "loss scale|loss_scale_value"):
      MixedPrecisionLossScaleOptimizer(
          tf.compat.v1.train.GradientDescentOptimizer(1.0), value)

  def test_cross_replica_context(self):
    strategy = _strategy()
    with strategy.scope():
      var = tf.Variable(1.0)
      opt = _dynamic_opt()
      with self.assertRaisesRegex(
          ValueError,
          r"^apply_gradients\(\) must be called in a replica context\.$"):
        opt.apply_gradients([(tf.constant(1.0), var)])
    self.assertEqual(float(var.numpy()), 1.0)
    self.assertEqual(int(opt._loss_scale._num_good_steps.numpy()), 0)

  def test_apply_helpers_are_never_called(self):
    opt = _dynamic_opt()
    with self.assertRaisesRegex(RuntimeError, "should never be called"):
      opt._apply_dense(None, None)
    with self.assertRaisesRegex(RuntimeError, "should never be called"):
      opt._resource_apply_sparse(None, None, None)


class EndpointTest(parameterized.TestCase):

  @parameterized.parameters(
      "mixed_precision.MixedPrecisionLossScaleOptimizer",
      "train.experimental.MixedPrecisionLossScaleOptimizer")
  def test_v1_paths(self, path):
    spec = endpoints.lookup("v1", path)
    self.assertIs(spec.symbol, MixedPrecisionLossScaleOptimizer)
    self.assertEqual(spec.v2, ())
    self.assertEqual(spec.deprecated,
                     ("train.experimental.MixedPrecisionLossScaleOptimizer",))

  def test_argspec_matches_tf(self):
    theirs = tf.compat.v1.mixed_precision.MixedPrecisionLossScaleOptimizer
    for method in ("__init__", "compute_gradients", "apply_gradients",
                   "minimize", "get_slot", "get_slot_names", "variables"):
      self.assertEqual(
          testing.argspec(getattr(MixedPrecisionLossScaleOptimizer, method)),
          testing.argspec(getattr(theirs, method)), method)


if __name__ == "__main__":
  sys.exit(pytest.main([__file__, "-q"]))
