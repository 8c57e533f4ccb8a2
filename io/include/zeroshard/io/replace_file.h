// SPDX-License-Identifier: Apache-2.0
#pragma once
// Putting a file in place whole: write it under temp_name_for(path) (same directory, so the
// rename stays within one filesystem), then replace_with_temp(tmp, path) syncs it, renames it
// over `path` and syncs the directory. A crash or a failed write leaves the earlier `path` (or
// none), never a truncated file under the final name.

#include <string>

namespace zeroshard {

// "<path>.tmp": the temporary name beside `path`.
std::string temp_name_for(const std::string& path);

// fsync `tmp`, rename it to `path`, fsync the directory. IoError naming the step that failed and
// both files; `tmp` is removed when the rename did not happen.
void replace_with_temp(const std::string& tmp, const std::string& path);

}  // namespace zeroshard
