// torch.save / TorchScript zip archives (tensor_file.h). In progress on a branch.

#include "zeroshard/base/error.h"
#include "zeroshard/io/tensor_file.h"

namespace zeroshard {

std::unique_ptr<TensorFile> open_torch_zip_file(const std::string& path) {
  ZS_THROW(IoError, "'", path, "': reading torch zip archives is not built into this zeroshard yet");
}

}  // namespace zeroshard
