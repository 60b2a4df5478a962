"""Demo: a TF 2.3.4 mixed-precision job resumes on today's TensorFlow.

    python examples/demo/demo.py [--steps 30] [--plot PATH]

Restores the TF 2.3.4 job beside it (`data/`, the checkpoint real TF 2.3.4
wrote, also tests/fixtures/legacy/demo_tf23) under a 2-replica
`MirroredStrategy` with the job's own code, trains on with one corrupted
batch (skipped, scale halved), replays steps 21-40 against TF 2.3.4's record,
shows `DynamicLossScale` by hand and plots loss and scale if matplotlib is
installed.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any, Optional, Sequence, TextIO

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # pylint: disable=g-import-not-at-top,wrong-import-position
import tensorflow as tf  # pylint: disable=g-import-not-at-top,wrong-import-position

DATA_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")
SPIKE_FACTOR = 1000.


def configure_devices() -> Optional[list[str]]:
  """Splits the CPU into 2 logical devices when there is no GPU.

  Only before TensorFlow initializes its runtime; afterwards nothing changes.
  Returns the devices for a `MirroredStrategy`, or None for all GPUs.
  """
  if tf.config.list_physical_devices("GPU"):
    return None
  cpu = tf.config.list_physical_devices("CPU")[0]
  try:
    tf.config.set_logical_device_configuration(
        cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
  except RuntimeError:  # Runtime already initialized: use what exists.
    pass
  return [d.name for d in tf.config.list_logical_devices("CPU")][:2]


def load_job() -> dict[str, Any]:
  """The TF 2.3.4 job's record (`data/job.json`)."""
  with open(os.path.join(DATA_DIR, "job.json")) as f:
    return json.load(f)


def job_data(job: dict[str, Any]) -> tuple[np.ndarray, np.ndarray]:
  """Regenerates the job's data set exactly as its description says."""
  spec = job["data"]
  rng = np.random.RandomState(spec["seed"])
  x = rng.normal(size=(spec["n"], spec["features"])).astype(np.float32)
  w = rng.normal(size=(spec["features"], 1)).astype(np.float32)
  y = (spec["target_scale"] * (x @ w)).astype(np.float32)
  return x, y


def _batch_rows(job: dict[str, Any], step: int) -> np.ndarray:
  """Rows of the batch the job used at 1-based `step`."""
  batch = job["data"]["batch_size"]
  start = (step - 1) % (job["data"]["n"] // batch) * batch
  return np.arange(start, start + batch)


def _progress(done: int, total: int, text: str,
              stream: Optional[TextIO] = None) -> None:
  stream = stream or sys.stderr
  width = 30
  filled = int(width * done / max(total, 1))
  stream.write(f"\r[{'#' * filled}{'.' * (width - filled)}] "
               f"{done}/{total} {text}")
  if done == total:
    stream.write("\n")
  stream.flush()


def _restore(job: dict[str, Any], checkpoint: str,
             strategy: tf.distribute.Strategy) -> tuple[Any, Any, Any]:
  """The job's model and optimizer, restored by its own TF 2.3 code."""
  # pylint: disable-next=g-import-not-at-top
  from tf_mixed_precision_compat import legacy
  spec = job["data"]
  with strategy.scope():
    model = legacy.model_from_json(job["model_json"])
    opt = tf.keras.mixed_precision.experimental.LossScaleOptimizer(
        tf.keras.optimizers.SGD(spec["learning_rate"],
                                momentum=spec["momentum"]), "dynamic")
    ckpt = tf.train.Checkpoint(model=model, optimizer=opt)
    if os.path.isdir(checkpoint):
      checkpoint = tf.train.CheckpointManager(
          ckpt, checkpoint, max_to_keep=2).latest_checkpoint
    status = ckpt.restore(checkpoint)
    status.assert_existing_objects_matched()
  return model, opt, status


def _train_steps(job: dict[str, Any], model: Any, opt: Any,
                 strategy: tf.distribute.Strategy, steps: list[int],
                 spike_step: Optional[int] = None,
                 progress: bool = True) -> list[dict[str, Any]]:
  """The job's GradientTape loop over `steps`, batches split over replicas."""
  batch = job["data"]["batch_size"]
  x, y = job_data(job)

  def step_fn(xb: tf.Tensor, yb: tf.Tensor) -> tf.Tensor:
    with tf.GradientTape() as tape:
      pred = model(xb, training=True)
      per_example = tf.reshape(tf.square(pred - yb), [-1])
      # Mean over the global batch, so replicas sum to the job's loss.
      loss = tf.nn.compute_average_loss(per_example, global_batch_size=batch)
      scaled_loss = opt.get_scaled_loss(loss)
    scaled_grads = tape.gradient(scaled_loss, model.trainable_variables)
    grads = opt.get_unscaled_gradients(scaled_grads)
    opt.apply_gradients(zip(grads, model.trainable_variables))
    return loss

  @tf.function
  def train_step(xb: Any, yb: Any) -> tf.Tensor:
    per_replica = strategy.run(step_fn, args=(xb, yb))
    return strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=None)

  rows = np.concatenate([_batch_rows(job, s) for s in steps])
  targets = y[rows].copy()
  if spike_step is not None and spike_step in steps:
    at = list(steps).index(spike_step) * batch
    targets[at:at + batch] *= SPIKE_FACTOR
  dataset = strategy.experimental_distribute_dataset(
      tf.data.Dataset.from_tensor_slices((x[rows], targets)).batch(batch))
  trajectory = []
  scale = float(opt.loss_scale)
  for i, (step, (xb, yb)) in enumerate(zip(steps, dataset)):
    loss = float(train_step(xb, yb))
    new_scale = float(opt.loss_scale)
    counter = int(opt.dynamic_counter.numpy())
    # A finite step either counts up or (counter back at 0) doubles the scale.
    skipped = counter == 0 and new_scale != 2 * scale
    trajectory.append({"step": step, "loss": loss, "loss_scale": new_scale,
                       "counter": counter, "skipped": skipped,
                       "corrupted": step == spike_step})
    scale = new_scale
    if progress:
      _progress(i + 1, len(steps), f"loss {loss:10.4f}  scale {new_scale:g}")
  return trajectory


def resume(steps: int = 30, spike_step: Optional[int] = 50,
           progress: bool = True,
           strategy: Optional[tf.distribute.Strategy] = None
           ) -> dict[str, Any]:
  """Resumes the TF 2.3.4 job from its last checkpoint and keeps training.

  Args:
    steps: Steps to train after the restored step 40.
    spike_step: The (1-based) step whose batch is corrupted, or None.
    progress: Whether to draw a progress bar on stderr.
    strategy: Default: a `MirroredStrategy` over `configure_devices()`.

  Returns:
    A dict: `recorded` (TF 2.3.4's loss_scale, counter, iterations),
    `restored` (the same read back here), `replicas`, `history` (TF 2.3.4's
    steps 1-40) and `trajectory` (per new step: step, loss, loss_scale,
    counter, skipped, corrupted).
  """
  job = load_job()
  if strategy is None:
    strategy = tf.distribute.MirroredStrategy(configure_devices())
  model, opt, status = _restore(job, DATA_DIR, strategy)
  restored = {"loss_scale": float(opt.loss_scale),
              "counter": int(opt.dynamic_counter.numpy()),
              "iterations": int(opt.iterations.numpy()),
              "status": status}
  first = job["iterations"] + 1
  trajectory = _train_steps(job, model, opt, strategy,
                            list(range(first, first + steps)), spike_step,
                            progress)
  return {
      "recorded": {k: job[k] for k in ("loss_scale", "counter",
                                       "iterations")},
      "restored": restored,
      "replicas": strategy.num_replicas_in_sync,
      "history": job["trajectory"],
      "trajectory": trajectory,
  }


def replay(progress: bool = True
           ) -> list[tuple[dict[str, Any], dict[str, Any]]]:
  """Re-runs the job's steps 21-40 from its step-20 checkpoint, one replica.

  Returns `(ours, TF 2.3.4's recorded)` step dicts, as `resume`'s trajectory.
  """
  job = load_job()
  strategy = tf.distribute.get_strategy()
  model, opt, _ = _restore(job, os.path.join(DATA_DIR, "ckpt-20"), strategy)
  recorded = {r["step"]: r for r in job["trajectory"]}
  ours = _train_steps(job, model, opt, strategy, list(range(21, 41)),
                      progress=progress)
  return [(r, recorded[r["step"]]) for r in ours]


def plot(result: dict[str, Any], path: str) -> bool:
  """Writes `resume()`'s loss and loss scale to the PNG `path`.

  Returns False, writing nothing, if matplotlib is not installed.
  """
  try:
    import matplotlib  # pylint: disable=g-import-not-at-top
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
  except ImportError:
    return False
  history, trajectory = result["history"], result["trajectory"]
  fig, (ax_loss, ax_scale) = plt.subplots(2, 1, sharex=True, figsize=(8, 6))
  for runs, label, color in ((history, "TensorFlow 2.3.4 (recorded)", "gray"),
                             (trajectory, f"TensorFlow {tf.__version__}, "
                              f"{result['replicas']} replicas", "tab:blue")):
    steps = [r["step"] for r in runs]
    ax_loss.plot(steps, [r["loss"] for r in runs], color=color, label=label)
    ax_scale.step(steps, [r["loss_scale"] for r in runs], where="post",
                  color=color, label=label)
    skipped = [r for r in runs if r["skipped"]]
    ax_scale.scatter([r["step"] for r in skipped],
                     [r["loss_scale"] for r in skipped], marker="x",
                     color="tab:red", zorder=3)
  ax_loss.set_yscale("log")
  ax_loss.set_ylabel("loss")
  ax_loss.axvline(history[-1]["step"] + 0.5, color="black", linestyle=":")
  ax_loss.legend()
  ax_scale.set_yscale("log", base=2)
  ax_scale.set_ylabel("loss scale (x: skipped step)")
  ax_scale.set_xlabel("step")
  fig.suptitle("Mixed-precision job resumed from its TF 2.3.4 checkpoint")
  fig.tight_layout()
  fig.savefig(path, dpi=80)
  plt.close(fig)
  return True


def scale_dynamics(steps: int = 24, initial_loss_scale: float = 2.**12,
                   increment_period: int = 3,
                   seed: int = 0) -> list[dict[str, Any]]:
  """Trains a float16 linear model with a TF 2.3 `DynamicLossScale` by hand.

  The backward pass runs in float16, so a large scale really overflows.
  Returns per step: loss, scale (used), applied, new_scale and good_steps.
  """
  # pylint: disable=g-import-not-at-top
  from tf_mixed_precision_compat import loss_scale as loss_scale_module
  from tf_mixed_precision_compat.loss_scale import dynamic_state
  # pylint: enable=g-import-not-at-top
  rng = np.random.default_rng(seed)
  x = tf.constant(rng.normal(size=(64, 16)), tf.float16)
  y = tf.constant(rng.normal(size=(64, 1)) * 8., tf.float16)
  w = tf.Variable(tf.zeros((16, 1)))
  loss_scale = loss_scale_module.DynamicLossScale(
      initial_loss_scale=initial_loss_scale, increment_period=increment_period)
  opt = tf.keras.optimizers.SGD(0.01)

  @tf.function
  def train_step() -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
    scale = loss_scale()
    with tf.GradientTape() as tape:
      pred = tf.matmul(x, tf.cast(w, tf.float16))
      loss = tf.reduce_mean(tf.cast(tf.square(pred - y), tf.float32))
      scaled_loss = loss * scale
    (grad,) = tape.gradient(scaled_loss, [w])
    grad = grad / scale
    _, should_apply = loss_scale.update([grad])
    if should_apply:
      opt.apply_gradients([(grad, w)])
    return loss, scale, should_apply

  history = []
  for _ in range(steps):
    loss, scale, applied = train_step()
    history.append({
        "loss": float(loss), "scale": float(scale), "applied": bool(applied),
        "new_scale": float(loss_scale()),
        "good_steps": int(
            dynamic_state.counter_variable(loss_scale).numpy())})
  return history


def _print_scale_dynamics(history: list[dict[str, Any]], out: TextIO) -> None:
  print(f"{'step':>5}  {'scale used':>10}  {'applied':>7}  {'next scale':>10}"
        f"  {'good steps':>10}", file=out)
  for i, h in enumerate(history):
    print(f"{i:>5}  {h['scale']:>10g}  {'yes' if h['applied'] else 'SKIP':>7}"
          f"  {h['new_scale']:>10g}  {h['good_steps']:>10}", file=out)
  skipped = [i for i, h in enumerate(history) if not h["applied"]]
  scales = [h["new_scale"] for h in history]
  print(f"skipped steps: {skipped}; scale from {history[0]['scale']:g} up to "
        f"{max(scales):g}, never below {min(scales):g}", file=out)


def _print_table(rows: list[dict[str, Any]], out: TextIO) -> None:
  print(f"{'step':>5}  {'loss':>10}  {'loss scale':>10}  {'counter':>7}  "
        f"{'':4}", file=out)
  for r in rows:
    note = "SKIP" if r["skipped"] else ""
    if r.get("corrupted"):
      note += " (corrupted batch)"
    print(f"{r['step']:>5}  {r['loss']:>10.4f}  {r['loss_scale']:>10g}  "
          f"{r['counter']:>7}  {note}", file=out)


def _parse_args(argv: Optional[Sequence[str]]) -> argparse.Namespace:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--steps", type=int, default=30,
                      help="steps to train after resuming (default 30)")
  parser.add_argument("--spike-step", type=int, default=50,
                      help="step whose batch is corrupted (default 50; 0: "
                      "none)")
  parser.add_argument("--plot", default="demo_loss_scale.png",
                      help="PNG file to write (default demo_loss_scale.png)")
  parser.add_argument("--no-replay", action="store_true",
                      help="skip the TF 2.3.4 replay comparison")
  args = parser.parse_args(argv)
  if args.steps < 1:
    parser.error(f"--steps must be >= 1, got {args.steps}")
  return args


def _print_resume(result: dict[str, Any], spike_step: int,
                  out: TextIO) -> None:
  """The restored state against TF 2.3.4's, then the continued training."""
  recorded, restored = result["recorded"], result["restored"]
  print(f"Resumed the TF {load_job()['tensorflow_version']} job from "
        f"data/ckpt-{recorded['iterations']} on TensorFlow "
        f"{tf.__version__} with {result['replicas']} replicas.", file=out)
  for key in ("loss_scale", "counter", "iterations"):
    same = "equal" if restored[key] == recorded[key] else "DIFFERENT"
    print(f"  restored {key:<10} {restored[key]:>8g}   TF 2.3.4 recorded "
          f"{recorded[key]:>8g}   {same}", file=out)
  print(f"\nTraining on (step {spike_step}'s batch corrupted, targets "
        f"x{SPIKE_FACTOR:g}):", file=out)
  trajectory = result["trajectory"]
  _print_table(trajectory, out)
  skipped = [r["step"] for r in trajectory if r["skipped"]]
  scales = [restored["loss_scale"]]
  for r in trajectory:
    if scales[-1] != r["loss_scale"]:
      scales.append(r["loss_scale"])
  print(f"\nskipped steps: {skipped}", file=out)
  print("loss scale trajectory: " + " -> ".join(f"{s:g}" for s in scales),
        file=out)
  print(f"loss: {trajectory[0]['loss']:.4f} -> {trajectory[-1]['loss']:.4f}",
        file=out)


def _print_replay(out: TextIO) -> None:
  """Our replay of the recorded steps 21-40 against TF 2.3.4's."""
  pairs = replay()
  agree = all(ours["skipped"] == theirs["skipped"]
              and ours["loss_scale"] == theirs["loss_scale"]
              and ours["counter"] == theirs["counter"]
              for ours, theirs in pairs)
  worst = max(abs(o["loss"] - t["loss"]) / abs(t["loss"]) for o, t in pairs)
  replay_skips = [o["step"] for o, _ in pairs if o["skipped"]]
  print(f"\nReplay of steps 21-40 from ckpt-20 (one replica): skipped "
        f"{replay_skips}, final scale {pairs[-1][0]['loss_scale']:g} counter "
        f"{pairs[-1][0]['counter']}; loss-scale decisions "
        f"{'identical to' if agree else 'DIFFERENT from'} TF 2.3.4's, "
        f"losses within {worst:.2%}.", file=out)


def main(argv: Optional[Sequence[str]] = None,
         out: Optional[TextIO] = None) -> int:
  """Runs the demo; returns the process exit status."""
  out = out or sys.stdout
  args = _parse_args(argv)
  devices = configure_devices()

  import tf_mixed_precision_compat  # pylint: disable=g-import-not-at-top
  tf_mixed_precision_compat.install()  # The line a TF 2.3 job adds.

  strategy = tf.distribute.MirroredStrategy(devices)
  result = resume(args.steps, args.spike_step or None, strategy=strategy)
  _print_resume(result, args.spike_step, out)
  if not args.no_replay:
    _print_replay(out)
  print("\nTF 2.3's DynamicLossScale by hand (float16 backward pass, "
        "increment_period=3):", file=out)
  _print_scale_dynamics(scale_dynamics(), out)
  if plot(result, args.plot):
    print(f"\nplot written to {args.plot}", file=out)
  else:
    print("\nmatplotlib is not installed: no plot (pip install matplotlib).",
          file=out)
  return 0


if __name__ == "__main__":
  sys.exit(main())
