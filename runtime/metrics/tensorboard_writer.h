// TensorBoard event files, written without TensorFlow or protobuf.
//
// An event file is a sequence of TFRecords, each
//   uint64 length | uint32 masked CRC-32C of the length | data | uint32
//   masked CRC-32C of the data            (little-endian)
// whose data is a serialized tensorflow.Event protobuf. The first event
// carries file_version "brain.Event:2"; each later one a wall time, a step
// and a Summary of scalar values (Summary.Value.simple_value), which is
// what TensorBoard's scalar dashboard and EventAccumulator read. The few
// protobuf fields involved are encoded by hand (varint and fixed-width
// wire types, field numbers from tensorflow/core/util/event.proto and
// tensorflow/core/framework/summary.proto).
//
//   ASSIGN_OR_RETURN(std::unique_ptr<EventFileWriter> tb,
//                    EventFileWriter::Create("runs/a", UnixSeconds()));
//   RETURN_IF_ERROR(tb->WriteScalars(UnixSeconds(), step,
//                                    {{"train/loss", 0.61f}}));
#ifndef TRAINC_RUNTIME_METRICS_TENSORBOARD_WRITER_H_
#define TRAINC_RUNTIME_METRICS_TENSORBOARD_WRITER_H_

#include <cstdint>
#include <fstream>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace trainc {

using ScalarValues = std::vector<std::pair<std::string, float>>;

// Serialized tensorflow.Event messages.
std::string EncodeFileVersionEvent(double wall_time);  // "brain.Event:2"
std::string EncodeScalarEvent(double wall_time, int64_t step,
                              const ScalarValues& scalars);

// `data` framed as one TFRecord.
std::string TfRecord(absl::string_view data);

// One event file in a TensorBoard log folder. Every write is flushed, so a
// crash loses at most the event being written.
class EventFileWriter {
 public:
  // Creates `dir` (and its parents) and in it
  // events.out.tfevents.<unix seconds>.<host>.<pid>, and writes the
  // file_version event.
  static absl::StatusOr<std::unique_ptr<EventFileWriter>> Create(
      const std::string& dir, double wall_time);

  const std::string& path() const { return path_; }

  absl::Status WriteScalars(double wall_time, int64_t step,
                            const ScalarValues& scalars);

 private:
  EventFileWriter(std::string path, std::ofstream out)
      : path_(std::move(path)), out_(std::move(out)) {}
  absl::Status WriteRecord(const std::string& event);

  std::string path_;
  std::ofstream out_;
};

}  // namespace trainc

#endif  // TRAINC_RUNTIME_METRICS_TENSORBOARD_WRITER_H_
