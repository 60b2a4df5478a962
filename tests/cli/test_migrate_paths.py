"""`migrate` where users run it: directory trees, notebooks, a report file.

A tree is migrated in place or copied to `--outtree` (every other file too,
the input untouched); a notebook's code cells are migrated as one module
(an import in one cell, its use in another), its magics, markdown, outputs
and metadata kept; `--report` writes every use to a file. The migrated
notebook's code runs without the package, and a real job's reduction (TF's
own guide notebook) migrated as a notebook runs as its migrated file does.
"""

import ast
import json
import os
import shutil
import subprocess

import pytest

from tests.cli import job_runs
from tests.cli import test_reductions
from tf_mixed_precision_compat.cli import _notebook
from tf_mixed_precision_compat.cli import main

JOB = ("import tensorflow as tf\n"
       "opt = tf.keras.mixed_precision.experimental.LossScaleOptimizer(\n"
       "    tf.keras.optimizers.SGD(), 'dynamic')\n")
CELLS = [
    {"cell_type": "markdown", "metadata": {}, "source": ["# Mixed precision"]},
    {"cell_type": "code", "execution_count": 1, "metadata": {"id": "imports"},
     "outputs": [], "source": [
         "%matplotlib inline\n", "import tensorflow as tf\n",
         "from tensorflow.keras.mixed_precision import experimental as "
         "mixed_precision"]},
    {"cell_type": "code", "execution_count": 2, "metadata": {},
     "outputs": [{"output_type": "stream", "name": "stdout",
                  "text": ["mixed_float16\n"]}],
     "source": ["policy = mixed_precision.Policy('mixed_float16')\n",
                "mixed_precision.set_policy(policy)\n",
                "print(policy.name)"]},
    {"cell_type": "code", "execution_count": 3, "metadata": {},
     "outputs": [], "source": [
         "!nvidia-smi -L\n",
         "opt = mixed_precision.LossScaleOptimizer(\n",
         "    tf.keras.optimizers.SGD(), loss_scale='dynamic')\n",
         "print(type(opt).__name__)\n"]},
]
NOTEBOOK = {"cells": CELLS, "metadata": {"kernelspec": {"name": "python3"}},
            "nbformat": 4, "nbformat_minor": 5}


def _tree(root):
  os.makedirs(root / "trainer" / "utils")
  os.makedirs(root / ".git")
  (root / "trainer" / "utils" / "opt.py").write_text(JOB)
  (root / "trainer" / "data.csv").write_text("x,y\n1,2\n")
  (root / ".git" / "old.py").write_text(JOB)  # Hidden: left out.
  (root / "guide.ipynb").write_text(json.dumps(NOTEBOOK, indent=1) + "\n")
  return root


def _files(root):
  return {os.path.relpath(os.path.join(d, f), root): open(
      os.path.join(d, f), "rb").read()
          for d, _, files in os.walk(root) for f in files}


def test_a_tree_in_place(capsys, tmp_path):
  root = _tree(tmp_path / "job")
  assert main(["migrate", str(root), "--write"]) == 0
  out = capsys.readouterr().out
  assert "opt.py: 1 uses: 1 rewritten" in out
  assert "guide.ipynb: 3 uses: 3 rewritten" in out
  assert "old.py" not in out
  files = _files(root)
  assert b"keras.optimizers.LossScaleOptimizer" in files[
      os.path.join("trainer", "utils", "opt.py")]
  assert files[os.path.join(".git", "old.py")] == JOB.encode()
  assert files[os.path.join("trainer", "data.csv")] == b"x,y\n1,2\n"


def test_outtree_copies_and_leaves_the_input(capsys, tmp_path):
  root = _tree(tmp_path / "job")
  before = _files(root)
  out = tmp_path / "migrated"
  report = tmp_path / "report.txt"
  assert main(["migrate", str(root), "--outtree", str(out),
               "--report", str(report)]) == 0
  assert _files(root) == before
  after = _files(out)
  assert set(after) == set(before)  # Every other file copied too.
  assert after[os.path.join("trainer", "data.csv")] == before[
      os.path.join("trainer", "data.csv")]
  assert after[os.path.join("trainer", "utils", "opt.py")] != before[
      os.path.join("trainer", "utils", "opt.py")]
  text = report.read_text()
  # The report file lists every use with its replacement (as --verbose).
  assert text.count("[rewritten]") == 4
  assert "-> keras.optimizers.LossScaleOptimizer" in text
  assert text.endswith("\n4 uses, 0 need manual work\n")
  # The screen keeps its one line per file.
  assert "[rewritten]" not in capsys.readouterr().out


@pytest.mark.parametrize("argv, words", [
    (["--outtree", "{out}", "{job}", "{job}"], "exactly one input directory"),
    (["--outtree", "{job}/inner", "{job}"], "must not be inside"),
    (["--outtree", "{job}/trainer", "{job}"], "is not an empty directory"),
])
def test_outtree_usage_errors(capsys, tmp_path, argv, words):
  root = _tree(tmp_path / "job")
  before = _files(root)
  args = [a.format(job=root, out=tmp_path / "out") for a in argv]
  assert main(["migrate", *args]) == 2
  assert words in capsys.readouterr().err
  assert _files(root) == before


def test_a_notebook_keeps_its_cells_outputs_and_magics(capsys, tmp_path):
  path = tmp_path / "guide.ipynb"
  path.write_text(json.dumps(NOTEBOOK, indent=1) + "\n")
  assert main(["migrate", str(path), "--write", "--json"]) == 0
  findings = json.loads(capsys.readouterr().out)[str(path)]
  # Where each use is: the cell (1-based, as Jupyter shows them) and its
  # line in that cell.
  assert [(f["cell"], f["line"], f["status"]) for f in findings] == [
      (3, 1, "rewrite"), (3, 2, "rewrite"), (4, 2, "rewrite")]
  notebook = json.loads(path.read_text())
  cells = notebook["cells"]
  assert notebook["metadata"] == NOTEBOOK["metadata"]
  assert cells[0] == CELLS[0]
  assert cells[2]["outputs"] == CELLS[2]["outputs"]
  assert cells[1]["metadata"] == {"id": "imports"}
  sources = ["".join(c["source"]) for c in cells]
  assert sources[1].startswith("%matplotlib inline\n")
  assert "experimental" not in "".join(sources)
  assert sources[3].startswith("!nvidia-smi -L\n")
  assert sources[3].endswith("\n") and not sources[2].endswith("\n")
  # Again: nothing changes.
  text = path.read_text()
  assert main(["migrate", str(path), "--write"]) == 0
  assert path.read_text() == text
  # Its code (magics aside) runs on Keras 3 without the package.
  script = tmp_path / "cells.py"
  script.write_text("\n".join(
      line for s in sources[1:] for line in s.splitlines()
      if not line.startswith(("%", "!"))) + "\n")
  argv, env = job_runs.command(str(script), [], with_package=False)
  result = subprocess.run(argv, capture_output=True, text=True, env=env,
                          check=False)
  assert result.returncode == 0, result.stderr[-2000:]
  assert result.stdout.split() == ["mixed_float16", "LossScaleOptimizer"]


def test_a_file_that_is_no_notebook(capsys, tmp_path):
  path = tmp_path / "broken.ipynb"
  path.write_text("{not json")
  assert main(["migrate", str(path)]) == 3
  assert "not a notebook" in capsys.readouterr().err


def test_cells_round_trip_without_changes():
  source, masked = _notebook.to_module(CELLS)
  assert _notebook.from_module(source, CELLS, masked) == CELLS


def _as_notebook(source, cells=4):
  """`source` split at top-level statements into `cells` code cells, with
  a magic line in the first, as TF's guide notebook is laid out."""
  starts = sorted({node.lineno - 1 for node in ast.parse(source).body})
  cuts = [starts[round(i * len(starts) / cells)] for i in range(1, cells)]
  lines = source.splitlines()
  bounds = [0] + cuts + [len(lines)]
  texts = ["\n".join(lines[a:b]) for a, b in zip(bounds, bounds[1:])]
  texts[0] = "%load_ext autoreload\n" + texts[0]
  return {"cells": [{"cell_type": "code", "execution_count": None,
                     "metadata": {}, "outputs": [], "source": text}
                    for text in texts],
          "metadata": {}, "nbformat": 4, "nbformat_minor": 5}


def test_a_reduction_as_a_notebook_migrates_and_runs_as_its_file(tmp_path):
  # TF 2.3's own mixed-precision guide (a notebook), reduced in
  # tests/cli/reductions: cut into cells (the import in the first, its uses
  # in later ones), migrated as a notebook, it becomes the migrated file's
  # code line for line, and runs without the package as that file does,
  # bit for bit (test_reductions.py holds that run against TF 2.3.4's and
  # TF 2.4.4's records).
  name = "tf_guide_r23_custom_loop"
  folder = tmp_path / "job"
  shutil.copytree(test_reductions.REDUCTIONS, folder)
  source = (folder / f"{name}.py").read_text()
  notebook = folder / f"{name}.ipynb"
  notebook.write_text(json.dumps(_as_notebook(source), indent=1) + "\n")
  assert main(["migrate", str(folder / f"{name}.py"), str(notebook),
               "--write"]) == 0
  cells = [c["source"] for c in json.loads(notebook.read_text())["cells"]]
  assert cells[0].startswith("%load_ext autoreload\n")
  code = "\n".join(cells)[len("%load_ext autoreload\n"):]
  migrated = (folder / f"{name}.py").read_text()
  assert code.rstrip("\n") == migrated.rstrip("\n")
  assert "mixed_precision.experimental" not in code
  (folder / "from_notebook.py").write_text(code)
  runs = []
  for script in (f"{name}.py", "from_notebook.py"):
    out = str(tmp_path / f"{script}.json")
    argv, env = job_runs.command(script, [out], with_package=False)
    result = subprocess.run(argv, capture_output=True, text=True, env=env,
                            cwd=folder, check=False)
    assert result.returncode == 0, result.stderr[-2000:]
    with open(out) as f:
      runs.append(json.load(f))
  assert runs[0] == runs[1]
  assert any(step["skipped"] for step in runs[0]["steps"])  # An overflow.
