"""Crash and resume: SIGKILLed runs resume to exactly the uninterrupted result.

tests/reliability/workers/crash_train.py trains deterministically (op
determinism on, the
data of a step depends on the step only) with our LossScaleOptimizer and saves
a CheckpointManager checkpoint every 2 steps, numbered by `iterations`. Here it
runs once uninterrupted, and once killed with SIGKILL three times (right after
saving the checkpoint of a skipped overflow step, between a random step's
update and its checkpoint, and from outside at a random moment) and resumed
each time from its latest checkpoint. Both runs must end with bit-identical
weights, Adam slots, iterations, loss scale and counter, and every checkpoint
both runs wrote must hold bit-identical values; the loss scale and counter of
each checkpoint equal the reference model's at that step.
"""

import json
import os
import random
import signal
import time

import numpy as np
import tensorflow as tf

from tests.loss_scale import reference_model
from tests.reliability.workers import processes

STEPS = 24
SAVE_EVERY = 2
OVERFLOW_STEPS = (3, 4, 5, 11, 17)
SKIPPED_SAVE_STEP = 5  # An overflow step whose checkpoint is then resumed.
# A guard against a hung worker only: generous, so a slow or loaded machine
# does not fail the test.
TIMEOUT_S = 900


def _run(ckpt_dir, output, log, die_at=None, kill_after_step=None):
  """Runs the worker once; returns its exit code."""
  args = [ckpt_dir, output, "--steps", str(STEPS), "--save_every",
          str(SAVE_EVERY), "--overflow_steps",
          ",".join(map(str, OVERFLOW_STEPS))]
  if die_at:
    args += ["--die_at", die_at]
  if kill_after_step is not None:
    args += ["--step_delay", "0.05"]
  progress = os.path.join(ckpt_dir, "progress")
  offset = os.path.getsize(progress) if os.path.exists(progress) else 0
  proc = processes.start("crash_train.py", args, processes.worker_env(), log)
  try:
    deadline = time.monotonic() + TIMEOUT_S
    if kill_after_step is not None:
      while time.monotonic() < deadline and proc.poll() is None:
        done = _progress(progress, offset)
        if done and done[-1] >= kill_after_step:
          time.sleep(random.uniform(0., 0.1))  # Anywhere in the next steps.
          os.killpg(proc.pid, signal.SIGKILL)
          break
        time.sleep(0.02)
    return proc.wait(timeout=max(1., deadline - time.monotonic()))
  finally:
    processes.kill(proc)


def _progress(path, offset):
  """Steps the worker finished since `offset` bytes into its progress file."""
  if not os.path.exists(path):
    return []
  with open(path) as f:
    f.seek(offset)
    return [int(s) for s in f.read().split()]


def _checkpoint_values(path):
  reader = tf.train.load_checkpoint(path)
  return {
      key: reader.get_tensor(key)
      for key in reader.get_variable_to_shape_map()
      if not key.startswith("_CHECKPOINTABLE_OBJECT_GRAPH")
  }


def _checkpoints(directory):
  state = tf.train.get_checkpoint_state(directory)
  return {
      int(p.rsplit("-", 1)[1]): p for p in state.all_model_checkpoint_paths
  }


def test_killed_and_resumed_run_equals_uninterrupted_run(tmp_path):
  seed = random.randrange(2**32)
  rnd = random.Random(seed)
  full_dir, crash_dir = tmp_path / "full", tmp_path / "crash"
  full_dir.mkdir()
  crash_dir.mkdir()
  log = str(tmp_path / "worker.log")

  code = _run(str(full_dir), str(tmp_path / "full.json"), log)
  assert code == 0, processes.tail(log)

  before_save = rnd.randrange(7, 14)
  plan = [
      {"die_at": f"{SKIPPED_SAVE_STEP}:after_save"},
      {"die_at": f"{before_save}:before_save"},
      {"kill_after_step": rnd.randrange(before_save + 1, 19)},
  ]
  for kill in plan:
    code = _run(str(crash_dir), str(tmp_path / "crash.json"), log, **kill)
    assert code == -signal.SIGKILL, (seed, kill, code, processes.tail(log))
    assert not os.path.exists(tmp_path / "crash.json")
  code = _run(str(crash_dir), str(tmp_path / "crash.json"), log)
  assert code == 0, (seed, processes.tail(log))

  with open(tmp_path / "full.json") as f:
    full = json.load(f)
  with open(tmp_path / "crash.json") as f:
    crashed = json.load(f)
  assert full["finite"]
  assert full["iterations"] == STEPS
  assert crashed == full, seed  # Weights, slots, scale, counter: hex bits.

  # Every checkpoint both runs wrote is identical, skipped steps' included.
  ref = reference_model.ReferenceDynamicScale(
      scale=np.float32(2.**12), growth_steps=3, multiplier=2.)
  trajectory = ref.run(s not in OVERFLOW_STEPS for s in range(STEPS))
  full_ckpts, crash_ckpts = _checkpoints(full_dir), _checkpoints(crash_dir)
  assert sorted(full_ckpts) == list(range(SAVE_EVERY, STEPS + 1, SAVE_EVERY))
  assert SKIPPED_SAVE_STEP + 1 in crash_ckpts
  for number, path in full_ckpts.items():
    expected = _checkpoint_values(path)
    scale_key, = [k for k in expected if "current_loss_scale" in k]
    counter_key, = [k for k in expected if "good_steps" in k]
    _, scale, counter = trajectory[number - 1]
    assert expected[scale_key] == np.float32(scale), number
    assert expected[counter_key] == counter, number
    if number in crash_ckpts:
      got = _checkpoint_values(crash_ckpts[number])
      assert sorted(got) == sorted(expected)
      for key, value in expected.items():
        assert got[key].tobytes() == value.tobytes(), (seed, number, key)

  # Steps 4 and 5 were skipped: checkpoint 6 (saved while skipping, and
  # resumed from) differs from checkpoint 4 only in iterations, scale and
  # counter; the scale halved twice and the counter is 0.
  before = _checkpoint_values(full_ckpts[4])
  after = _checkpoint_values(full_ckpts[SKIPPED_SAVE_STEP + 1])
  changed = sorted(k for k in before
                   if before[k].tobytes() != after[k].tobytes())
  assert len(changed) == 3, changed
  assert any("iteration" in k for k in changed), changed
  scale_key, = [k for k in after if "current_loss_scale" in k]
  assert after[scale_key] == before[scale_key] / 4
