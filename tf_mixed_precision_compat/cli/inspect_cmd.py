"""`inspect PATH [--model MODULE:FUNCTION] [--json]`: what a file holds.

With `--model`, also the restore plan into the model the function builds,
explained in words: what matched, what did not, and why.
"""

from __future__ import annotations

import json
import sys
from typing import Any, Optional, TextIO

from tf_mixed_precision_compat import legacy
from tf_mixed_precision_compat.cli import _ckpt
from tf_mixed_precision_compat.cli import _explain
from tf_mixed_precision_compat.cli import _files
from tf_mixed_precision_compat.cli import _plan
from tf_mixed_precision_compat.cli import _sources


def _optimizer_lines(opt: dict) -> list[str]:
  lines = [f"optimizer at {opt['path']} ({opt['layout']} layout)"]
  if opt.get("class_name"):
    lines.append(f"  class: {opt['class_name']}"
                 + (f" ({opt['class_note']})" if opt.get("class_note") else ""))
  elif opt.get("class_note"):
    lines.append(f"  class: unknown ({opt['class_note']})")
  for name, value in sorted((opt.get("hyperparameters") or {}).items()):
    lines.append(f"  {name}: {value}")
  lines.append(f"  iterations: {opt.get('iterations')}")
  slots = opt.get("slots") or {}
  lines.append(f"  slots of {len(slots)} variables:")
  lines += [f"    {var}: {', '.join(names)}"
            for var, names in sorted(slots.items())]
  scale = opt.get("loss_scale")
  if scale is None:
    lines.append("  loss scale: none stored (fixed scale or no loss scaling)")
  elif scale.get("type") == "dynamic":
    steps = scale.get("growth_steps") or ("not stored (your code sets it; "
                                          "TF's default was 2000)")
    lines.append(f"  loss scale: dynamic, value {scale['value']}, counter "
                 f"{scale['counter']}, growth steps {steps}")
  else:
    lines.append(f"  loss scale: {scale.get('note', scale)}")
  return lines


def render(described: dict) -> str:
  """The human-readable form of a `_files.describe` dict."""
  lines = [f"{described['source']}: {described['format']}",
           f"written by: {described['generation']}"]
  if described.get("model_class"):
    lines.append(f"model: {described['model_class']}")
  if described.get("layers"):
    lines.append(f"layers: {', '.join(map(str, described['layers']))}")
  lines.append(f"weights ({len(described['weights'])}):")
  lines += [f"  {w['name']}: {w['dtype']}{w['shape']}"
            for w in described["weights"]]
  for opt in described["optimizers"]:
    lines += _optimizer_lines(opt)
  if not described["optimizers"]:
    lines.append("optimizer: none stored")
  for key, value in sorted((described.get("other") or {}).items()):
    lines.append(f"other: {key} = {value}")
  lines += [f"note: {n}" for n in described.get("notes", [])]
  return "\n".join(lines)


def explain(report: Any, error: Optional[Exception]) -> tuple[bool, dict]:
  """`(restores, plan)`: the dry run's outcome in words a user reads."""
  if error is not None and not isinstance(error, legacy.RestoreError):
    return False, {"verdict": "does not restore", "why": [str(error)]}
  source = error if error is not None else report
  why = _explain.sentences(source)
  ok = error is None and not why
  why = why or ["Every value in the checkpoint has a place in the model and "
                "optimizer, with the same shape and dtype, and every weight "
                "of the model gets a value."]
  root = _explain.root_entries(source.unmatched_checkpoint)
  if root:
    why.append(
        f"Beside model and optimizer the checkpoint holds {', '.join(root)}:"
        " your job's own tf.train.Checkpoint restores those (convert "
        "carries them over).")
  plan: dict = {
      "verdict": "restores exactly" if ok else "does not restore",
      "matched": [[k, str(t)] for k, t in getattr(report, "matched", [])],
      "why": why}
  if report is not None:
    plan.update(iterations=_num(report.iterations),
                loss_scale=_num(report.loss_scale),
                counter=_num(report.counter), notes=list(report.notes))
  return ok, plan


def _num(value: Any) -> Any:
  return None if value is None else getattr(value, "item", lambda: value)()


def plan_for(path: str, described: dict, args: Any) -> tuple[bool, dict]:
  """The dry run of restoring `path` into `args.model`'s fresh model."""
  model, given = _plan.build_job(args.model, args.policy)
  found = described["optimizers"]
  opt_info = _ckpt.OptimizerInfo(**found[0]) if found else None
  optimizer = None
  if opt_info is not None:
    (name, _, why), inner = _plan.job_optimizer(opt_info, args, given)
    problem = _plan.schedule_problem(opt_info, inner)
    if problem:
      return False, {"verdict": "does not restore", "matched": [],
                     "why": [problem]}
    optimizer = _plan.package_optimizer(opt_info, inner)
    described.setdefault("notes", []).append(
        f"dry run with optimizer {name} ({why})")
  try:
    report = _dry_restore(path, model, optimizer)
  except ValueError as e:  # A RestoreError; not built, malformed: as it is.
    return explain(None, e)
  return explain(report, None)


def _dry_restore(path: str, model: Any, optimizer: Any) -> Any:
  """The report of restoring `path` into the throwaway `model` and
  `optimizer` as convert does (the same verdict, the same reasons), or,
  for checkpoints convert does not take, as the package's restore does."""
  try:
    layout = _sources.find_optimizer(path)
    _sources.find(layout, model)
  except _sources.NotConvertible:
    return legacy.restore_checkpoint(path, model, optimizer,
                                     allow_partial=True, dry_run=True)
  return _sources.restore(layout, model, optimizer)


def run(args: Any, out: Optional[TextIO] = None) -> int:
  """Runs `inspect`; returns the exit code."""
  out = out or sys.stdout
  described = _files.describe(args.path)
  code = 0
  if args.model:
    if described["format"] != "tf-checkpoint":
      raise _plan.UsageError("--model dry runs need a TF checkpoint (prefix "
                             "or directory)")
    ok, described["restore_plan"] = plan_for(args.path, described, args)
    code = 0 if ok else 1
  if args.json:
    out.write(json.dumps(described, indent=1, default=str) + "\n")
    return code
  out.write(render(described) + "\n")
  if "restore_plan" in described:
    plan = described["restore_plan"]
    out.write(f"restore into {args.model}: {plan['verdict']}\n")
    out.write(f"  {len(plan.get('matched', []))} values matched\n")
    out.writelines(f"  - {line}\n" for line in plan["why"])
    out.writelines(f"  note: {line}\n" for line in plan.get("notes", []))
  return code
