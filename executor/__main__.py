"""`python -m executor PLAN.json ...` (under torchrun): see executor.train.

The process ends with `os._exit` after flushing: letting the interpreter finalise races against gloo's C++
worker threads, which can still own work objects holding Python tensors even after
`destroy_process_group()`, and abort the process ("terminate called without an active exception", SIGABRT;
measured here in about 1 run in 8 of a 4-rank FSDP plan; the mechanism is described in PyTorch PR 179291).
Everything the run writes is closed and flushed before this point.
"""

import os
import sys

from executor.train import main

rc = main()
sys.stdout.flush()
sys.stderr.flush()
os._exit(rc)
