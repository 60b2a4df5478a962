r"""Peak memory and step time of one contender, alone in this process.

Run by `bench_loss_scaling.py --only memory` once per contender, each in a fresh
interpreter, so that no contender inherits another's allocations. The step
is the one `bench_loss_scaling.py` times (a tanh MLP of `--vars` float32
variables of `--width`², Adam, batch 64); by default 16 variables of 2048²:
weights + Adam's two slots = 768 MiB of optimizer state.

Phases: (1) building the variables, the optimizer and its slots, and the
first call of the step (tracing, compiling); (2) `--steps` more steps, each
timed. The peak of each phase is measured on its own: on CPU the process's
resident-set high-water mark (`VmHWM`), reset through
`/proc/self/clear_refs` between the phases, or with `--source allocator`
the peak of TensorFlow's own CPU allocator (its BFC allocator, which
`TF_CPU_ALLOCATOR_USE_BFC=true` turns on; the probe restarts itself with
it): the bytes of tensors alive at once, without what the C library keeps
or the process maps, so it hardly moves between runs; on a GPU,
`tf.config.experimental.get_memory_info(device)["peak"]`, reset through
`reset_memory_stats`. Prints one JSON object.

Usage:

  python benchmarks/memory_probe.py --contender ours_dynamic --mode function
  python benchmarks/memory_probe.py --contender ours_dynamic --source allocator
  python benchmarks/memory_probe.py --contender bare --mode jit --device gpu
"""

import argparse
import gc
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import contenders  # pylint: disable=g-import-not-at-top,wrong-import-position
import tensorflow as tf  # pylint: disable=g-import-not-at-top,wrong-import-position



def _rss_kib(field):
  with open("/proc/self/status") as f:
    for line in f:
      if line.startswith(field + ":"):
        return int(line.split()[1])
  raise OSError(field)


class _CpuMemory:
  """The process's resident-set high-water mark, resettable (Linux)."""

  device = "/CPU:0"

  def describe(self):
    return "CPU (process peak RSS, VmHWM)"

  def reset(self):
    gc.collect()
    with open("/proc/self/clear_refs", "w") as f:
      f.write("5")

  def peak(self):
    return _rss_kib("VmHWM") * 1024

  def current(self):
    return _rss_kib("VmRSS") * 1024


class _AllocatorMemory:
  """TensorFlow's allocator statistics of one device."""

  def __init__(self, device, description):
    self.device = "/" + device
    self._device = device
    self._description = description

  def describe(self):
    return self._description

  def reset(self):
    gc.collect()
    tf.config.experimental.reset_memory_stats(self._device)

  def peak(self):
    return tf.config.experimental.get_memory_info(self._device)["peak"]

  def current(self):
    return tf.config.experimental.get_memory_info(self._device)["current"]


def _gpu_memory():
  gpus = tf.config.list_physical_devices("GPU")
  if not gpus:
    raise SystemExit("--device gpu: TensorFlow sees no GPU here.")
  name = tf.config.experimental.get_device_details(gpus[0]).get(
      "device_name", gpus[0].name)
  return _AllocatorMemory("GPU:0", f"GPU:0 {name} (get_memory_info peak)")


# Makes TensorFlow's CPU allocator a BFC allocator, which keeps statistics;
# read when TensorFlow starts.
_CPU_BFC = "TF_CPU_ALLOCATOR_USE_BFC"


def _memory(device, source):
  if device == "gpu":
    return _gpu_memory()
  if source == "allocator":
    return _AllocatorMemory(
        "CPU:0", "CPU (TensorFlow's BFC allocator peak, "
        f"{_CPU_BFC}=true)")
  return _CpuMemory()


def measure(contender, mode, num_vars, width, steps, device, source="rss"):
  """Builds and runs one contender's step; returns its figures as a dict."""
  memory = _memory(device, source)
  strategy = None
  if mode == "mirrored":
    devices = (["/gpu:0", "/gpu:1"] if device == "gpu" and len(
        tf.config.list_physical_devices("GPU")) > 1 else
               ["/gpu:0"] if device == "gpu" else ["/cpu:0", "/cpu:1"])
    strategy = tf.distribute.MirroredStrategy(devices)
  memory.reset()
  resting = memory.current()
  with tf.device(memory.device):
    values, x = contenders.initial_values(num_vars, width)
    step = contenders.make_step(contender, mode, values, x, strategy)
    if step is None:
      return {"contender": contender, "skipped": "tf_keras is not installed"}
    del values
    gc.collect()
    start = time.perf_counter()
    contenders.sync(step())
    first_s = time.perf_counter() - start
    first_peak = memory.peak()
    memory.reset()
    before_steps = memory.current()
    times = []
    for _ in range(steps):
      start = time.perf_counter()
      contenders.sync(step())
      times.append(time.perf_counter() - start)
    steps_peak = memory.peak()
  state = num_vars * width * width * 4 * 3
  return {
      "contender": contender, "mode": mode, "num_vars": num_vars,
      "width": width, "steps": steps, "device": memory.describe(),
      "optimizer_state_bytes": state, "resting_bytes": resting,
      "first_call_s": first_s, "first_phase_peak_bytes": first_peak,
      "before_steps_bytes": before_steps, "steps_peak_bytes": steps_peak,
      "step_ms": statistics.median(times) * 1e3,
      "source": "allocator" if device == "gpu" else source,
      "replicas": strategy.num_replicas_in_sync if strategy else 1,
      "keras": ("tf_keras" if os.environ.get("TF_USE_LEGACY_KERAS") == "1"
                else "keras3"),
  }


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--contender", required=True,
                      choices=contenders.MEMORY_CONTENDERS)
  parser.add_argument("--mode", default="function", choices=contenders.MODES)
  parser.add_argument("--vars", type=int, default=16)
  parser.add_argument("--width", type=int, default=2048)
  parser.add_argument("--steps", type=int, default=5)
  parser.add_argument("--device", default="cpu", choices=("cpu", "gpu"))
  parser.add_argument(
      "--source", default="rss", choices=("rss", "allocator"),
      help="on CPU: the process's peak RSS (default) or TensorFlow's "
      "allocator peak; a GPU has only its allocator's")
  args = parser.parse_args(argv)
  if args.vars < 1 or args.width < 1 or args.steps < 1:
    parser.error("--vars, --width and --steps must be at least 1")
  if (args.device == "cpu" and args.source == "allocator" and
      os.environ.get(_CPU_BFC) != "true"):
    # TensorFlow chose its CPU allocator when it started: start again.
    sys.stdout.flush()
    os.execve(sys.executable, [sys.executable, os.path.abspath(__file__)] +
              list(sys.argv[1:] if argv is None else argv),
              dict(os.environ, **{_CPU_BFC: "true"}))
  result = measure(args.contender, args.mode, args.vars, args.width,
                   args.steps, args.device, args.source)
  print(json.dumps(result))
  return result


if __name__ == "__main__":
  main()
