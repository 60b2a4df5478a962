"""`migrate FILE... [--write] [--json]`: TF 2.3/2.4 mixed-precision API uses.

Reports each use with its Keras 3 replacement and what changes; `--write`
applies the rewrites that keep behaviour (libcst keeps formatting and
comments) and leaves the others in the report.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from typing import Any, Optional, TextIO

from tf_mixed_precision_compat.cli import _plan


def _rewrite_module() -> Any:
  try:
    # pylint: disable-next=g-import-not-at-top
    from tf_mixed_precision_compat.cli import _rewrite
  except ImportError as e:
    raise _plan.UsageError(
        f"migrate needs libcst ({e}): pip install "
        "'tf_mixed_precision_compat[migrate]'") from e
  return _rewrite


def migrate_file(path: str, write: bool) -> list[Any]:
  """The findings in `path`; with `write`, the file rewritten in place."""
  rewrite = _rewrite_module()
  # Importable now: _rewrite, just imported, needs it.
  import libcst  # pylint: disable=g-import-not-at-top
  try:
    with open(path, encoding="utf-8") as f:
      source = f.read()
  except UnicodeDecodeError as e:  # Its message does not name the file.
    raise ValueError(f"{path}: not UTF-8 text ({e.reason} at byte "
                     f"{e.start}); migrate reads Python sources") from None
  try:
    new, findings = rewrite.migrate_source(source)
  except libcst.ParserSyntaxError as e:  # Its str() spans several lines.
    raise ValueError(f"{path}:{e.raw_line}:{e.raw_column + 1}: not valid "
                     f"Python: {e.message}") from None
  if write and new != source:
    with open(path, "w", encoding="utf-8") as f:
      f.write(new)
  return findings


def run(args: Any, out: Optional[TextIO] = None,
        err: Optional[TextIO] = None) -> int:
  """Runs `migrate`; returns 1 when some use needs manual work."""
  out = out or sys.stdout
  err = err or sys.stderr
  report = {}
  for i, path in enumerate(args.files, 1):
    err.write(f"[{i}/{len(args.files)}] {path}\n")
    report[path] = migrate_file(path, args.write)
  manual = sum(f.status == "manual" for fs in report.values() for f in fs)
  if args.json:
    out.write(json.dumps({p: [dataclasses.asdict(f) for f in fs]
                          for p, fs in report.items()}, indent=1) + "\n")
    return 1 if manual else 0
  done = "rewritten" if args.write else "rewrite (with --write)"
  for path, findings in report.items():
    for f in findings:
      status = {"rewrite": done, "native": "unchanged",
                "manual": "MANUAL"}[f.status]
      out.write(f"{path}:{f.line}:{f.column}: [{status}] {f.api} -> "
                f"{f.replacement}\n    {f.change}\n")
  total = sum(len(fs) for fs in report.values())
  out.write(f"{total} uses, {manual} need manual work\n")
  return 1 if manual else 0
