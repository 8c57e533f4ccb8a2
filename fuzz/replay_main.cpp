// SPDX-License-Identifier: Apache-2.0
// A harness without libFuzzer (the normal compiler, no sanitizer): runs LLVMFuzzerTestOneInput on
// every file given (folders: the files in them), then on `--mutations N` mutations of each, made
// from a fixed seed so that a failure repeats. What the test suite runs on the committed seeds in
// fuzz/seeds/; scripts/fuzz.sh runs the coverage-guided fuzzer with the sanitizers.
//
//   fuzz_replay_manifest [--mutations N] [--seed S] FILE_OR_FOLDER...
//
// A crash or an exception that is not a zeroshard error ends the process (the harness rethrows
// nothing else); before each mutated input the replay writes it to <program>-last.bin in the
// current folder (removed when every input passed), so the input that failed is at hand. Exit 0 after every input ran.

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <iterator>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {

struct Rng {
  uint64_t s;
  uint64_t next() {  // xorshift64*
    s ^= s >> 12;
    s ^= s << 25;
    s ^= s >> 27;
    return s * 2685821657736338717ULL;
  }
  size_t below(size_t n) { return n == 0 ? 0 : static_cast<size_t>(next() % n); }
};

// One to four edits: a byte changed (flipped, or set to a boundary value), a range removed or
// repeated, random bytes inserted, the tail cut, or a little-endian integer field overwritten.
std::string mutate(std::string in, Rng& rng) {
  static const uint8_t kBoundary[] = {0x00, 0x01, 0x7f, 0x80, 0xff, '"', '{', '[', ':', ',', '\n'};
  const int edits = 1 + static_cast<int>(rng.below(4));
  for (int e = 0; e < edits; ++e) {
    const size_t n = in.size();
    switch (rng.below(7)) {
      case 0:
        if (n > 0) in[rng.below(n)] ^= static_cast<char>(1u << rng.below(8));
        break;
      case 1:
        if (n > 0) in[rng.below(n)] = static_cast<char>(kBoundary[rng.below(sizeof(kBoundary))]);
        break;
      case 2:
        if (n > 0) {
          const size_t at = rng.below(n);
          in.erase(at, 1 + rng.below(std::min<size_t>(64, n - at)));
        }
        break;
      case 3:
        if (n > 0) {
          const size_t at = rng.below(n);
          const std::string piece = in.substr(at, 1 + rng.below(std::min<size_t>(64, n - at)));
          in.insert(rng.below(n + 1), piece);
        }
        break;
      case 4: {
        std::string piece(1 + rng.below(8), '\0');
        for (char& c : piece) c = static_cast<char>(rng.next());
        in.insert(rng.below(n + 1), piece);
        break;
      }
      case 5:
        if (n > 0) in.resize(rng.below(n));
        break;
      default:
        if (n >= 8) {
          const size_t at = rng.below(n - 7);
          const uint64_t v = rng.below(2) != 0 ? (~0ULL >> rng.below(64)) : rng.next();
          for (int i = 0; i < 8; ++i) in[at + i] = static_cast<char>((v >> (8 * i)) & 0xff);
        }
        break;
    }
  }
  return in;
}

std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

[[noreturn]] void usage(const std::string& why) {
  std::cerr << "fuzz replay: error: " << why << "\nusage: fuzz_replay_<harness> [--mutations N] [--seed S] FILE_OR_FOLDER...\n";
  std::exit(2);
}

}  // namespace

int main(int argc, char** argv) {
  uint64_t mutations = 0;
  uint64_t seed = 1;
  std::vector<std::string> files;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--mutations" || a == "--seed") {
      if (i + 1 >= argc) usage(a + " needs a value");
      char* end = nullptr;
      const unsigned long long v = std::strtoull(argv[++i], &end, 10);
      if (end == argv[i] || *end != '\0') usage(a + " needs a whole number, got '" + argv[i] + "'");
      (a == "--seed" ? seed : mutations) = v;
    } else if (std::filesystem::is_directory(a)) {
      for (const auto& e : std::filesystem::directory_iterator(a)) {
        if (e.is_regular_file()) files.push_back(e.path().string());
      }
    } else if (std::filesystem::is_regular_file(a)) {
      files.push_back(a);
    } else {
      usage("'" + a + "' is neither a file nor a folder");
    }
  }
  if (files.empty()) usage("no inputs");
  std::sort(files.begin(), files.end());
  const std::string last = std::filesystem::path(argv[0]).filename().string() + "-last.bin";
  long runs = 0;
  for (const std::string& f : files) {
    const std::string bytes = read_all(f);
    LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
    ++runs;
    Rng rng{seed * 0x9E3779B97F4A7C15ULL + std::hash<std::string>{}(std::filesystem::path(f).filename().string()) | 1};
    for (uint64_t k = 0; k < mutations; ++k) {
      const std::string m = mutate(bytes, rng);
      std::ofstream(last, std::ios::binary | std::ios::trunc).write(m.data(), static_cast<std::streamsize>(m.size()));
      LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(m.data()), m.size());
      ++runs;
    }
  }
  std::filesystem::remove(last);
  std::printf("fuzz replay: %ld inputs from %zu seeds (%llu mutations each, seed %llu), no finding\n", runs, files.size(),
              static_cast<unsigned long long>(mutations), static_cast<unsigned long long>(seed));
  return 0;
}
