// SPDX-License-Identifier: Apache-2.0
// zeroshard-trace DIR: where the ranks of a hung or failed job parted, from the flight recorder's
// files (trace.h, docs/cluster.md). Exit status 0 when the ranks agree, 1 when they do not (or a
// file is missing), 2 for a bad command line or unreadable files.

#include <cstdio>
#include <string>

#include "trace.h"
#include "zeroshard/base/cli.h"
#include "zeroshard/base/error.h"

int main(int argc, char** argv) {
  std::string dir;
  zeroshard::cli::App app("zeroshard-trace",
                          "Reads the flight recorder's files of every rank (flight-rank<R>.jsonl in DIR, "
                          "comm.flight_recorder_dir) and says where the ranks parted.");
  app.usage("zeroshard-trace DIR");
  app.add_text("DIR", &dir, "the folder the ranks wrote their flight-rank<R>.jsonl into", "")->required();
  try {
    if (!app.parse(std::vector<std::string>(argv, argv + argc))) return 0;
    const std::vector<zeroshard::trace::RankDump> dumps = zeroshard::trace::read_dumps(dir);
    const std::vector<std::string> lines = zeroshard::trace::analyze(dumps);
    bool agree = true;
    for (const std::string& l : lines) {
      std::printf("%s\n", l.c_str());
      agree = agree && (l.find("never issued") == std::string::npos && l.find("diverged") == std::string::npos &&
                        l.find("no file from") == std::string::npos && l.find("not complete") == std::string::npos);
    }
    return agree ? 0 : 1;
  } catch (const zeroshard::UsageError& e) {
    std::fprintf(stderr, "zeroshard-trace: usage error: %s\n", e.message().c_str());
    return 2;
  } catch (const zeroshard::Error& e) {
    std::fprintf(stderr, "zeroshard-trace: error: %s\n", e.message().c_str());
    return 2;
  }
}
