// SPDX-License-Identifier: Apache-2.0
#include "mpi_peer_channel.h"

#include <chrono>
#include <cstring>
#include <deque>
#include <map>
#include <thread>

#include "mpi_util.h"

namespace zeroshard::comm {
namespace {

constexpr int kQueryTag = 7101;
constexpr int kReplyTag = 7102;
constexpr size_t kKeptReplies = 64;

class MpiPeerChannel final : public PeerChannel {
 public:
  MpiPeerChannel() {
    ZS_MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &comm_));
    MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &size_);
    query_ids_.assign(size_, 0);
  }

  // The communicator is not freed: MPI_Comm_free is collective-ish in spirit and the channel lives
  // until the end of the Session, when MPI_Finalize releases it.
  ~MpiPeerChannel() override = default;

  void serve(const std::function<std::string()>& describe) override {
    for (;;) {
      int flag = 0;
      MPI_Status st;
      if (MPI_Iprobe(MPI_ANY_SOURCE, kQueryTag, comm_, &flag, &st) != MPI_SUCCESS || !flag) break;
      uint32_t id = 0;
      MPI_Recv(&id, 1, MPI_UINT32_T, st.MPI_SOURCE, kQueryTag, comm_, MPI_STATUS_IGNORE);
      std::string reply(sizeof(id), '\0');
      std::memcpy(reply.data(), &id, sizeof(id));
      reply += describe();
      replies_.push_back(std::move(reply));
      MPI_Request req;
      const std::string& r = replies_.back();
      if (MPI_Isend(r.data(), static_cast<int>(r.size()), MPI_CHAR, st.MPI_SOURCE, kReplyTag, comm_, &req) ==
          MPI_SUCCESS) {
        MPI_Request_free(&req);  // small message; completes in the background
      }
      while (replies_.size() > kKeptReplies) replies_.pop_front();
    }
    if (!querying_) drain_replies(0, nullptr);  // late answers to an earlier query
  }

  std::vector<std::string> query_all(std::chrono::milliseconds budget,
                                     const std::function<std::string()>& describe) override {
    const uint32_t id = ++next_id_;
    for (int p = 0; p < size_; ++p) {
      if (p == rank_) continue;
      query_ids_[p] = id;
      MPI_Request req;
      if (MPI_Isend(&query_ids_[p], 1, MPI_UINT32_T, p, kQueryTag, comm_, &req) == MPI_SUCCESS) {
        MPI_Request_free(&req);
      }
    }
    std::map<int, std::string> answers;
    querying_ = true;
    auto deadline = std::chrono::steady_clock::now() + budget;
    while (static_cast<int>(answers.size()) < size_ - 1 && std::chrono::steady_clock::now() < deadline) {
      serve(describe);
      drain_replies(id, &answers);
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    querying_ = false;
    std::vector<std::string> lines;
    for (int p = 0; p < size_; ++p) {
      if (p == rank_) continue;
      auto it = answers.find(p);
      if (it != answers.end()) {
        lines.push_back(detail::concat("rank ", p, ": ", it->second));
      } else {
        lines.push_back(detail::concat("rank ", p, ": no answer within ", budget.count(),
                                       " ms (process dead, stopped, or its MPI progress is blocked)"));
      }
    }
    return lines;
  }

 private:
  // Receives every pending reply; keeps those answering query `id` in `answers`.
  void drain_replies(uint32_t id, std::map<int, std::string>* answers) {
    for (;;) {
      int flag = 0;
      MPI_Status st;
      if (MPI_Iprobe(MPI_ANY_SOURCE, kReplyTag, comm_, &flag, &st) != MPI_SUCCESS || !flag) return;
      int bytes = 0;
      MPI_Get_count(&st, MPI_CHAR, &bytes);
      std::string buf(static_cast<size_t>(bytes), '\0');
      MPI_Recv(buf.data(), bytes, MPI_CHAR, st.MPI_SOURCE, kReplyTag, comm_, MPI_STATUS_IGNORE);
      if (bytes < static_cast<int>(sizeof(uint32_t)) || answers == nullptr) continue;
      uint32_t got = 0;
      std::memcpy(&got, buf.data(), sizeof(got));
      if (got == id) (*answers)[st.MPI_SOURCE] = buf.substr(sizeof(got));
    }
  }

  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0;
  int size_ = 1;
  uint32_t next_id_ = 0;
  bool querying_ = false;  // inside query_all: serve() must leave replies to it
  std::vector<uint32_t> query_ids_;
  std::deque<std::string> replies_;
};

}  // namespace

std::unique_ptr<PeerChannel> make_mpi_peer_channel() { return std::make_unique<MpiPeerChannel>(); }

}  // namespace zeroshard::comm
