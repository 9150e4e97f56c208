// Decodes a received nearprep.v1.Batch message (a grpc::ByteBuffer, i.e.
// gRPC's receive slices) so that the tensor bytes are copied exactly once:
// from the slices straight into memory the caller chooses. Every other field
// is parsed with protobuf as usual.
//
// How: a protobuf CodedInputStream walks the top-level fields over the
// slices; Batch.tensor (15) is entered, and of it Tensor.data (15) is not
// parsed but copied (ReadRaw) into the buffer `allocate` returns for its
// length. All other fields, whatever their order, are re-serialized
// verbatim into a small side buffer and parsed with protobuf, so the header
// equals what protobuf would have produced (tensor.data left empty).
// A message protobuf would merge in a way this cannot copy once (a second
// Batch.tensor or Tensor.data field) is refused with DATA_LOSS; our daemon
// never sends one.
//
// Compressed tensors (Tensor.compression set, common/tensor_codec.h): the
// payload is copied into a per-thread scratch buffer and decoded into
// allocate(uncompressed size); the header then says COMPRESSION_NONE and
// uncompressed_bytes 0, exactly as if the tensor had come uncompressed. A
// damaged payload is DATA_LOSS ("compressed tensor: image 3: ..."). The
// Tensor fields that describe the payload must precede Tensor.data (as every
// protobuf serializer emits them).
//
// Thread-safety: a pure function; `raw` is read, not modified.
#ifndef NEARPREP_CLIENT_CPP_SRC_BATCH_DECODER_H_
#define NEARPREP_CLIENT_CPP_SRC_BATCH_DECODER_H_

#include <grpcpp/support/byte_buffer.h>

#include "absl/status/status.h"
#include "nearprep/client.h"
#include "nearprep/v1/nearprep.pb.h"

namespace nearprep {

// Parses `raw` into `header` (tensor.data left empty) and copies the tensor
// bytes into allocate(size). On error `header` is unspecified.
// DATA_LOSS: malformed message; RESOURCE_EXHAUSTED: allocate returned null.
absl::Status DecodeBatchInto(grpc::ByteBuffer* raw, v1::Batch* header,
                             const TensorAllocator& allocate);

// Decodes a compressed tensor in place in a parsed Batch (the Next() path):
// tensor.data becomes the elements and the compression fields are cleared.
// No-op for an uncompressed tensor. DATA_LOSS on a damaged payload.
absl::Status DecompressBatchTensor(v1::Batch* batch);

// Decodes `size` payload bytes described by `tensor` (its shape, dtype,
// layout, compression and uncompressed_bytes) into `dst`, which holds
// tensor.uncompressed_bytes() bytes. DATA_LOSS on any mismatch.
absl::Status DecodeTensorPayload(const v1::Tensor& tensor,
                                 const uint8_t* payload, size_t size,
                                 uint8_t* dst);

}  // namespace nearprep

#endif  // NEARPREP_CLIENT_CPP_SRC_BATCH_DECODER_H_
