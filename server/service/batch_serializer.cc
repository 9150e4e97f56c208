#include "server/service/batch_serializer.h"

#include <cstdint>
#include <string>
#include <utility>

#include <grpcpp/support/slice.h>

#include "absl/status/status.h"
#include "server/service/display_string.h"

namespace nearprep {
namespace {

// Field 15, wire type 2 (length-delimited): Batch.tensor and Tensor.data.
constexpr uint8_t kTag15Bytes = (15 << 3) | 2;

void AppendVarint(uint64_t v, std::string* out) {
  while (v >= 0x80) {
    out->push_back(static_cast<char>((v & 0x7F) | 0x80));
    v >>= 7;
  }
  out->push_back(static_cast<char>(v));
}

size_t VarintSize(uint64_t v) {
  size_t n = 1;
  while (v >= 0x80) {
    v >>= 7;
    ++n;
  }
  return n;
}

void ReleaseBatch(void* user_data) {
  delete static_cast<std::shared_ptr<const BatchData>*>(user_data);
}

}  // namespace

void BatchToProto(const BatchData& b, bool with_data, v1::Batch* out) {
  out->Clear();
  out->set_epoch(b.epoch);
  out->set_batch_index(b.batch_index);
  for (int64_t label : b.labels) out->add_labels(label);
  for (uint64_t id : b.sample_ids) out->add_sample_ids(id);
  for (const SampleParams& p : b.params) {
    v1::SampleParams* q = out->add_params();
    q->set_flipped(p.flip);
    q->set_brightness_delta(p.brightness_delta);
    q->set_saturation_factor(p.saturation_factor);
    q->mutable_crop()->set_y(static_cast<uint32_t>(p.crop.y));
    q->mutable_crop()->set_x(static_cast<uint32_t>(p.crop.x));
    q->mutable_crop()->set_height(static_cast<uint32_t>(p.crop.height));
    q->mutable_crop()->set_width(static_cast<uint32_t>(p.crop.width));
    q->set_source_height(static_cast<uint32_t>(p.source_height));
    q->set_source_width(static_cast<uint32_t>(p.source_width));
    q->set_contrast_factor(p.contrast_factor);
    q->set_hue_delta(p.hue_delta);
    if (p.jitter_ops > 0) {
      q->set_jitter_brightness(p.jitter_factor[0]);
      q->set_jitter_contrast(p.jitter_factor[1]);
      q->set_jitter_saturation(p.jitter_factor[2]);
      q->set_jitter_hue(p.jitter_factor[3]);
      for (int k = 0; k < p.jitter_ops; ++k) {
        q->add_jitter_order(p.jitter_order[k]);
      }
    }
    for (int k = 0; k < p.augment_steps; ++k) {
      v1::AugmentStep* a = q->add_augment();
      a->set_op(static_cast<v1::AugmentOp>(p.augment[k].op));
      a->set_magnitude(p.augment[k].magnitude);
    }
    if (p.erased) {
      v1::CropBox* e = q->mutable_erased();
      e->set_y(static_cast<uint32_t>(p.erase_box.y));
      e->set_x(static_cast<uint32_t>(p.erase_box.x));
      e->set_height(static_cast<uint32_t>(p.erase_box.height));
      e->set_width(static_cast<uint32_t>(p.erase_box.width));
    }
  }
  if (b.mix.kind != BatchMixKind::kNone) {
    v1::BatchMix* m = out->mutable_mix();
    m->set_kind(static_cast<v1::BatchMix::Kind>(b.mix.kind));
    m->set_lambda(b.mix.lambda);
    m->set_y1(static_cast<uint32_t>(b.mix.y1));
    m->set_x1(static_cast<uint32_t>(b.mix.x1));
    m->set_y2(static_cast<uint32_t>(b.mix.y2));
    m->set_x2(static_cast<uint32_t>(b.mix.x2));
  }
  for (int64_t label : b.mix_labels) out->add_mix_labels(label);
  for (const SampleErrorInfo& e : b.errors) {
    v1::SampleError* q = out->add_errors();
    q->set_sample_id(e.sample_id);
    // File names are bytes; string fields must be UTF-8 (display_string.h).
    q->set_path(DisplayString(e.path));
    q->set_path_bytes(e.path);
    q->set_code(absl::StatusCodeToString(e.status.code()));
    q->set_message(DisplayString(e.status.message()));
  }
  v1::StageTimings* t = out->mutable_timings();
  t->set_read_us(b.times.read_us);
  t->set_decode_us(b.times.decode_us);
  t->set_transform_us(b.times.transform_us);
  t->set_queue_wait_us(b.queue_wait_us);
  out->set_next_position(b.next_position);
  if (!b.resume_token.empty()) out->set_resume_token(b.resume_token);
  v1::Tensor* tensor = out->mutable_tensor();
  for (uint64_t d : b.shape) tensor->add_shape(d);
  tensor->set_dtype(static_cast<v1::DType>(b.dtype));
  tensor->set_layout(static_cast<v1::Layout>(b.layout));
  if (b.compression != TensorCompression::kNone) {
    tensor->set_compression(static_cast<v1::Compression>(b.compression));
    tensor->set_uncompressed_bytes(b.uncompressed_bytes);
  }
  if (with_data && b.tensor_bytes > 0) {
    tensor->set_data(reinterpret_cast<const char*>(b.tensor), b.tensor_bytes);
  }
}

std::string EncodeBatchPrefix(const BatchData& b) {
  v1::Batch header;
  BatchToProto(b, /*with_data=*/false, &header);
  // Serialize the header without its tensor, and the tensor without data;
  // then splice the two with the length-delimited tags of field 15.
  v1::Tensor tensor_head;
  tensor_head.Swap(header.mutable_tensor());
  header.clear_tensor();
  std::string out = header.SerializeAsString();
  const std::string tensor_bytes = tensor_head.SerializeAsString();
  const size_t data_field =
      b.tensor_bytes == 0
          ? 0
          : 1 + VarintSize(b.tensor_bytes) + b.tensor_bytes;
  const uint64_t tensor_len = tensor_bytes.size() + data_field;
  out.reserve(out.size() + 2 * (1 + 10) + tensor_bytes.size());
  out.push_back(static_cast<char>(kTag15Bytes));
  AppendVarint(tensor_len, &out);
  out += tensor_bytes;
  if (b.tensor_bytes > 0) {
    out.push_back(static_cast<char>(kTag15Bytes));
    AppendVarint(b.tensor_bytes, &out);
  }
  return out;
}

grpc::ByteBuffer SerializeBatch(std::shared_ptr<const BatchData> batch) {
  grpc::Slice prefix(EncodeBatchPrefix(*batch));
  if (batch->tensor_bytes == 0) return grpc::ByteBuffer(&prefix, 1);
  void* data = const_cast<uint8_t*>(batch->tensor);
  const size_t len = batch->tensor_bytes;
  auto* holder = new std::shared_ptr<const BatchData>(std::move(batch));
  grpc::Slice payload(data, len, &ReleaseBatch, holder);
  const grpc::Slice slices[2] = {std::move(prefix), std::move(payload)};
  return grpc::ByteBuffer(slices, 2);
}

}  // namespace nearprep
