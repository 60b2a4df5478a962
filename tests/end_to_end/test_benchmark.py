"""The loss-scaling benchmark keeps working (`--quick`); no timing asserted."""

import importlib.util
import json
import os
import subprocess
import sys

import numpy as np
import pytest
from tests import testing

ROOT = testing.REPO_ROOT
SCRIPT = os.path.join(ROOT, "benchmarks", "bench_loss_scaling.py")

# The benchmark's contenders, in the order it reports them.
_ORDER = ("bare", "floor", "floor_gated", "floor_dynamic", "floor_cond",
          "keras3", "ours_dynamic", "ours_fixed", "tf_keras")
_CONTENDERS = set(_ORDER) - {"tf_keras"}  # tf_keras is optional.
_FIT_CONTENDERS = {"bare", "keras3", "ours_dynamic", "ours_fixed"}
_TF_KERAS = importlib.util.find_spec("tf_keras") is not None


def _run_quick(tmp_path, *args):
  out = tmp_path / "results.json"
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
  proc = subprocess.run([sys.executable, SCRIPT, "--quick", "--out",
                         str(out), *args], capture_output=True, text=True,
                        env=env, check=False)
  assert proc.returncode == 0, proc.stderr[-3000:]
  with open(out) as f:
    return json.load(f)


# The quick run's cells: every mode once (`many` runs them all), every
# workload in tf.function, fit also with replicas.
_QUICK_MODES = {"wide": {"function"}, "many": {"eager", "function", "jit",
                                               "mirrored"},
                "scaling": {"function"}, "fit": {"function", "mirrored"}}


def test_quick_run_reports_every_cell(tmp_path):
  # The memory probes, each contender's own processes, are the other file's.
  results = _run_quick(tmp_path, "--only", "wide,many,scaling,fit,v1")
  cells = {(c["workload"], c["mode"], c["num_vars"]) for c in results["cells"]}
  settings = results["settings"]
  wide_vars, many_vars = settings["wide"][0], settings["many"][0]
  expected = {("wide", m, wide_vars) for m in _QUICK_MODES["wide"]}
  expected |= {("many", m, many_vars) for m in _QUICK_MODES["many"]}
  expected |= {("scaling", m, n) for m in _QUICK_MODES["scaling"]
               for n, _ in settings["scaling"]}
  expected |= {("wide", "session", wide_vars), ("many", "session", many_vars)}
  assert expected <= cells

  for cell in results["cells"]:
    contenders = cell["contenders"]
    if cell["mode"] == "session":
      assert set(contenders) == {"v1_bare", "v1_ours"}
      assert contenders["v1_bare"]["overhead"] == 0.
    elif cell["workload"] == "fit":
      assert set(contenders) == _FIT_CONTENDERS
      assert contenders["bare"]["steps_per_s"] > 0
    else:
      # tf_keras is optional: measured when importable, else a note says so;
      # floor_cond is not measured with replicas, and a note says why.
      replicas = cell["mode"] == "mirrored"
      expected = _CONTENDERS - ({"floor_cond"} if replicas else set())
      assert set(contenders) - {"tf_keras"} == expected
      assert ("tf_keras" in contenders) == _TF_KERAS
      assert set(cell["notes"]) == (
          ({"floor_cond"} if replicas else set()) |
          (set() if _TF_KERAS else {"tf_keras"}))
      # Every instance built every contender once, in its own order; the
      # results are listed in the benchmark's order all the same.
      assert len(cell["build_orders"]) == cell["instances"]
      for order in cell["build_orders"]:
        assert sorted(order) == sorted(_ORDER)
      assert list(contenders) == [n for n in _ORDER if n in contenders]
    base = next(c for n, c in contenders.items() if n.endswith("bare"))
    for stats in contenders.values():
      assert stats["step_ms"] > 0
      assert len(stats["samples_ms"]) == cell["reps"]
      assert len(stats["instance_overheads"]) == cell["instances"]
      assert stats["step_ms_iqr"][0] <= stats["step_ms"] <= (
          stats["step_ms_iqr"][1])
      assert stats["first_call_s"] > 0
      if "samples_ms" not in base:
        continue
      # The paired overhead is summarised from the per-repetition ratios:
      # within their range, and zero (with no spread) for the baseline.
      ratios = (np.asarray(stats["samples_ms"]) /
                np.asarray(base["samples_ms"]))
      assert ratios.min() - 1 - 1e-9 <= stats["overhead"] <= (
          ratios.max() - 1 + 1e-9)
      assert 0 <= stats["overhead_spread"] <= (
          (ratios.max() - ratios.min()) / 2 + 1e-9)
      assert 0 <= stats["overhead_se"] <= ratios.max() - ratios.min() + 1e-9
    if "samples_ms" in base:
      assert base["overhead"] == base["overhead_spread"] == 0.

  fit_modes = {c["mode"] for c in results["cells"] if c["workload"] == "fit"}
  assert fit_modes == _QUICK_MODES["fit"]

  biggest = settings["scaling"][-1][0]
  assert results["trace"]["num_vars"] == biggest
  traced = set(results["trace"]["first_call_s"])
  assert traced - {"tf_keras"} == _CONTENDERS
  assert ("tf_keras" in traced) == _TF_KERAS
  for mode in _QUICK_MODES["scaling"]:
    per_var = results["per_variable"][mode]["ours_dynamic"]
    assert set(per_var) == {str(n) for n, _ in settings["scaling"]}
  text = results["report"]
  assert results["machine"]["device"].startswith("CPU")
  assert f"Device: {results['machine']['device']}." in text
  assert results["machine"]["tensorflow"]

  # The table has a row per non-session cell and a column per contender.
  header = next(line for line in text.splitlines()
                if line.startswith("| workload | mode |"))
  for name in ("floor", "keras3", "ours_dynamic", "ours_fixed", "tf_keras"):
    assert name in header
  rows = [line for line in text.splitlines()
          if line.startswith("| ") and ("ms" in line) and "%" in line]
  assert len(rows) >= sum(1 for c in results["cells"]
                          if c["mode"] != "session")
  assert "First call (trace + build)" in text
  assert "n/a¹: not measured: floor_cond (with replicas" in text

  # The mirrored cells run last, so that no MirroredStrategy exists while
  # the others are measured; the results keep the table's order. (The
  # memory probes, own processes, are listed after the cells they follow.)
  ran = [tuple(entry) for entry in results["run_order"]
         if entry[0] != "memory"]
  cells = [(c["workload"], c["mode"], c["num_vars"])
           for c in results["cells"]]
  mirrored = sum(mode == "mirrored" for _, mode, _ in cells)
  assert mirrored
  assert [mode for _, mode, _ in ran[-mirrored:]] == ["mirrored"] * mirrored
  assert [c[:2] for c in cells[:3]] == [("wide", "function"),
                                        ("many", "eager"),
                                        ("many", "function")]


def test_a_selection_without_cells_reports_an_empty_table(tmp_path):
  # "wide" has no eager cell.
  results = _run_quick(tmp_path, "--only", "wide", "--modes", "eager")
  assert results["cells"] == [] and "partial" not in results


_GATE_COSTS_PROBE = """
import json, sys
sys.path.insert(0, sys.argv[1])
import gate_costs
from tf_mixed_precision_compat.optimizers import _gated_apply
steps = gate_costs.make_steps(3, 8)
types = {name: sorted({op.type for op in
                       step.get_concrete_function().graph.get_operations()})
         for name, step in steps.items()}
types["after"] = [_gated_apply._restore_unless.__name__,
                  _gated_apply.apply_when_finite.__name__,
                  _gated_apply.default_config().out_of_place_min_elements]
print(json.dumps(types))
"""

_PROFILE_PROBE = """
import json, sys
sys.path.insert(0, sys.argv[1])
import gate_costs
steps = gate_costs.make_steps(3, 8, ("bare", "ours_dynamic", "out_of_place"))
profiles = gate_costs.profile(steps, reps=4, warmup=1)
print(json.dumps({name: {t: c for t, (_, c) in p.items()}
                  for name, p in profiles.items()}))
"""


# Runs every probe in one interpreter, each in its own namespace, and prints
# {name: {"result": its last printed line, parsed} or {"error": traceback}}.
_RUN_PROBES = """
import contextlib, io, json, sys, traceback
results = {}
for name, source in json.loads(sys.stdin.read()):
  out = io.StringIO()
  try:
    with contextlib.redirect_stdout(out):
      exec(compile(source, name, "exec"), {"__name__": "__main__"})
    results[name] = {"result": json.loads(out.getvalue().splitlines()[-1])}
  except BaseException:  # pylint: disable=broad-except
    results[name] = {"error": traceback.format_exc()[-3000:]}
print(json.dumps(results))
"""


@pytest.fixture(scope="module")
def probes():
  """Each probe's result, from one fresh interpreter for them all.

  Fresh, as the benchmark modules set TF's log level and devices when
  imported, which other tests in this process would see. The probes share
  it: each builds its own steps, and every one imports the benchmark (which
  sets the devices) before TensorFlow starts; the MirroredStrategy one runs
  last, as the benchmark runs its mirrored cells.
  """
  sources = [("interleave", _INTERLEAVE_PROBE),
             ("gate_costs", _GATE_COSTS_PROBE),
             ("scale_update", _SCALE_UPDATE_PROBE),
             ("profile", _PROFILE_PROBE),
             ("dynamic_floors", _DYNAMIC_FLOORS_PROBE)]
  proc = subprocess.run(
      [sys.executable, "-c", _RUN_PROBES, os.path.join(ROOT, "benchmarks")],
      input=json.dumps(sources), capture_output=True, text=True, check=False,
      env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
  assert proc.returncode == 0, proc.stderr[-3000:]
  return json.loads(proc.stdout.splitlines()[-1])


def _probe(probes, name):
  """The probe's result; its traceback if it raised."""
  assert "error" not in probes[name], probes[name]["error"]
  return probes[name]["result"]


def test_gate_costs_variants_differ_only_in_their_part(probes):
  types = _probe(probes, "gate_costs")
  ours, no_restore, nogate = (
      set(types[n]) for n in ("ours_dynamic", "no_restore", "dyn_nogate"))
  assert "If" in ours and "If" not in no_restore
  assert ours - {"If"} == no_restore
  # Without the gate the inner optimizer applies unconditionally: neither
  # the restoring `If` nor TF 2.4's conditional (a `StatelessIf` or `If`).
  assert not {"If", "StatelessIf"} & nogate
  assert "IsFinite" in nogate and "IsFinite" not in set(types["bare"])
  # The stand-ins are gone afterwards.
  assert types["after"] == ["_restore_unless", "apply_when_finite", 1 << 14]


_SCALE_UPDATE_PROBE = """
import json, sys
sys.path.insert(0, sys.argv[1])
import gate_costs
from tf_mixed_precision_compat.loss_scale import dynamic_state
out = {}
for mode in ("function", "jit"):
  steps = gate_costs.make_steps(3, 8, ("ours_dynamic", "no_scale_update"),
                                mode)
  for name, step in steps.items():
    fn = step.get_concrete_function()
    out[mode + "/" + name] = {
        "types": sorted({op.type for op in fn.graph.get_operations()}),
        "xla": fn.function_def.attr["_XlaMustCompile"].b}
out["after"] = dynamic_state.update_variables.__name__
print(json.dumps(out))
"""


def test_no_scale_update_drops_only_the_update_in_either_mode(probes):
  steps = _probe(probes, "scale_update")
  for mode in ("function", "jit"):
    ours = steps[f"{mode}/ours_dynamic"]
    check_only = steps[f"{mode}/no_scale_update"]
    assert ours["xla"] == check_only["xla"] == (mode == "jit")
    # The scale's shrink (`divide_no_nan`) goes with the update; the finite
    # check and the gated apply stay.
    assert "DivNoNan" in ours["types"]
    assert "DivNoNan" not in check_only["types"]
    assert "IsFinite" in check_only["types"]
  assert steps["after"] == "update_variables"


_DYNAMIC_FLOORS_PROBE = """
import contextlib, json, sys
sys.path.insert(0, sys.argv[1])
import numpy as np
import tensorflow as tf
import contenders as bench
values, x = bench.initial_values(3, 8)
out = {}
# The steps are built here rather than by bench.make_step, which keeps the
# optimizer (and so the scale and counter read below) to itself.
for name in ("floor_dynamic", "floor_cond"):
  for mode in ("eager", "function", "jit", "mirrored"):
    if bench.unavailable(name, mode):
      continue
    strategy = (tf.distribute.MirroredStrategy(["CPU:0", "CPU:1"])
                if mode == "mirrored" else None)
    scope = strategy.scope() if strategy else contextlib.nullcontext()
    with scope:
      opt = bench.make_optimizer(name)
      variables = [tf.Variable(v) for v in values]
      opt.build(variables)
    inputs = tf.Variable(x)
    body = lambda: bench.step_body(name, opt, variables, inputs,
                                    xla=(mode == "jit"))
    if mode == "mirrored":
      step = tf.function(lambda: strategy.run(body))
    elif mode == "eager":
      step = body
    else:
      step = tf.function(body, jit_compile=(mode == "jit"))
    seen = []
    for value in (x, x, np.full_like(x, np.inf)):
      inputs.assign(value)
      before = [v.numpy() for v in variables + opt.adam.variables]
      step()
      after = [v.numpy() for v in variables + opt.adam.variables]
      changed = [not np.array_equal(b, a, equal_nan=True)
                 for b, a in zip(before, after)]
      seen.append([float(opt.scale.numpy()), int(opt.good_steps.numpy()),
                   sum(changed)])
    out[f"{name} {mode}"] = {"seen": seen,
                             "iterations": int(opt.adam.iterations.numpy()),
                             "states": len(changed)}
print(json.dumps(out))
"""


def test_dynamic_floors_update_their_scale_as_tf24_did_in_every_mode(
    probes):
  seen = _probe(probes, "dynamic_floors")
  modes = {"floor_dynamic": ("eager", "function", "jit", "mirrored"),
           "floor_cond": ("eager", "function", "jit")}
  assert set(seen) == {f"{n} {m}" for n, ms in modes.items() for m in ms}
  for key, run in seen.items():
    every = run["states"]  # variables, iterations, slots, learning rate
    # Two finite steps count and change every state but the learning rate;
    # the overflowing one halves the scale and restarts the count, as TF 2.4
    # did. floor_dynamic applies it all the same (timing only); floor_cond
    # skips it, counting the step as TF 2.4.4 did.
    on_overflow = 1 if key.startswith("floor_cond") else every - 1
    assert run["seen"] == [[2.**15, 1, every - 1], [2.**15, 2, every - 1],
                           [2.**14, 0, on_overflow]], key
    assert run["iterations"] == 3, key


def test_profile_of_xla_steps_is_refused_by_name():
  proc = subprocess.run(
      [sys.executable, os.path.join(ROOT, "benchmarks", "gate_costs.py"),
       "--mode", "jit", "--profile", "--reps", "1"],
      capture_output=True, text=True, check=False,
      env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
  assert proc.returncode == 2
  assert "--profile: tf.function steps only (--mode function)" in proc.stderr


def test_profile_attributes_every_kernel_to_its_own_step(probes):
  # Ops per step by type, from interleaved profiled calls: exact counts,
  # which attributing a kernel to the wrong call would change.
  counts = _probe(probes, "profile")
  bare, ours, out_of_place = (
      counts[n] for n in ("bare", "ours_dynamic", "out_of_place"))
  # Adam over 3 variables: m and v added to, the variable subtracted from.
  assert bare["AssignAddVariableOp"] == 6
  assert bare["AssignSubVariableOp"] == 3
  assert "If" not in bare and "IsFinite" not in bare
  # Ours: the same writes in place, one restoring `If` (9 tensors, one
  # chunk), a finite check per gradient and one of the grown scale.
  assert ours["AssignAddVariableOp"] == 6 and ours["If"] == 1
  assert ours["IsFinite"] == 3 + 1
  # Out of place: every write an assign, plus the scale, counter and
  # iterations updates ours also makes.
  assert "AssignAddVariableOp" not in out_of_place
  assert out_of_place["AssignVariableOp"] == ours["AssignVariableOp"] + 9


def test_reps_below_one_is_refused():
  proc = subprocess.run([sys.executable, SCRIPT, "--reps", "0"],
                        capture_output=True, text=True, check=False,
                        env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
  assert proc.returncode == 2
  assert "--reps must be at least 1, got 0" in proc.stderr


def test_device_gpu_without_a_gpu_is_refused_by_name():
  # No GPU is lent here: the command a GPU owner runs must at least say why
  # it cannot run, rather than measure the CPU under a GPU heading.
  probe = os.path.join(ROOT, "benchmarks", "memory_probe.py")
  for command in ([SCRIPT, "--only", "memory", "--device", "gpu"],
                  [probe, "--contender", "bare", "--device", "gpu"]):
    proc = subprocess.run([sys.executable] + command, capture_output=True,
                          text=True, check=False,
                          env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2",
                                   CUDA_VISIBLE_DEVICES=""))
    assert proc.returncode != 0
    assert "--device gpu: TensorFlow sees no GPU here" in proc.stderr


def test_instances_are_combined_per_repetition_against_bare(tmp_path):
  out = tmp_path / "results.json"
  proc = subprocess.run(
      [sys.executable, SCRIPT, "--quick", "--only", "scaling", "--modes",
       "function", "--instances", "2", "--reps", "4", "--out", str(out)],
      capture_output=True, text=True, check=False,
      env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
  assert proc.returncode == 0, proc.stderr[-3000:]
  with open(out) as f:
    cells = json.load(f)["cells"]
  assert cells and all(c["instances"] == 2 and c["reps"] == 4 for c in cells)
  for cell in cells:
    for stats in cell["contenders"].values():
      assert len(stats["instance_overheads"]) == 2
      assert len(stats["samples_ms"]) == 4
    # Bare's time in a repetition is the median (here the mean) of its two
    # instances, so their ratios to it are r and 2 - r, and so are their
    # medians.
    assert sum(cell["contenders"]["bare"]["instance_overheads"]) == (
        pytest.approx(0., abs=1e-9))


_INTERLEAVE_PROBE = """
import json, sys
sys.path.insert(0, sys.argv[1])
import timing as bench
calls = []
steps = {k: (lambda k=k: calls.append(k)) for k in "abcd"}
times = bench.interleave_steps(steps, reps=30, warmup=2)
print(json.dumps({"calls": calls, "lengths": {k: len(v) for k, v in
                                              times.items()}}))
"""


def test_interleaving_calls_each_step_once_per_repetition_in_varying_order(
    probes):
  probe = _probe(probes, "interleave")
  calls = probe["calls"]
  assert probe["lengths"] == {k: 30 for k in "abcd"}
  assert len(calls) == 32 * 4
  rounds = [calls[i:i + 4] for i in range(0, len(calls), 4)]
  assert all(sorted(r) == list("abcd") for r in rounds)
  # No step always runs right after the same other step.
  for step in "abcd":
    before = {r[r.index(step) - 1] for r in rounds if r.index(step) > 0}
    assert len(before) > 1


def _pool_runs_module():
  spec = importlib.util.spec_from_file_location(
      "pool_runs", os.path.join(ROOT, "benchmarks", "pool_runs.py"))
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


def _run_result(overheads, extra_cell=False):
  def cell(workload, mode, contenders):
    return {"workload": workload, "mode": mode, "num_vars": 10, "width": 64,
            "contenders": {n: {"overhead": o} for n, o in contenders.items()}}
  cells = [cell("wide", "jit", overheads),
           cell("wide", "session", {"v1_bare": 0., "v1_ours": .2})]
  if extra_cell:
    cells.append(cell("many", "jit", overheads))
  return {"cells": cells}


def test_pool_runs_judges_ours_over_runs_cell_by_cell(tmp_path, capsys):
  pool_runs = _pool_runs_module()
  runs = [_run_result({"ours_dynamic": .05, "floor_gated": .03}, True),
          _run_result({"ours_dynamic": .02, "floor_gated": .03}),
          _run_result({"ours_dynamic": .06, "floor_gated": .03,
                       "floor_dynamic": .01})]
  pooled = pool_runs.pool(runs, against=("floor_gated", "floor_dynamic"))
  # Only the cell every run has; session cells are no contenders' cells;
  # a reference one run lacks is left out.
  assert [e["cell"] for e in pooled] == [("wide", "jit", 10, 64)]
  entry = pooled[0]
  assert "floor_dynamic" not in entry
  assert entry["floor_gated"]["diffs"] == pytest.approx([2., -1., 3.])
  assert entry["floor_gated"]["mean"] == pytest.approx(4. / 3)
  assert entry["floor_gated"]["se"] == pytest.approx(
      np.std([2., -1., 3.], ddof=1) / np.sqrt(3))
  assert entry["floor_gated"]["above"] == 2

  paths = []
  for index, run in enumerate(runs):
    paths.append(str(tmp_path / f"r{index}.json"))
    with open(paths[-1], "w") as f:
      json.dump(run, f)
  assert pool_runs.main(paths + ["--against", "floor_gated,floor_dynamic"]) == 0
  table = capsys.readouterr().out
  assert "| wide (10x64²) | jit | +1.3 ±1.2 (2/3) | — |" in table
  with pytest.raises(SystemExit):
    pool_runs.main(paths[:1] + ["--against", ","])
  assert "--against: name at least one contender" in capsys.readouterr().err
