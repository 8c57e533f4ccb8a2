// SPDX-License-Identifier: Apache-2.0
// Open MPI hostfiles: "HOST [slots=K] [max_slots=K]" per line, '#' comments.

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <set>
#include <sstream>

#include "zeroshard/base/error.h"
#include "zeroshard/launcher/launch.h"

namespace zeroshard::launch {
namespace {

int parse_count(const std::string& where, const std::string& key, const std::string& text) {
  errno = 0;
  char* end = nullptr;
  long v = std::strtol(text.c_str(), &end, 10);
  ZS_REQUIRE(!text.empty() && *end == '\0' && errno == 0 && v >= 1 && v <= 1 << 20, ConfigError, where, ": ", key,
             "='", text, "' is not a count; expected a whole number >= 1, e.g. ", key, "=8");
  return static_cast<int>(v);
}

}  // namespace

std::vector<HostEntry> parse_hostfile_text(const std::string& text, const std::string& source) {
  std::vector<HostEntry> hosts;
  std::set<std::string> seen;
  std::istringstream in(text);
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    const std::string where = source + ":" + std::to_string(number);
    const size_t hash = line.find('#');
    if (hash != std::string::npos) line.resize(hash);
    std::istringstream words(line);
    std::string word;
    if (!(words >> word)) continue;  // blank or comment
    ZS_REQUIRE(word.find('=') == std::string::npos, ConfigError, where, ": line starts with '", word,
               "' but a hostfile line starts with a host name, e.g. \"node1 slots=8\"");
    HostEntry e;
    e.host = word;
    e.line = number;
    bool have_slots = false;
    int max_slots = 0;
    while (words >> word) {
      const size_t eq = word.find('=');
      const std::string key = word.substr(0, eq);
      ZS_REQUIRE(eq != std::string::npos && (key == "slots" || key == "max_slots" || key == "max-slots"),
                 ConfigError, where, ": unexpected '", word, "' after host '", e.host,
                 "'; allowed: slots=K, max_slots=K");
      const int v = parse_count(where, key, word.substr(eq + 1));
      if (key == "slots") {
        ZS_REQUIRE(!have_slots, ConfigError, where, ": slots given twice for host '", e.host, "'");
        e.slots = v;
        have_slots = true;
      } else {
        max_slots = v;
      }
    }
    ZS_REQUIRE(max_slots == 0 || max_slots >= e.slots, ConfigError, where, ": max_slots=", max_slots,
               " is below slots=", e.slots, " for host '", e.host, "'");
    ZS_REQUIRE(seen.insert(e.host).second, ConfigError, where, ": host '", e.host,
               "' is listed again; give each host one line with its total slots");
    hosts.push_back(e);
  }
  ZS_REQUIRE(!hosts.empty(), ConfigError, source, ": no host in the hostfile; write one \"HOST slots=K\" per line");
  return hosts;
}

std::vector<HostEntry> parse_hostfile(const std::string& path) {
  const int fd = ZS_CHECK_ERRNO(::open(path.c_str(), O_RDONLY | O_CLOEXEC), "cannot read hostfile '", path, "'");
  std::string text;
  struct stat st {};
  int rc = ::fstat(fd, &st);
  if (rc == 0 && S_ISDIR(st.st_mode)) {
    ::close(fd);
    ZS_THROW(IoError, "hostfile '", path, "' is a directory; give a file with one \"HOST slots=K\" per line");
  }
  char buf[4096];
  ssize_t n = 0;
  while ((n = ::read(fd, buf, sizeof(buf))) > 0) text.append(buf, static_cast<size_t>(n));
  const int err = errno;
  ::close(fd);
  ZS_REQUIRE(n == 0, IoError, "error while reading hostfile '", path, "': ", detail::errno_string(err));
  return parse_hostfile_text(text, path);
}

}  // namespace zeroshard::launch
