// The job under a PyTorch program: how its processes become one MPI world, the comm::Runtime
// (status board, watchdog) over that world, and the communicators of its process groups.
//
// Two ways to start (docs/pytorch.md):
//   mpiexec -n 2 python3 train.py     MPI_COMM_WORLD is the world; its rank and size must be
//                                     the ones init_process_group was given.
//   torchrun / multiprocessing spawn  each process starts as an MPI world of one. Rank 0 starts
//                                     Open MPI's rendezvous server (ompi-server), its address
//                                     travels through PyTorch's store, and the processes join
//                                     one by one with MPI's connect/accept, then are ordered
//                                     by their PyTorch rank.
// Every function here runs on the communication thread (progress_thread.hpp).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <torch/csrc/distributed/c10d/Store.hpp>

#include "comm/communicator.hpp"

namespace nanodist_torch {

// Starts MPI and the runtime once per process (the first init_process_group: its rank and
// size are the world's); later calls find them started.
void start_job(c10d::Store& store, int rank, int size, std::chrono::milliseconds timeout);
bool job_started();
// A communicator over these ranks of the world (a new_group's global ranks, in group order);
// collective over those ranks only. `name` shows in the watchdog's reports.
std::unique_ptr<comm::Communicator> make_group(const std::vector<std::int64_t>& world_ranks, const std::string& name);
// The runtime's last meeting, then MPI's end (at the program's exit). `why` the rank leaves
// ("exit", "exception: ValueError") goes on the status board first, for the reports of ranks
// that still wait for it.
void end_job(const std::string& why);
// The job's deadline for any one wait (NANODIST_TIMEOUT, else init_process_group's timeout).
double job_timeout_s();

}  // namespace nanodist_torch
