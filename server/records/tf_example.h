// Finds the image bytes and the label inside a serialized tf.train.Example
// (proto/nearprep/v1/tf_example.proto) without copying or fully parsing it:
// the index of a TFRecord shard stores where the JPEG starts inside each
// record, so serving a sample reads exactly those bytes.
//
// Rules (protobuf's): unknown fields are skipped; a map key given twice
// takes its last value; the first value of a list is used. The image feature
// must be a bytes_list with at least one value; the label feature an
// int64_list with at least one value (packed or not).
//
// Thread-safety: pure function.
#ifndef NEARPREP_SERVER_RECORDS_TF_EXAMPLE_H_
#define NEARPREP_SERVER_RECORDS_TF_EXAMPLE_H_

#include <cstddef>
#include <cstdint>
#include "absl/strings/string_view.h"

#include "absl/status/statusor.h"

namespace nearprep::records {

struct ExampleFields {
  uint64_t image_offset = 0;  // Inside the serialized Example.
  uint64_t image_size = 0;
  bool has_label = false;
  int64_t label = 0;
};

// DATA_LOSS for bytes that are not an Example, a missing image feature, or a
// label feature that is not an integer. An empty `label_key`, or a label
// feature that is absent, gives has_label = false.
absl::StatusOr<ExampleFields> LocateExampleFields(const uint8_t* data,
                                                  size_t n,
                                                  absl::string_view image_key,
                                                  absl::string_view label_key);

}  // namespace nearprep::records

#endif  // NEARPREP_SERVER_RECORDS_TF_EXAMPLE_H_
