// SPDX-License-Identifier: Apache-2.0
// Text and JSONL files into token shards on all cores, written in input order (corpus_builder.h).

#include "zeroshard/data/corpus_builder.h"

#include <unistd.h>

#include <algorithm>
#include <condition_variable>
#include <exception>
#include <map>
#include <mutex>
#include <thread>

#include "file_io.h"
#include "zeroshard/base/error.h"
#include "zeroshard/data/jsonl.h"

namespace zeroshard::data {
namespace {

bool is_jsonl(const std::string& path) {
  const std::string ext = ".jsonl";
  return path.size() >= ext.size() && path.compare(path.size() - ext.size(), ext.size(), ext) == 0;
}

// A unit of work: the lines of input `input` that start in bytes [begin, end) (a JSONL file), or
// the whole file as one document.
struct Piece {
  size_t input;
  int64_t begin, end;
  bool jsonl;
};

struct PieceResult {
  std::vector<Document> docs;
  std::vector<int64_t> doc_lines;  // per document: its line's index among the piece's lines (-1: a whole file)
  int64_t lines = 0;       // lines starting in the piece (blank ones included)
  int64_t empty = 0;       // records that gave no tokens
  int64_t error_line = -1; // the failing line's index among the piece's lines (-1: the whole file)
  std::string error;       // a DataError's message, without the location
  std::exception_ptr failure;
};

std::vector<Piece> plan_pieces(const std::vector<std::string>& inputs, int64_t chunk_bytes,
                               std::vector<int64_t>* sizes) {
  std::vector<Piece> pieces;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const int fd = open_for_reading(inputs[i], "input file");
    const int64_t size = file_size(fd, inputs[i]);
    ::close(fd);
    sizes->push_back(size);
    if (!is_jsonl(inputs[i])) {
      pieces.push_back({i, 0, size, false});
      continue;
    }
    for (int64_t b = 0; b < size; b += chunk_bytes) pieces.push_back({i, b, std::min(size, b + chunk_bytes), true});
  }
  return pieces;
}

// Calls fn(line, index) for every line of `fd` that starts in [begin, end), index from 0.
template <typename Fn>
void for_each_line(int fd, const std::string& path, int64_t begin, int64_t end, int64_t size, Fn&& fn) {
  std::string buf(static_cast<size_t>(end - begin), '\0');
  read_at(fd, begin, end - begin, buf.data(), path);
  size_t at = 0;
  if (begin > 0) {
    char before = 0;
    read_at(fd, begin - 1, 1, &before, path);
    if (before != '\n') {  // the piece starts inside a line that the previous piece owns
      const size_t nl = buf.find('\n');
      if (nl == std::string::npos) return;
      at = nl + 1;
    }
  }
  for (int64_t index = 0; begin + static_cast<int64_t>(at) < end; ++index) {
    size_t nl = buf.find('\n', at);
    while (nl == std::string::npos && begin + static_cast<int64_t>(buf.size()) < size) {
      const size_t old = buf.size();
      const int64_t more = std::min<int64_t>(std::max<int64_t>(old, 1 << 16), size - begin - old);
      buf.resize(old + static_cast<size_t>(more));
      read_at(fd, begin + static_cast<int64_t>(old), more, &buf[old], path);
      nl = buf.find('\n', old);
    }
    const size_t stop = nl == std::string::npos ? buf.size() : nl;
    fn(std::string_view(buf).substr(at, stop - at), index);
    at = stop + 1;
  }
}

void run_jsonl_piece(const Piece& p, const std::string& path, int64_t size, const RecordEncoder& encoder,
                     PieceResult* r) {
  const int fd = open_for_reading(path, "input file");
  try {
    for_each_line(fd, path, p.begin, p.end, size, [&](std::string_view line, int64_t index) {
      r->lines = index + 1;
      if (!r->error.empty() || is_blank(line)) return;
      try {
        Document doc = encoder.encode(parse_record(line));
        if (doc.tokens.empty()) {
          ++r->empty;
        } else {
          r->docs.push_back(std::move(doc));
          r->doc_lines.push_back(index);
        }
      } catch (const Error& e) {  // the record's own fault (JSON, template, tokenizer): named by file:line
        r->error_line = index;
        r->error = e.message();
      }
    });
  } catch (...) {
    ::close(fd);
    throw;
  }
  ::close(fd);
}

void run_text_piece(const Piece& p, const std::string& path, const RecordEncoder& encoder, PieceResult* r) {
  Record record;
  record.text.resize(static_cast<size_t>(p.end));
  const int fd = open_for_reading(path, "input file");
  try {
    read_at(fd, 0, p.end, record.text.data(), path);
  } catch (...) {
    ::close(fd);
    throw;
  }
  ::close(fd);
  try {
    Document doc = encoder.encode(record);
    if (doc.tokens.empty()) {
      ++r->empty;
    } else {
      r->docs.push_back(std::move(doc));
      r->doc_lines.push_back(-1);
    }
  } catch (const Error& e) {
    r->error = e.message();
  }
}

// Workers claim pieces in order, at most `window` ahead of the writer; results wait in `done`.
class Pipeline {
 public:
  Pipeline(const std::vector<Piece>& pieces, size_t window, std::function<void(size_t, PieceResult*)> work)
      : pieces_(pieces), window_(window), work_(std::move(work)) {}
  ~Pipeline() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    for (std::thread& t : threads_) t.join();
  }
  void start(int threads) {
    for (int i = 0; i < threads; ++i) threads_.emplace_back([this] { loop(); });
  }
  PieceResult take(size_t k) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return done_.count(k) > 0; });
    PieceResult r = std::move(done_[k]);
    done_.erase(k);
    taken_ = k + 1;
    cv_.notify_all();
    return r;
  }

 private:
  void loop() {
    for (;;) {
      size_t k;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return stop_ || next_ >= pieces_.size() || next_ < taken_ + window_; });
        if (stop_ || next_ >= pieces_.size()) return;
        k = next_++;
      }
      PieceResult r;
      try {
        work_(k, &r);
      } catch (...) {
        r.failure = std::current_exception();
      }
      std::lock_guard<std::mutex> lock(mu_);
      done_[k] = std::move(r);
      cv_.notify_all();
    }
  }

  const std::vector<Piece>& pieces_;
  size_t window_;
  std::function<void(size_t, PieceResult*)> work_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<size_t, PieceResult> done_;
  size_t next_ = 0, taken_ = 0;
  bool stop_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace

BuildResult build_shards(const BuildOptions& o, const RecordEncoder& encoder,
                         const std::function<void(const BuildProgress&)>& progress) {
  ZS_REQUIRE(!o.inputs.empty(), UsageError, "no input files");
  ZS_REQUIRE(o.chunk_bytes >= 1, UsageError, "the piece size (", o.chunk_bytes, " bytes) must be at least 1");
  std::vector<int64_t> sizes;
  const std::vector<Piece> pieces = plan_pieces(o.inputs, o.chunk_bytes, &sizes);
  BuildResult result;
  result.threads = o.threads > 0 ? o.threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  BuildProgress status;
  for (int64_t s : sizes) status.bytes_total += s;

  ShardWriter writer(o.writer);
  Pipeline pipeline(pieces, 2 * static_cast<size_t>(result.threads), [&](size_t k, PieceResult* r) {
    const Piece& p = pieces[k];
    if (p.jsonl) {
      run_jsonl_piece(p, o.inputs[p.input], sizes[p.input], encoder, r);
    } else {
      run_text_piece(p, o.inputs[p.input], encoder, r);
    }
  });
  pipeline.start(result.threads);
  std::vector<int64_t> lines_before(o.inputs.size(), 0);  // per input: lines of its pieces written so far
  for (size_t k = 0; k < pieces.size(); ++k) {
    PieceResult r = pipeline.take(k);
    const Piece& p = pieces[k];
    const std::string& path = o.inputs[p.input];
    if (r.failure) std::rethrow_exception(r.failure);
    if (!r.error.empty() && r.error_line < 0) ZS_THROW(DataError, path, ": ", r.error);
    if (!r.error.empty()) ZS_THROW(DataError, path, ":", lines_before[p.input] + r.error_line + 1, ": ", r.error);
    const int64_t first_line = lines_before[p.input];
    lines_before[p.input] += r.lines;
    for (size_t d = 0; d < r.docs.size(); ++d) {
      const Document& doc = r.docs[d];
      try {
        writer.add(doc);
      } catch (const DataError& e) {  // e.g. a token id beyond the shards' vocabulary: the record's
        if (r.doc_lines[d] < 0) ZS_THROW(DataError, path, ": ", e.message());
        ZS_THROW(DataError, path, ":", first_line + r.doc_lines[d] + 1, ": ", e.message());
      }
      result.documents += 1;
      result.tokens += doc.size();
      if (o.seq_len > 0 && doc.size() > o.seq_len + 1) result.longer_than_seq += 1;
    }
    result.empty_records += r.empty;
    status.bytes_done += p.end - p.begin;
    status.documents = result.documents;
    status.tokens = result.tokens;
    if (progress) progress(status);
  }
  result.shards = writer.finish();
  for (const WrittenShard& s : result.shards) result.trained_tokens += s.trained_tokens;
  result.bytes_read = status.bytes_total;
  return result;
}

}  // namespace zeroshard::data
