"""Two MultiWorkerMirroredStrategy workers on localhost agree on every skip.

Two processes (tests/reliability/workers/multiworker_train.py) form a 2-worker
MultiWorkerMirroredStrategy cluster on 127.0.0.1 ports picked here, and train
with our Keras LossScaleOptimizer (Adam inside). Only worker 1 sees an overflow
on some steps; the optimizer's cross-replica finiteness check must make both
workers skip exactly those steps, so both end with bit-identical variables,
slots, iterations, loss scale and counter, equal to the reference model's.
The processes are killed if anything fails or takes too long.
"""

import json
import time

import numpy as np

from tests.loss_scale import reference_model
from tests.reliability.workers import processes

STEPS = 14
OVERFLOW_STEPS = (2, 3, 9)
# A guard against a hung worker only: generous, so a slow or loaded machine
# does not fail the test.
TIMEOUT_S = 900


def test_two_workers_skip_the_same_steps_and_end_identical(tmp_path):
  ports = processes.free_ports(2)
  cluster = {"worker": [f"127.0.0.1:{p}" for p in ports]}
  procs, outputs, logs = [], [], []
  try:
    for index in range(2):
      config = {"cluster": cluster, "task": {"type": "worker", "index": index}}
      outputs.append(str(tmp_path / f"worker{index}.json"))
      logs.append(str(tmp_path / f"worker{index}.log"))
      procs.append(
          processes.start(
              "multiworker_train.py",
              [outputs[-1], "--steps", str(STEPS), "--overflow_steps",
               ",".join(map(str, OVERFLOW_STEPS))],
              processes.worker_env(TF_CONFIG=json.dumps(config)), logs[-1]))
    deadline = time.monotonic() + TIMEOUT_S
    for proc, log in zip(procs, logs):
      try:
        code = proc.wait(timeout=max(1., deadline - time.monotonic()))
      except Exception:  # pylint: disable=broad-except
        raise AssertionError(
            f"worker timed out after {TIMEOUT_S}s:\n{processes.tail(log)}"
        ) from None
      assert code == 0, f"worker failed ({code}):\n{processes.tail(log)}"
  finally:
    for proc in procs:
      processes.kill(proc)

  results = []
  for path in outputs:
    with open(path) as f:
      results.append(json.load(f))
  zero, one = results
  assert zero["final"] == one["final"]  # Bit-identical, hex-encoded.
  assert zero["trajectory"] == one["trajectory"]

  ref = reference_model.ReferenceDynamicScale(
      scale=np.float32(2.**10), growth_steps=3, multiplier=2.)
  expected = ref.run(step not in OVERFLOW_STEPS for step in range(STEPS))
  got = [(t["applied"], t["scale"], t["counter"]) for t in zero["trajectory"]]
  assert got == expected
  skipped = [i for i, t in enumerate(zero["trajectory"]) if not t["applied"]]
  assert skipped == list(OVERFLOW_STEPS)
  final = zero["final"]
  assert final["finite"]
  assert final["iterations"] == STEPS  # Skipped steps count, as in TF 2.4.4.
  assert final["scale"] == np.float32(expected[-1][1]).tobytes().hex()
  assert final["counter"] == expected[-1][2]
