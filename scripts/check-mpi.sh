#!/usr/bin/env bash
# The MPI checks (docs/distributed.md): builds imdb-app with `--features mpi` and
# - runs `mpirun -np 2 imdb-app …` against one process on the same global batch (PPO, CORY and GRPO,
#   and a resume under MPI), comparing metrics and final weights within 1e-4
#   (apps/imdb-app/tests/cli.rs, `two_mpi_ranks_train_as_one`);
# - kills rank 1 of a running job and checks that the job stops with an error and that the run
#   resumes from its newest checkpoint (`a_killed_mpi_rank_stops_the_job_and_the_run_resumes`).
# Needs OpenMPI and libclang (Debian: openmpi-bin libopenmpi-dev libclang-dev); .ci/run
# installs them and calls this after the test suite.
#
# Only lmrl-train and the imdb-app tests are rebuilt (burn's features do not change); the build
# replaces target/release/imdb-app with the MPI one, which behaves the same when no MPI
# launcher started it.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo test --release -p imdb-app --features mpi --test cli -- --nocapture \
  two_mpi_ranks_train_as_one a_killed_mpi_rank_stops_the_job_and_the_run_resumes
