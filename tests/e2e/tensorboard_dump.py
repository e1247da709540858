"""Reads a TensorBoard log folder with TensorBoard's own EventAccumulator and
prints what it found as JSON: {"file_version": ..., "scalars": {tag:
[[step, wall_time, value], ...]}}. Runs in the virtual environment that
has tensorboard (see metrics_test.py), not in Debian's python3."""
import json
import sys

from tensorboard.backend.event_processing import event_accumulator

acc = event_accumulator.EventAccumulator(
    sys.argv[1], size_guidance={event_accumulator.SCALARS: 0})  # 0: keep all
acc.Reload()
out = {"file_version": acc.file_version, "scalars": {}}
for tag in acc.Tags()["scalars"]:
    out["scalars"][tag] = [[e.step, e.wall_time, e.value] for e in acc.Scalars(tag)]
json.dump(out, sys.stdout)
