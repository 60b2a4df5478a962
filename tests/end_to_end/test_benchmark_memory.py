"""The benchmark's memory probes keep working (`--quick --only memory`).

Its own file, so that its fresh processes run beside the timing cells of
test_benchmark.py rather than after them; no figure is asserted beyond
what the report must hold.
"""

from tests.end_to_end.test_benchmark import _TF_KERAS, _run_quick


def test_quick_memory_run_reports_every_contender_in_its_own_process(
    tmp_path):
  results = _run_quick(tmp_path, "--only", "memory")
  assert results["cells"] == []
  assert results["run_order"] == [["memory", "function",
                                   results["settings"]["memory"][0]]]
  # Every contender in its own process, beside its step time.
  memory = results["memory"]["function"]
  assert set(memory) - {"tf_keras"} == {
      "bare", "floor_gated", "keras3", "ours_dynamic", "ours_fixed"}
  for name, probe in memory.items():
    if name == "tf_keras" and not _TF_KERAS:
      assert "skipped" in probe or "error" in probe
      continue
    assert probe["steps_peak_bytes"] > probe["optimizer_state_bytes"]
    assert probe["step_ms"] > 0 and "CPU" in probe["device"]
    assert probe["keras"] == ("tf_keras" if name == "tf_keras" else "keras3")
    assert "extra_bytes" in probe
    # On CPU a second fresh process measures TensorFlow's allocator peak,
    # on which the bound (per replica) is judged.
    assert probe["allocator"]["source"] == "allocator"
    assert "BFC" in probe["allocator"]["device"]
    assert probe["allocator"]["steps_peak_bytes"] > 0
    assert "allocator_extra_bytes" in probe
    state = probe["optimizer_state_bytes"]
    assert probe["bound_bytes"] == state // 3 + max(0.05 * state, 32 * 2**20)
  # The report (also printed) is in the JSON, with its device line.
  text = results["report"]
  assert "Peak memory, each contender alone in a fresh process" in text
  assert "allocator: extra over bare | within bound |" in text
  assert results["machine"]["device"].startswith("CPU")
  assert f"Device: {results['machine']['device']}." in text
  assert results["machine"]["tensorflow"]

