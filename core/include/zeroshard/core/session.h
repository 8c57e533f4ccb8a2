// SPDX-License-Identifier: Apache-2.0
#pragma once
// The process's zeroshard runtime: MPI, launch detection, logging, device, communicators.
//
//   int main(int argc, char** argv) {
//     return zeroshard::run_main(argc, argv, [](zeroshard::Session& s) {
//       auto world = s.world();   // CPU tensors over MPI
//       ...
//       return 0;
//     });
//   }
//
// (zeroshard/config/main.h's run_main reads a run's config first and starts the Session with the
// SessionOptions it resolves to.) Construction is collective over all ranks of the job: it
// initializes MPI (MPI_THREAD_MULTIPLE, checked), sets the process identity used by errors and
// logs, applies the logging settings and the memory options, seeds LibTorch, finds the
// local rank with MPI_Comm_split_type(MPI_COMM_TYPE_SHARED), cross-checks the launcher's environment
// variables, and picks the device when CUDA is available and SessionOptions::device allows (else CPU):
// cuda:<local rank> when the rank sees at least as many GPUs as its host has ranks, cuda:0 when
// it sees exactly one (one GPU per rank, e.g. srun --gpus-per-task=1; ranks of a host given the
// same GPU are a ConfigError; so are ranks of a host that see different GPU counts), and makes it
// the current device before any CUDA work. A process started without mpirun is a job of world size 1.
// Only one Session may exist at a time. Destruction stops the communicators and the watchdog and
// finalizes MPI if the Session initialized it. Not thread-safe: create and destroy on one thread.

#include <c10/core/Device.h>

#include <memory>
#include <string>
#include <vector>

#include "zeroshard/comm/communicator.h"
#include "zeroshard/comm/launch_env.h"
#include "zeroshard/core/session_options.h"

namespace zeroshard {

class Session {
 public:
  // `argv` is kept as args() (a program's own flags; nothing is taken out of it). Throws on bad
  // input (a launch MPI cannot see, a device the host does not have).
  Session(int argc, char** argv, const SessionOptions& options = {});
  ~Session();
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  // The active Session, or nullptr.
  static Session* current();

  int rank() const { return rank_; }
  int world_size() const { return world_size_; }
  int local_rank() const { return local_rank_; }
  int local_world_size() const { return local_world_size_; }
  const std::string& host() const { return host_; }
  const LaunchEnv& launch_env() const { return launch_env_; }
  c10::Device device() const { return device_; }
  // What the Session was started with.
  const SessionOptions& options() const { return options_; }
  // The command-line arguments it was given, argv[0] first.
  const std::vector<std::string>& args() const { return args_; }

  // SessionOptions::comm with the given name (and no polling on an oversubscribed host).
  CommOptions comm_options(const std::string& name) const;

  // All ranks, CPU tensors, MPI backend. Created with the Session.
  const std::shared_ptr<Communicator>& world() const { return world_; }
  // All ranks, for tensors on device(): NCCL when the device is CUDA (created on first use,
  // collective), otherwise world(). CommBackend kMpi with a CUDA device (or kNccl with the CPU) is
  // a ConfigError.
  std::shared_ptr<Communicator> device_world();

  // Ranks of this node (MPI_COMM_TYPE_SHARED), CPU tensors, MPI backend.
  const std::shared_ptr<Communicator>& node() const { return node_; }

 private:
  void start();
  void pick_device();
  struct HostGpuView {
    int visible = 0;           // GPUs this rank sees
    std::string first_gpu_id;  // PCI bus id of its cuda:0 when it sees exactly one, else empty
  };
  std::vector<HostGpuView> exchange_gpu_views(int gpus) const;  // collective over node()
  void check_launch_env() const;

  SessionOptions options_;
  std::vector<std::string> args_;
  LaunchEnv launch_env_;
  int rank_ = 0;
  int world_size_ = 1;
  int local_rank_ = 0;
  int local_world_size_ = 1;
  std::string host_;
  c10::Device device_{c10::kCPU};
  std::shared_ptr<Communicator> world_;
  std::shared_ptr<Communicator> node_;
  std::shared_ptr<Communicator> device_world_;
};

}  // namespace zeroshard
