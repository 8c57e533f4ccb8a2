// SPDX-License-Identifier: Apache-2.0
// PNG output through libpng's simplified API (no setjmp in our code).

#include <png.h>

#include <cstring>

#include "plot.h"
#include "zeroshard/base/error.h"

namespace zeroshard::plot {

void write_png(const Image& image, const std::string& path) {
  ZS_REQUIRE(image.width > 0 && image.height > 0 &&
                 image.rgb.size() == static_cast<size_t>(image.width) * image.height * 3,
             UsageError, "write_png: image of ", image.width, "x", image.height, " has ", image.rgb.size(),
             " bytes, expected width x height x 3");
  png_image png;
  std::memset(&png, 0, sizeof(png));
  png.version = PNG_IMAGE_VERSION;
  png.width = static_cast<png_uint_32>(image.width);
  png.height = static_cast<png_uint_32>(image.height);
  png.format = PNG_FORMAT_RGB;
  const int ok = png_image_write_to_file(&png, path.c_str(), 0, image.rgb.data(), image.width * 3, nullptr);
  const std::string why = png.message;
  png_image_free(&png);
  ZS_REQUIRE(ok != 0, IoError, "cannot write PNG '", path, "': ", why.empty() ? "libpng failed" : why);
}

}  // namespace zeroshard::plot
