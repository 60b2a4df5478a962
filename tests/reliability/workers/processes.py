"""Running worker scripts in subprocesses with hard time limits."""

import os
import signal
import socket
import subprocess
import sys

WORKERS = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(WORKERS))


def free_ports(count):
  """`count` distinct TCP ports free on 127.0.0.1 right now."""
  sockets = []
  try:
    for _ in range(count):
      s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
      s.bind(("127.0.0.1", 0))
      sockets.append(s)
    return [s.getsockname()[1] for s in sockets]
  finally:
    for s in sockets:
      s.close()


def worker_env(**extra):
  """The environment of a worker: quiet TF, one CPU device, repo importable."""
  env = dict(os.environ)
  env["TF_CPP_MIN_LOG_LEVEL"] = "2"
  env["PYTHONPATH"] = os.pathsep.join(
      [REPO] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
  env.pop("TF_CONFIG", None)
  env.update(extra)
  return env


def start(script, args, env, log_path):
  """Starts `tests/reliability/workers/<script>` in its own process group."""
  log = open(log_path, "wb")  # pylint: disable=consider-using-with
  try:
    return subprocess.Popen(
        [sys.executable, os.path.join(WORKERS, script)] + list(args),
        env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
  finally:
    log.close()


def kill(proc):
  """SIGKILLs `proc`'s process group (started by `start`) and reaps it."""
  if proc.poll() is None:
    try:
      os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
      pass
  proc.wait()


def tail(log_path, chars=4000):
  with open(log_path, "rb") as f:
    return f.read().decode("utf-8", "replace")[-chars:]
