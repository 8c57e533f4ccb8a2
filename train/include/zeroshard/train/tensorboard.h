// SPDX-License-Identifier: Apache-2.0
#pragma once
// TensorBoardWriter: training scalars as a TensorBoard event file, for `tensorboard --logdir DIR`
// (written beside the --metrics-out JSON lines; TrainingReport feeds both). The file is a
// sequence of TFRecords, each
//   uint64 length | uint32 masked CRC-32C of the 8 length bytes | data | uint32 masked CRC-32C of data
// (little-endian; mask: ((crc >> 15) | (crc << 17)) + 0xa282ead8), whose data is one serialized
// Event (train/proto/tensorboard.proto, TensorBoard's field numbers): first the file_version
// event, then one event per write_scalars call holding its (tag, value) pairs.
//
// The file is created when the writer is constructed (an unwritable folder is an IoError before
// training), named events.out.tfevents.<unix seconds>.<host>.<pid>.zeroshard as TensorBoard
// expects. Each event is written with one write(2) as soon as it is complete, so TensorBoard shows
// steps as they happen and a crashed run keeps every finished event. Write from one rank (rank
// 0). Thread-safe (a mutex per writer).

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace zeroshard {

class TensorBoardWriter {
 public:
  // Creates `dir` (and its parents) and the event file in it. Throws IoError naming the path.
  explicit TensorBoardWriter(const std::string& dir);
  ~TensorBoardWriter();
  TensorBoardWriter(const TensorBoardWriter&) = delete;
  TensorBoardWriter& operator=(const TensorBoardWriter&) = delete;

  // One event at `step` with every (tag, value) pair as a simple_value (a 32-bit float, as
  // TensorBoard stores scalars; NaN and infinities are written as they are).
  void write_scalars(int64_t step, const std::vector<std::pair<std::string, double>>& values);
  void write_scalar(int64_t step, const std::string& tag, double value) { write_scalars(step, {{tag, value}}); }

  const std::string& path() const { return path_; }
  int64_t events_written() const;

 private:
  void write_record(const std::string& data);

  std::string path_;
  int fd_ = -1;
  mutable std::mutex mu_;
  int64_t events_ = 0;
};

// TensorBoard's masked CRC-32C (CRC-32C, rotated right by 15 bits, plus 0xa282ead8).
uint32_t masked_crc32c(const void* data, size_t bytes);
// One TFRecord holding `data` (the framing above).
std::string tfrecord(const std::string& data);

}  // namespace zeroshard
