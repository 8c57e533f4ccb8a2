// SPDX-License-Identifier: Apache-2.0
#pragma once
// What test_launcher.cpp and test_launcher_trial.cpp (one binary) both use.

#include <exception>
#include <functional>
#include <string>

namespace zs_launcher_test {

// The message of the E that `fn` throws, or a text that names what happened instead.
template <typename E>
std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const E& e) {
    return e.message();
  } catch (const std::exception& e) {
    return std::string("<wrong exception type: ") + e.what() + ">";
  }
  return "<no exception>";
}

inline bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

}  // namespace zs_launcher_test
