"""tools/migrate_corpus.py: the corpus table docs/migration.md publishes.

Run on a small corpus made here: counts by status, whether the output
compiles and migrates to itself, missing files, and the totals line.
"""

import importlib.util
import json
import os

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))


def _tool():
  spec = importlib.util.spec_from_file_location(
      "migrate_corpus", os.path.join(ROOT, "tools", "migrate_corpus.py"))
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


def test_table_counts_uses_and_reports_missing_files(tmp_path, capsys):
  tool = _tool()
  (tmp_path / "corpus" / "a__b").mkdir(parents=True)
  (tmp_path / "corpus" / "a__b" / "train.py").write_text(
      "import tensorflow as tf\n"
      "from tensorflow.keras.mixed_precision import experimental as mp\n"
      "mp.set_policy('mixed_float16')\n"
      "opt = mp.LossScaleOptimizer(tf.keras.optimizers.SGD(), 1000)\n")
  manifest = tmp_path / "manifest.json"
  manifest.write_text(json.dumps([
      {"repo": "a/b", "path": "train.py", "kind": "custom-loop"},
      {"repo": "a/b", "path": "gone.py", "kind": "fit"}]))
  assert tool.main(["--corpus", str(tmp_path / "corpus"), "--manifest",
                    str(manifest), "--markdown"]) == 0
  out = capsys.readouterr().out
  assert "| a/b | train.py | custom-loop | 2 | 1 | 1 | yes | yes |" in out
  assert "| a/b | gone.py | fit | missing |" in out
  assert out.strip().endswith(
      "**Totals**: files: 1, missing: 1, repos: 1, errors: 0, uses: 2, "
      "rewritten: 1, native: 0, manual: 1")


def test_a_failed_second_migration_counts_as_an_error(monkeypatch):
  tool = _tool()
  calls = []

  def fails_the_second_time(source):
    calls.append(source)
    if len(calls) == 2:
      raise KeyError("default_for_fp16")
    return source + "# migrated\n", []

  monkeypatch.setattr(tool, "migrate_source", fails_the_second_time)
  row = tool.measure("x = 1\n", "job.py")
  assert row["idempotent"] == "error: KeyError"
  rows = [{"repo": "a/b", "file": "job.py", "kind": "fit", **row}]
  assert ", errors: 1," in tool.table(rows, markdown=True)
