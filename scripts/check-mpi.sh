#!/usr/bin/env bash
# The MPI rank-count invariance check: builds imdb-app with `--features mpi` and runs
# `mpirun -np 2 imdb-app …` against one process on the same global batch (PPO and CORY, and a
# resume under MPI), comparing metrics and final weights within 1e-4 (apps/imdb-app/tests/cli.rs,
# `two_mpi_ranks_train_as_one`). Needs OpenMPI and libclang (Debian: libopenmpi-dev openmpi-bin
# libclang-dev clang); .ci/run installs them and calls this after the test suite.
#
# Only lmrl-train and imdb-app are rebuilt (burn's features do not change); the build replaces
# target/release/imdb-app with the MPI one, which behaves the same when mpirun did not start it.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo test --release -p imdb-app --features mpi --test cli -- --nocapture two_mpi_ranks_train_as_one
