// SPDX-License-Identifier: Apache-2.0
#pragma once
// The texts of the errors a test provokes, and the check that a text holds a part. Header-only,
// needing only base/ and GoogleTest, so the tests of the layers without LibTorch or MPI use it too.

#include <gtest/gtest.h>

#include <exception>
#include <functional>
#include <string>

#include "zeroshard/base/error.h"

namespace zeroshard::test {

// what() (with rank and location) of the `Err` that `fn` throws; "<no exception>", or "<not the
// expected type: ...>" for another exception, so that an assertion on the text fails and shows
// what happened.
template <typename Err = Error>
std::string error_text_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Err& e) {
    return e.what();
  } catch (const std::exception& e) {
    return std::string("<not the expected type: ") + e.what() + ">";
  }
  return "<no exception>";
}

// message() (without rank and location) of the `Err` that `fn` throws; otherwise as error_text_of.
template <typename Err = Error>
std::string message_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Err& e) {
    return e.message();
  } catch (const std::exception& e) {
    return std::string("<not the expected type: ") + e.what() + ">";
  }
  return "<no exception>";
}

inline bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

}  // namespace zeroshard::test

// Expects `part` in `text` (std::string or C strings), printing both when it is missing.
#define EXPECT_CONTAINS(text, part) \
  EXPECT_NE(std::string(text).find(part), std::string::npos) << "'" << (part) << "' not in: " << (text)
