#!/bin/bash
# Runs mpi_communicator_test_bin under mpirun on 2 and 3 ranks (more ranks
# than cores: --oversubscribe). Skips, saying so, where Open MPI's mpirun is
# not installed (tools/setup.sh installs it).
set -euo pipefail
bin="$1"
if ! command -v mpirun >/dev/null; then
  echo "SKIPPED: mpirun not found (apt-get install openmpi-bin)"
  exit 0
fi
# gtest's premature-exit marker is one file for the whole test: every rank
# would try to remove it.
unset TEST_PREMATURE_EXIT_FILE
for n in 2 3; do
  echo "=== mpirun -np $n"
  # Root in containers; --bind-to none: ranks share the cores like the trainer's.
  # A stuck collective fails the test within a minute rather than hanging.
  OMPI_MCA_mpi_yield_when_idle=1 timeout -k 5 60 mpirun --allow-run-as-root --oversubscribe --bind-to none \
    -np "$n" "$bin"
done
