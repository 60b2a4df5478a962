"""The loss-scaling benchmark's report: markdown tables, derived figures.

Example:

  text = markdown(json.load(open("r1.json")))
"""

import os
import platform

from contenders import CONTENDERS, tf_keras
from timing import bound_bytes

import keras
import tensorflow as tf


def _mib(num_bytes, sign=True):
  return "" if num_bytes is None else (
      f"{num_bytes / 2**20:+.0f} MiB" if sign else
      f"{num_bytes / 2**20:.0f} MiB")


def memory_markdown(memory):
  """The memory table: each contender alone in a process."""
  lines = [""]
  first = next((r for m in memory.values() for r in m.values()
                if "device" in r), None)
  if first is None:
    return lines + ["Memory: no contender ran (see the JSON for errors)."]
  state = first["optimizer_state_bytes"]
  on_cpu = first.get("source", "rss") == "rss"
  lines.append(
      f"Peak memory, each contender alone in a fresh process "
      f"({first['num_vars']} variables of {first['width']}², Adam: "
      f"{state / 2**20:.0f} MiB of optimizer state, "
      f"{state / 3 / 2**20:.0f} MiB of gradients; {first['steps']} steps "
      f"after the first call), measured on {first['device']}. Peak of the "
      "steps (reset after the first call) and its extra over bare's; step "
      "time: median of the same steps, in the same process" +
      ("; allocator: the same contender again in another fresh process, "
       "TensorFlow's CPU allocator's peak (live tensors) over bare's:"
       if on_cpu else ":"))
  lines.append("")
  if on_cpu:
    lines.append("| mode | contender | step | peak RSS | extra over bare | "
                 "allocator: extra over bare | within bound |")
    lines.append("|---|---|---|---|---|---|---|")
  else:
    lines.append("| mode | contender | step | peak | extra over bare | "
                 "within bound |")
    lines.append("|---|---|---|---|---|---|")
  for mode, by_name in memory.items():
    for name, r in by_name.items():
      if "steps_peak_bytes" not in r:
        why = r.get("skipped") or "failed (see JSON)"
        lines.append(f"| {mode} | {name} | {why} |" + " |" * (
            4 if on_cpu else 3))
        continue
      # Judged on the allocator's figure where there is one: the process's
      # resident set moves by tens of MiB between runs.
      extra = r.get("allocator_extra_bytes", r.get("extra_bytes"))
      within = "" if extra is None or name == "bare" else (
          "yes" if extra <= r["bound_bytes"] else "**no**")
      cells = [mode, name, f"{r['step_ms']:.1f} ms",
               _mib(r["steps_peak_bytes"], sign=False),
               _mib(r.get("extra_bytes"))]
      if on_cpu:
        cells.append(_mib(r.get("allocator_extra_bytes")))
      cells.append(within)
      lines.append("| " + " | ".join(cells) + " |")
  lines.append("")
  lines.append(
      f"Bound over bare: the gradients ({state / 3 / 2**20:.0f} MiB), which "
      "an exact skip-on-overflow holds until the verdict, + max(5% of the "
      f"state, 32 MiB) = {bound_bytes(state) / 2**20:.0f} MiB" +
      (" (judged on the allocator's figure)." if on_cpu else "."))
  return lines


def _pct(s):
  return f"{100 * s['overhead']:+.1f}% ±{100 * s['overhead_se']:.1f}"


def _label(cell):
  if cell["workload"] == "fit":
    return f"fit (mixed_float16, {cell['num_vars']} vars)"
  return f"{cell['workload']} ({cell['num_vars']}x{cell['width']}²)"


def _time_table(results):
  """The step-time table of the non-session cells, with its footnote."""
  lines = []
  lines.append("Overhead = step time / bare step time - 1 (median over "
               "step-level interleaved repetitions, ± its standard error).")
  lines.append("")
  header = ["workload", "mode", "bare step"] + list(CONTENDERS[1:])
  lines.append("| " + " | ".join(header) + " |")
  lines.append("|" + "---|" * len(header))
  for cell in results["cells"]:
    if cell["mode"] == "session":
      continue
    c = cell["contenders"]
    bare = c["bare"]
    if cell["workload"] == "fit":
      base = f"{bare['step_ms']:.2f} ms ({bare['steps_per_s']:.0f} steps/s)"
    else:
      base = f"{bare['step_ms']:.2f} ms"
    row = [_label(cell), cell["mode"], base]
    for name in CONTENDERS[1:]:
      if name in c:
        row.append(_pct(c[name]))
      elif name in cell["notes"]:
        row.append("n/a¹")
      else:
        row.append("—")
    lines.append("| " + " | ".join(row) + " |")
  lines.append("")
  footnote = "— : not applicable (no floor or tf_keras run for `fit`)."
  reasons = sorted({f"{name} ({why})" for cell in results["cells"]
                    for name, why in cell["notes"].items()})
  if reasons:
    footnote = f"n/a¹: not measured: {'; '.join(reasons)}. " + footnote
  lines.append(footnote)
  return lines


def _extra_tables(results):
  """The tf.compat.v1, first-call and per-variable tables."""
  lines = []
  v1 = [c for c in results["cells"] if c["mode"] == "session"]
  if v1:
    lines.append("")
    lines.append("tf.compat.v1 sessions: `MixedPrecisionLossScaleOptimizer` "
                 "(dynamic) around `tf.compat.v1.train.AdamOptimizer`.")
    lines.append("")
    lines.append("| workload | bare v1 Adam step | ours v1 overhead |")
    lines.append("|---|---|---|")
    for cell in v1:
      c = cell["contenders"]
      lines.append(f"| {_label(cell)} | {c['v1_bare']['step_ms']:.2f} ms | "
                   f"{_pct(c['v1_ours'])} |")
  if results.get("trace"):
    t = results["trace"]
    lines.append("")
    lines.append(f"First call (trace + build) with {t['num_vars']} variables, "
                 "tf.function:")
    lines.append("")
    lines.append("| contender | first call | / bare |")
    lines.append("|---|---|---|")
    for name, seconds in t["first_call_s"].items():
      lines.append(f"| {name} | {seconds:.2f} s | "
                   f"{seconds / t['first_call_s']['bare']:.2f}x |")
  if results.get("per_variable"):
    lines.append("")
    lines.append("Overhead per variable (µs per step per variable, "
                 "scaling workload):")
    lines.append("")
    pv = results["per_variable"]
    sizes = sorted({int(k) for m in pv.values() for k in m["ours_dynamic"]})
    lines.append("| mode | contender | " +
                 " | ".join(f"{s} vars" for s in sizes) + " |")
    lines.append("|---|---|" + "---|" * len(sizes))
    for mode, by_name in pv.items():
      for name in ("floor", "floor_gated", "floor_dynamic", "floor_cond",
                   "keras3", "ours_dynamic", "ours_fixed"):
        if name not in by_name:
          continue
        lines.append(f"| {mode} | {name} | " + " | ".join(
            f"{by_name[name].get(str(s), float('nan')):.2f}" for s in sizes) +
                     " |")
  return lines


def markdown(results):
  """The report tables, as markdown text."""
  lines = _time_table(results) + _extra_tables(results)
  if results.get("memory"):
    lines.extend(memory_markdown(results["memory"]))
  return "\n".join(lines)


def derived(results):
  """Trace-time and per-variable summaries of the cells."""
  cells = results["cells"]
  scaling = [
      c for c in cells if c["workload"] == "scaling" and c["mode"] != "session"
  ]
  if scaling:
    biggest = max(c["num_vars"] for c in scaling)
    for c in scaling:
      if c["num_vars"] == biggest and c["mode"] == "function":
        results["trace"] = {
            "num_vars": biggest,
            "first_call_s": {
                n: s["first_call_s"] for n, s in c["contenders"].items()
            },
        }
    per_variable = {}
    for c in scaling:
      bare_ms = c["contenders"]["bare"]["step_ms"]
      for name, s in c["contenders"].items():
        if name == "bare":
          continue
        extra_us = s["overhead"] * bare_ms * 1e3
        per_variable.setdefault(c["mode"], {}).setdefault(
            name, {})[str(c["num_vars"])] = extra_us / c["num_vars"]
    results["per_variable"] = per_variable


def device(kind):
  """What the steps run on, as printed."""
  if kind == "gpu":
    gpu = tf.config.list_physical_devices("GPU")[0]
    name = tf.config.experimental.get_device_details(gpu).get(
        "device_name", gpu.name)
    return f"GPU:0 ({name})"
  return f"CPU ({os.cpu_count()} CPUs; 2 logical TensorFlow CPU devices)"


def mirrored_devices(kind):
  if kind == "gpu":
    count = len(tf.config.list_logical_devices("GPU"))
    return [f"/gpu:{i}" for i in range(min(count, 2))]
  return ["/cpu:0", "/cpu:1"]


def machine():
  model = platform.processor()
  try:
    with open("/proc/cpuinfo") as f:
      for line in f:
        if line.startswith("model name"):
          model = line.split(":", 1)[1].strip()
          break
  except OSError:
    pass
  return {
      "cpu_model": model,
      "cpu_count": os.cpu_count(),
      "tensorflow": tf.__version__,
      "keras": keras.__version__,
      "python": platform.python_version(),
      "tf_keras": getattr(tf_keras, "__version__", None),
  }


def footer(results):
  """The device and machine lines under the tables."""
  m = results["machine"]
  return (f"Device: {m['device']}.\n"
          f"Machine: {m['cpu_count']} CPUs, {m['cpu_model']}; TensorFlow "
          f"{m['tensorflow']}, Keras {m['keras']}; run took "
          f"{results['wall_s']:.0f} s.")
