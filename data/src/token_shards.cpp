// SPDX-License-Identifier: Apache-2.0
// Many token files as one stream, with their sidecars (token_shards.h).

#include "zeroshard/data/token_shards.h"

#include <glob.h>
#include <sys/stat.h>

#include <algorithm>
#include <set>

#include "zeroshard/base/error.h"

namespace zeroshard::data {
namespace {

bool is_pattern(const std::string& s) { return s.find_first_of("*?[") != std::string::npos; }

std::vector<std::string> glob_sorted(const std::string& pattern) {
  glob_t g{};
  const int rc = ::glob(pattern.c_str(), GLOB_NOSORT, nullptr, &g);
  std::vector<std::string> out;
  if (rc == 0) out.assign(g.gl_pathv, g.gl_pathv + g.gl_pathc);
  globfree(&g);
  ZS_REQUIRE(rc == 0 || rc == GLOB_NOMATCH, IoError, "cannot expand the pattern '", pattern, "' (glob error ", rc,
             ")");
  ZS_REQUIRE(!out.empty(), DataError, "no file matches '", pattern, "'");
  std::sort(out.begin(), out.end());
  return out;
}

bool exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}

}  // namespace

std::vector<std::string> TokenShards::expand(const std::vector<std::string>& inputs) {
  ZS_REQUIRE(!inputs.empty(), UsageError, "no token files given");
  std::vector<std::string> files;
  std::set<std::string> seen;
  for (const std::string& input : inputs) {
    const std::vector<std::string> matched = is_pattern(input) ? glob_sorted(input) : std::vector<std::string>{input};
    for (const std::string& f : matched) {
      ZS_REQUIRE(seen.insert(f).second, UsageError, "token file '", f, "' is listed twice (the inputs: ", input,
                 " and an earlier one)");
      files.push_back(f);
    }
  }
  return files;
}

TokenShards::TokenShards(const std::vector<std::string>& inputs, ShardSetOptions options) : options_(options) {
  const std::vector<std::string> paths = expand(inputs);
  begins_.push_back(0);
  for (const std::string& p : paths) {
    files_.emplace_back(p, options.format);
    begins_.push_back(begins_.back() + files_.back().num_tokens());
  }
  // Sidecars: all or none, decided by the first file.
  const bool docs = exists(docs_path_for(paths[0])), masks = exists(mask_path_for(paths[0]));
  doc_begins_.push_back(0);
  for (const ShardFile& f : files_) {
    const std::string d = docs_path_for(f.path()), m = mask_path_for(f.path());
    ZS_REQUIRE(exists(d) == docs, DataError, "token shard '", f.path(), "' ", docs ? "has no" : "has a",
               " document index '", d, "' but '", paths[0], "' ", docs ? "has one" : "has none",
               ": every shard of a set needs one, or none does");
    ZS_REQUIRE(exists(m) == masks, DataError, "token shard '", f.path(), "' ", masks ? "has no" : "has a",
               " loss mask '", m, "' but '", paths[0], "' ", masks ? "has one" : "has none",
               ": every shard of a set needs one, or none does");
    if (docs) {
      docs_.emplace_back(d, f.num_tokens());
      doc_begins_.push_back(doc_begins_.back() + docs_.back().num_documents());
    }
    if (masks) masks_.emplace_back(m, f.num_tokens());
  }
}

size_t TokenShards::file_at(int64_t token) const {
  // The last file whose begin <= token (empty files share their begin with the next one).
  const auto it = std::upper_bound(begins_.begin(), begins_.end() - 1, token);
  return static_cast<size_t>(it - begins_.begin()) - 1;
}

void TokenShards::read(int64_t begin, int64_t count, int32_t* out) const {
  ZS_REQUIRE(begin >= 0 && count >= 0 && begin + count <= num_tokens(), UsageError, "tokens ", begin, "..",
             begin + count, " are outside the token stream (", num_tokens(), " tokens)");
  for (int64_t done = 0; done < count;) {
    const size_t f = file_at(begin + done);
    const int64_t local = begin + done - begins_[f];
    const int64_t n = std::min(count - done, files_[f].num_tokens() - local);
    files_[f].read(local, n, out + done, options_.vocab_size);
    done += n;
  }
}

void TokenShards::read_loss_mask(int64_t begin, int64_t count, uint8_t* out) const {
  ZS_REQUIRE(begin >= 0 && count >= 0 && begin + count <= num_tokens(), UsageError, "tokens ", begin, "..",
             begin + count, " are outside the token stream (", num_tokens(), " tokens)");
  if (masks_.empty()) {
    std::fill(out, out + count, uint8_t{1});
    return;
  }
  for (int64_t done = 0; done < count;) {
    const size_t f = file_at(begin + done);
    const int64_t local = begin + done - begins_[f];
    const int64_t n = std::min(count - done, files_[f].num_tokens() - local);
    masks_[f].read(local, n, out + done);
    done += n;
  }
}

void TokenShards::require_doc_index(const char* what) const {
  ZS_REQUIRE(has_doc_index(), UsageError, what, " needs document indexes next to the shards (",
             docs_path_for(files_[0].path()), "); zeroshard-data index writes them for shards made elsewhere");
}

int64_t TokenShards::num_documents() const {
  require_doc_index("counting documents");
  return doc_begins_.back();
}

std::pair<int64_t, int64_t> TokenShards::document(int64_t d) const {
  require_doc_index("finding a document");
  ZS_REQUIRE(d >= 0 && d < doc_begins_.back(), UsageError, "document ", d, " is outside the shards (",
             doc_begins_.back(), " documents)");
  const auto it = std::upper_bound(doc_begins_.begin(), doc_begins_.end() - 1, d);
  const size_t f = static_cast<size_t>(it - doc_begins_.begin()) - 1;
  const int64_t local = d - doc_begins_[f];
  return {begins_[f] + docs_[f].offset(local), begins_[f] + docs_[f].offset(local + 1)};
}

void TokenShards::document_starts(int64_t begin, int64_t end, std::vector<int64_t>* out) const {
  require_doc_index("finding document boundaries");
  end = std::min(end, num_tokens());
  if (begin < 0 || begin + 1 >= end) return;
  for (size_t f = file_at(begin); f < files_.size() && begins_[f] < end; ++f) {
    if (files_[f].num_tokens() == 0) continue;
    if (begins_[f] > begin) out->push_back(begins_[f]);  // a file starts with a document
    const int64_t lo = std::max(begin, begins_[f]) - begins_[f];
    const int64_t hi = std::min(end, begins_[f + 1]) - begins_[f];
    const size_t first = out->size();
    docs_[f].starts_in(lo, hi, out);
    for (size_t i = first; i < out->size(); ++i) (*out)[i] += begins_[f];
  }
}

}  // namespace zeroshard::data
