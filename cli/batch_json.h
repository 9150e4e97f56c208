// The JSON manifest written next to each fetched batch (batch_NNNNN.json):
// epoch, batch index, tensor shape/dtype/layout, sample ids, labels,
// per-sample parameters, skipped samples and stage timings.
//
// Thread-safety: free function.
#ifndef NEARPREP_CLIENT_CPP_SRC_BATCH_JSON_H_
#define NEARPREP_CLIENT_CPP_SRC_BATCH_JSON_H_

#include <string>

#include "nearprep/v1/nearprep.pb.h"

namespace nearprep {

// Pretty-printed JSON; `npy_file` is the name of the tensor's .npy file.
std::string BatchToJson(const v1::Batch& batch, const std::string& npy_file);

}  // namespace nearprep

#endif  // NEARPREP_CLIENT_CPP_SRC_BATCH_JSON_H_
