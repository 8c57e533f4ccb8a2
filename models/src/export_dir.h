// SPDX-License-Identifier: Apache-2.0
#pragma once
// Private to the exports (hf_export.cpp): a directory that appears complete or not at all. Its
// files are written into a temporary sibling (<parent>/.<name>.tmp-export), which publish() syncs
// and renames to the final name; until then (and after a failure) only the temporary one exists.

#include <functional>
#include <string>

namespace zeroshard {
class Communicator;
}  // namespace zeroshard

namespace zeroshard::models::detail {

class ExportDirectory {
 public:
  // Collective over `comm` (null: this process alone). Rank 0 refuses an existing `dir` (UsageError
  // naming it), clears a stale temporary directory and creates a fresh one; every rank then checks
  // it sees it (the ranks must share one filesystem). Fails on every rank when it fails on one.
  ExportDirectory(std::string dir, Communicator* comm);
  const std::string& tmp() const { return tmp_; }
  const std::string& dir() const { return dir_; }
  // Rank 0: writes `name` inside the temporary directory (synced).
  void write_file(const std::string& name, const std::string& contents) const;
  // Rank 0: syncs the temporary directory and renames it to the final name, then syncs the parent.
  void publish() const;
  // Rank 0: removes the temporary directory (after a failure).
  void discard() const;

 private:
  std::string dir_, tmp_;
};

// Runs `fn` on every rank of `comm` (this process alone when null) and fails on every rank when
// it failed on any: with this rank's own error, else the lowest failed rank's. `what` names the
// step in the error ("writing the Hugging Face directory 'out'").
void on_every_rank(Communicator* comm, const std::string& what, const std::function<void()>& fn);

}  // namespace zeroshard::models::detail
