"""`migrate PATH... [--write] [--json]`: TF 2.3/2.4 mixed-precision API uses.

Reports each use with its Keras 3 replacement and what changes; `--write`
applies the rewrites that keep behaviour (libcst keeps formatting and
comments) and leaves the others in the report. PATHs are Python files,
notebooks or directory trees (`--outtree` writes a migrated copy of one).
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import sys
from typing import Any, Optional, TextIO

from tf_mixed_precision_compat.cli import _plan


def migrate_file(path: str, write: bool, deviate: bool = False) -> list[Any]:
  """The findings in `path`; with `write`, the file rewritten in place.

  `deviate` also writes the closest native form of uses no Keras 3 code
  keeps (status "deviation", the line marked with a comment).
  """
  try:
    # pylint: disable-next=g-import-not-at-top
    from tf_mixed_precision_compat.cli import _rewrite as rewrite
  except ImportError as e:
    raise _plan.UsageError(
        f"migrate needs libcst ({e}): pip install "
        "'tf_mixed_precision_compat[migrate]'") from e
  # Importable now: _rewrite, just imported, needs it.
  import libcst  # pylint: disable=g-import-not-at-top
  # pylint: disable-next=g-import-not-at-top
  from tf_mixed_precision_compat.cli import _notebook
  try:
    with open(path, encoding="utf-8") as f:
      source = f.read()
  except UnicodeDecodeError as e:  # Its message does not name the file.
    raise ValueError(f"{path}: not UTF-8 text ({e.reason} at byte "
                     f"{e.start}); migrate reads Python sources") from None
  try:
    if path.endswith(".ipynb"):
      new, findings, places = _notebook.migrate(
          source, lambda code: rewrite.migrate_source(code, deviate))
      for finding, (cell, line) in zip(findings, places):
        finding.cell = None if cell is None else cell + 1
        finding.line = line
    else:
      new, findings = rewrite.migrate_source(source, deviate)
  except libcst.ParserSyntaxError as e:  # Its str() spans several lines.
    raise ValueError(f"{path}:{e.raw_line}:{e.raw_column + 1}: not valid "
                     f"Python: {e.message}") from None
  except json.JSONDecodeError as e:
    raise ValueError(f"{path}: not a notebook (JSON): {e}") from None
  shadow = _local_keras(path)
  if shadow and "import keras" in new and "import keras" not in source:
    # `import keras` beside a local keras package imports that package.
    findings.append(rewrite.Finding(
        1, 1, "import keras", "(none)", f"not rewritten: {shadow} shadows "
        "Keras 3 for this file (Python imports it for `import keras`): "
        "rename it, then run migrate again", "manual"))
    return findings
  if write and new != source:
    with open(path, "w", encoding="utf-8") as f:
      f.write(new)
  return findings


def _local_keras(path: str) -> Optional[str]:
  """A `keras` package or module beside `path`, which would shadow Keras."""
  here = os.path.dirname(os.path.abspath(path))
  for name in ("keras", "keras.py"):
    if os.path.exists(os.path.join(here, name)):
      return os.path.join(here, name)
  return None


# Folders a tree walk leaves out: version control, caches, environments.
_SKIPPED_DIRS = frozenset({"__pycache__", ".ipynb_checkpoints", "node_modules",
                           "site-packages"})
MIGRATED = (".py", ".ipynb")


def sources(paths: list[str]) -> list[str]:
  """The files `paths` name: files as given, directories' Python files and
  notebooks recursively (sorted; hidden folders and caches left out)."""
  out = []
  for path in paths:
    if not os.path.isdir(path):
      out.append(path)
      continue
    found = []
    for root, dirs, files in os.walk(path):
      dirs[:] = sorted(d for d in dirs if not d.startswith(".") and
                       d not in _SKIPPED_DIRS)
      found += [os.path.join(root, name) for name in sorted(files)
                if name.endswith(MIGRATED)]
    if not found:
      raise ValueError(f"{path}: a directory without Python files (.py) or "
                       "notebooks (.ipynb), hidden folders aside")
    out += found
  return out


def copy_tree(args: Any) -> list[str]:
  """`--outtree`: the one input tree copied there; the paths to migrate."""
  if len(args.files) != 1 or not os.path.isdir(args.files[0]):
    raise _plan.UsageError("--outtree takes exactly one input directory")
  source, target = args.files[0], args.outtree
  if os.path.exists(target) and (not os.path.isdir(target) or
                                 os.listdir(target)):
    raise _plan.UsageError(f"--outtree {target!r} exists and is not an "
                           "empty directory")
  if os.path.abspath(target).startswith(os.path.abspath(source) + os.sep):
    raise _plan.UsageError("--outtree must not be inside the input tree")
  shutil.copytree(source, target, dirs_exist_ok=True, symlinks=True)
  return [target]


def run(args: Any, out: Optional[TextIO] = None,
        err: Optional[TextIO] = None) -> int:
  """Runs `migrate`; returns 1 when some use needs manual work."""
  out = out or sys.stdout
  err = err or sys.stderr
  write = args.write or bool(getattr(args, "outtree", None))
  roots = copy_tree(args) if getattr(args, "outtree", None) else args.files
  paths = sources(roots)
  report = {}
  for i, path in enumerate(paths, 1):
    err.write(f"[{i}/{len(paths)}] {path}\n")
    report[path] = migrate_file(path, write, getattr(args, "deviate", False))
  manual = sum(f.status == "manual" for fs in report.values() for f in fs)
  if getattr(args, "report", None):
    with open(args.report, "w", encoding="utf-8") as f:
      f.write(render(report, write, verbose=True))
  if args.json:
    out.write(json.dumps({p: [dataclasses.asdict(f) for f in fs]
                          for p, fs in report.items()}, indent=1) + "\n")
  else:
    out.write(render(report, write, args.verbose))
  return 1 if manual else 0


def render(report: dict, write: bool, verbose: bool) -> str:
  """The report: a line per file, then its manual uses (every use with
  `verbose`), then the totals."""
  lines = []
  for path, findings in report.items():
    lines.append(summary(path, findings, write))
    lines += [detail(path, f, write, verbose) for f in findings
              if verbose or f.status in ("manual", "deviation")]
  total = sum(len(fs) for fs in report.values())
  manual = sum(f.status == "manual" for fs in report.values() for f in fs)
  lines.append(f"{total} uses, {manual} need manual work"
               + ("" if verbose else " (--verbose: every use, and why)"))
  return "\n".join(lines) + "\n"


def summary(path: str, findings: list[Any], write: bool) -> str:
  """One line per file: how many uses, rewritten, needing manual work, and
  whether (as far as migrate knows) the file then runs without the package.
  """
  counts = {s: sum(f.status == s for f in findings)
            for s in ("rewrite", "native", "manual", "deviation")}
  done = "rewritten" if write else "to rewrite (--write)"
  alone = ("no: the MANUAL uses first" if counts["manual"] else
           "yes" if write else "yes, once rewritten")
  return (f"{path}: {len(findings)} uses: {counts['rewrite']} {done}, "
          f"{counts['native']} native, {counts['manual']} manual, "
          f"{counts['deviation']} deviations; runs without the package: "
          f"{alone}")


def detail(path: str, finding: Any, write: bool, verbose: bool) -> str:
  """One finding: where, what, and (verbose) its replacement and change."""
  status = {"rewrite": "rewritten" if write else "rewrite (with --write)",
            "native": "unchanged", "manual": "MANUAL",
            "deviation": "DEVIATES" if write else "deviates (with --write)"
            }[finding.status]
  where = path if finding.cell is None else f"{path}[cell {finding.cell}]"
  head = f"  {where}:{finding.line}:{finding.column}: [{status}] {finding.api}"
  if not verbose:
    return f"{head}: {finding.change}"
  return f"{head} -> {finding.replacement}\n      {finding.change}"
