"""Real public TF 2.3/2.4-era mixed-precision jobs, checked against real TF.

Each `<name>.py` here is written as its original makes its TF/Keras calls
(see its docstring for the original's repository, path and commit) and runs
on the real TF 2.4.4 / 2.3.4 as it is; on TF 2.21 the test runner adds the one
install line. `tools/gen_public_job_records.py` records the old TF's per-step
loss-scale state and midway checkpoints in tests/fixtures/public_jobs/, and
test_public_jobs.py compares.
"""
