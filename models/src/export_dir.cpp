// SPDX-License-Identifier: Apache-2.0
// Export directories that appear complete or not at all, and failure agreement across the ranks
// that write them (export_dir.h).

#include "export_dir.h"

#include <exception>
#include <filesystem>

#include "zeroshard/base/error.h"
#include "zeroshard/comm/collective_step.h"
#include "zeroshard/comm/communicator.h"
#include "zeroshard/io/rank_file.h"

namespace zeroshard::models::detail {
namespace fs = std::filesystem;

void on_every_rank(Communicator* comm, const std::string& what, const std::function<void()>& fn) {
  if (comm == nullptr) {
    fn();
    return;
  }
  std::exception_ptr mine;
  const zeroshard::detail::StepOutcome step = zeroshard::detail::run_step(*comm, true, "zs.export.step", [&] {
    try {
      fn();
    } catch (...) {
      mine = std::current_exception();
      throw;
    }
  });
  if (!step.any_failed()) return;
  const std::string first = zeroshard::detail::first_error(*comm, step, "zs.export.error");
  if (mine) std::rethrow_exception(mine);  // this rank's own error, as it was
  ZS_THROW(CheckpointError, what, " failed on rank(s) ", step.failed_ranks(), ": ", first);
}

namespace {

std::pair<std::string, std::string> parent_and_name(const std::string& dir) {
  fs::path p = fs::path(dir).lexically_normal();
  if (!p.has_filename()) p = p.parent_path();  // "out/" -> "out"
  const std::string parent = p.parent_path().empty() ? "." : p.parent_path().string();
  return {parent, p.filename().string()};
}

}  // namespace

ExportDirectory::ExportDirectory(std::string dir, Communicator* comm) : dir_(std::move(dir)) {
  const auto parent_name = parent_and_name(dir_);  // not a structured binding: the lambda below captures it
  const std::string& parent = parent_name.first;
  const std::string& name = parent_name.second;
  ZS_REQUIRE(!name.empty() && name != "." && name != "..", UsageError, "'", dir_, "' is not a directory name to export to");
  tmp_ = parent + "/." + name + ".tmp-export";
  const bool root = comm == nullptr || comm->rank() == 0;
  on_every_rank(comm, "preparing '" + dir_ + "'", [&] {
    if (!root) return;
    std::error_code ec;
    ZS_REQUIRE(!fs::exists(dir_, ec), UsageError, "'", dir_,
               "' already exists: an export writes a new directory (remove it, or name another)");
    ZS_REQUIRE(fs::is_directory(parent, ec), IoError, "cannot export to '", dir_, "': its parent '", parent,
               "' is not a directory");
    fs::remove_all(tmp_, ec);  // an export of this name that died
    ZS_REQUIRE(fs::create_directory(tmp_, ec) && !ec, IoError, "cannot create '", tmp_, "': ",
               ec ? ec.message() : "it already exists");
  });
  on_every_rank(comm, "preparing '" + dir_ + "'", [&] {
    std::error_code ec;
    ZS_REQUIRE(fs::is_directory(tmp_, ec), IoError, "'", tmp_, "', which rank 0 just created, does not exist on rank ",
               comm == nullptr ? 0 : comm->rank(), ": the ranks of a parallel export must share one filesystem "
               "(e.g. NFS or Lustre)");
  });
}

void ExportDirectory::write_file(const std::string& name, const std::string& contents) const {
  write_file_atomic(*default_file_io(), tmp_, name, contents);
}

void ExportDirectory::publish() const {
  fsync_dir(tmp_);
  std::error_code ec;
  ZS_REQUIRE(!fs::exists(dir_, ec), UsageError, "'", dir_, "' appeared while the export ran: the export stays in '",
             tmp_, "'");
  fs::rename(tmp_, dir_, ec);
  ZS_REQUIRE(!ec, IoError, "cannot rename '", tmp_, "' to '", dir_, "': ", ec.message());
  fsync_dir(parent_and_name(dir_).first);
}

void ExportDirectory::discard() const {
  std::error_code ec;
  fs::remove_all(tmp_, ec);
}

}  // namespace zeroshard::models::detail
