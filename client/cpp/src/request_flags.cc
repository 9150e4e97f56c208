#include "client/cpp/src/request_flags.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace nearprep {

absl::StatusOr<std::pair<uint32_t, uint32_t>> ParseShard(std::string_view s) {
  std::vector<std::string> parts = absl::StrSplit(std::string(s), '/');
  auto digits = [](const std::string& p) {
    return !p.empty() && p.size() <= 9 &&
           p.find_first_not_of("0123456789") == std::string::npos;
  };
  uint32_t i = 0, n = 0;
  if (parts.size() != 2 || !digits(parts[0]) || !digits(parts[1]) ||
      !absl::SimpleAtoi(parts[0], &i) || !absl::SimpleAtoi(parts[1], &n)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--shard: expected i/n (e.g. 0/4), got '", std::string(s),
                     "'"));
  }
  if (n == 0 || i >= n) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--shard: need 0 <= i < n and n >= 1, got '", std::string(s), "'"));
  }
  return std::make_pair(i, n);
}

void TlsFlags::Register(CLI::App* app) {
  app->add_option("--tls-ca", ca,
                  "connect with TLS, trusting the CA certificates in this "
                  "PEM file (default: plaintext)");
  CLI::Option* c = app->add_option(
      "--tls-cert", cert, "client certificate PEM (mutual TLS; with --tls-key)");
  CLI::Option* k = app->add_option(
      "--tls-key", key, "client private key PEM (mutual TLS; with --tls-cert)");
  c->needs(k);
  k->needs(c);
  app->add_option("--tls-server-name", server_name,
                  "expect this name in the server certificate instead of the "
                  "target's host (e.g. for IP-address targets)");
}

ClientOptions TlsFlags::ToClientOptions(const std::string& target) const {
  ClientOptions o;
  o.target = target;
  o.tls_root_ca_file = ca;
  o.tls_client_cert_file = cert;
  o.tls_client_key_file = key;
  o.tls_target_name_override = server_name;
  return o;
}

void RequestFlags::Register(CLI::App* app, bool with_batches) {
  app->add_option("--target", target, "daemon address host:port")
      ->capture_default_str();
  tls.Register(app);
  app->add_option("--dataset", dataset, "dataset name (see `nearprep info`)")
      ->required();
  app->add_option("--batch-size", batch_size, "samples per batch")
      ->capture_default_str();
  if (with_batches) {
    app->add_option("--batches", batches,
                    "stop after this many batches (0: whole shard)")
        ->capture_default_str();
  }
  app->add_option("--start-batch", start_batch, "first batch (resume point)")
      ->capture_default_str();
  app->add_option("--seed", seed, "seed of the order and the random draws")
      ->capture_default_str();
  app->add_option("--epoch", epoch, "epoch number")->capture_default_str();
  app->add_flag("--shuffle", shuffle, "shuffle the epoch order");
  app->add_option("--shuffle-mode", shuffle_mode,
                  "global | block (large sequential reads; docs/protocol.md)")
      ->check(CLI::IsMember({"global", "block"}))
      ->capture_default_str();
  app->add_option("--block-samples", block_samples,
                  "block shuffle: samples per block (0: the dataset's)");
  app->add_option("--open-blocks", open_blocks,
                  "block shuffle: blocks interleaved (0: 8)");
  app->add_option("--window", window,
                  "block shuffle: shuffle window in samples (0: 256)");
  app->add_option("--shard", shard, "shard i/n")->capture_default_str();
  app->add_flag("--drop-remainder", drop_remainder,
                "drop a final partial batch");
  app->add_option("--height", height, "output height")->capture_default_str();
  app->add_option("--width", width, "output width")->capture_default_str();
  app->add_option("--crop", crop, "none | center | rrc | resize-center")
      ->check(CLI::IsMember({"none", "center", "rrc", "resize-center"}))
      ->capture_default_str();
  app->add_option("--resize-shorter", resize_shorter,
                  "resize-center: new size of the shorter side (0: 256)");
  app->add_option("--center-fraction", center_fraction,
                  "center crop: fraction of each side (0: 0.875)");
  app->add_option("--scale", scale, "rrc: area range MIN MAX")
      ->expected(2);
  app->add_option("--ratio", ratio, "rrc: aspect ratio range MIN MAX")
      ->expected(2);
  app->add_option("--flip", flip, "left-right flip probability")
      ->capture_default_str();
  app->add_option("--brightness", brightness, "brightness max_delta")
      ->capture_default_str();
  app->add_option("--saturation", saturation, "saturation factor range L U")
      ->expected(2);
  app->add_flag("--no-clip", no_clip, "do not clip to [0, 1]");
  app->add_option("--mean", mean, "per-channel mean (3 values)")->expected(3);
  app->add_option("--std", std, "per-channel std (3 values)")->expected(3);
  app->add_option("--dtype", dtype, "float32 | float16 | bfloat16 | uint8")
      ->check(CLI::IsMember({"float32", "float16", "bfloat16", "uint8"}))
      ->capture_default_str();
  app->add_option("--layout", layout, "nhwc | nchw")
      ->check(CLI::IsMember({"nhwc", "nchw"}))
      ->capture_default_str();
  app->add_option("--compression", compression,
                  "uint8 wire compression: none | delta | gradient (zstd)")
      ->check(CLI::IsMember({"none", "delta", "gradient"}))
      ->capture_default_str();
  app->add_option("--compression-level", compression_level,
                  "zstd level, 0 = server default (1)")
      ->capture_default_str();
  app->add_option("--fidelity", fidelity, "tf | fast | torchvision")
      ->check(CLI::IsMember({"tf", "fast", "torchvision"}))
      ->capture_default_str();
  app->add_option("--policy", policy, "error policy: skip | fail")
      ->check(CLI::IsMember({"skip", "fail"}))
      ->capture_default_str();
  app->add_flag("--params", params, "ask for per-sample random parameters");
}

absl::StatusOr<v1::StreamBatchesRequest> RequestFlags::ToRequest() const {
  v1::StreamBatchesRequest r;
  if (dataset.empty()) return absl::InvalidArgumentError("--dataset: required");
  r.set_dataset(dataset);
  if (batch_size == 0) {
    return absl::InvalidArgumentError("--batch-size: must be >= 1");
  }
  r.set_batch_size(batch_size);
  r.set_max_batches(batches);
  r.set_start_batch(start_batch);
  r.set_seed(seed);
  r.set_epoch(epoch);
  r.set_shuffle(shuffle);
  if (shuffle_mode == "block") {
    r.set_shuffle_mode(v1::SHUFFLE_MODE_BLOCK);
    r.mutable_block_shuffle()->set_block_samples(block_samples);
    r.mutable_block_shuffle()->set_open_blocks(open_blocks);
    r.mutable_block_shuffle()->set_window(window);
  }
  absl::StatusOr<std::pair<uint32_t, uint32_t>> sh = ParseShard(shard);
  if (!sh.ok()) return sh.status();
  r.set_shard_index(sh->first);
  r.set_num_shards(sh->second);
  r.set_drop_remainder(drop_remainder);
  r.set_include_params(params);

  v1::Transform* t = r.mutable_transform();
  if (height == 0 || width == 0) {
    return absl::InvalidArgumentError("--height/--width: must be >= 1");
  }
  t->set_height(height);
  t->set_width(width);
  if (crop == "none") {
    t->set_crop(v1::CROP_MODE_NONE);
  } else if (crop == "center") {
    t->set_crop(v1::CROP_MODE_CENTER);
  } else if (crop == "rrc") {
    t->set_crop(v1::CROP_MODE_RANDOM_RESIZED);
  } else if (crop == "resize-center") {
    t->set_crop(v1::CROP_MODE_RESIZE_CENTER);
  } else {
    return absl::InvalidArgumentError(absl::StrCat(
        "--crop: none, center, rrc or resize-center, got '", crop, "'"));
  }
  t->set_resize_shorter_side(resize_shorter);
  t->set_center_fraction(center_fraction);
  if (!scale.empty()) {
    if (scale.size() != 2) return absl::InvalidArgumentError("--scale: 2 values");
    t->set_scale_min(scale[0]);
    t->set_scale_max(scale[1]);
  }
  if (!ratio.empty()) {
    if (ratio.size() != 2) return absl::InvalidArgumentError("--ratio: 2 values");
    t->set_ratio_min(ratio[0]);
    t->set_ratio_max(ratio[1]);
  }
  if (!(flip >= 0.0f && flip <= 1.0f)) {
    return absl::InvalidArgumentError("--flip: probability in [0, 1]");
  }
  t->set_flip_probability(flip);
  if (!(brightness >= 0.0f)) {
    return absl::InvalidArgumentError("--brightness: must be >= 0");
  }
  t->set_brightness_max_delta(brightness);
  if (!saturation.empty()) {
    if (saturation.size() != 2 || !(saturation[0] >= 0.0f) ||
        !(saturation[0] <= saturation[1])) {
      return absl::InvalidArgumentError(
          "--saturation: two values L U with 0 <= L <= U");
    }
    t->set_saturation_lower(saturation[0]);
    t->set_saturation_upper(saturation[1]);
  }
  t->set_disable_clip(no_clip);
  if (mean.size() != std.size() || (!mean.empty() && mean.size() != 3)) {
    return absl::InvalidArgumentError("--mean/--std: 3 values each, or none");
  }
  for (float m : mean) t->add_mean(m);
  for (float s : std) t->add_std(s);
  t->set_fidelity(fidelity == "fast"          ? v1::FIDELITY_FAST
                  : fidelity == "torchvision" ? v1::FIDELITY_TORCHVISION
                                              : v1::FIDELITY_TF_COMPAT);

  v1::OutputFormat* o = r.mutable_output();
  if (dtype == "float32") {
    o->set_dtype(v1::DTYPE_FLOAT32);
  } else if (dtype == "float16") {
    o->set_dtype(v1::DTYPE_FLOAT16);
  } else if (dtype == "bfloat16") {
    o->set_dtype(v1::DTYPE_BFLOAT16);
  } else if (dtype == "uint8") {
    o->set_dtype(v1::DTYPE_UINT8);
  } else {
    return absl::InvalidArgumentError(absl::StrCat("--dtype: unknown '", dtype, "'"));
  }
  o->set_layout(layout == "nchw" ? v1::LAYOUT_NCHW : v1::LAYOUT_NHWC);
  o->set_compression(compression == "delta"      ? v1::COMPRESSION_DELTA_ZSTD
                     : compression == "gradient" ? v1::COMPRESSION_GRADIENT_ZSTD
                                                 : v1::COMPRESSION_NONE);
  o->set_compression_level(compression_level);
  r.set_error_policy(policy == "fail" ? v1::ERROR_POLICY_FAIL_STREAM
                                      : v1::ERROR_POLICY_SKIP);
  return r;
}

std::string DTypeName(v1::DType d) {
  switch (d) {
    case v1::DTYPE_FLOAT32: return "float32";
    case v1::DTYPE_FLOAT16: return "float16";
    case v1::DTYPE_BFLOAT16: return "bfloat16";
    case v1::DTYPE_UINT8: return "uint8";
    default: return "unknown";
  }
}

std::string LayoutName(v1::Layout l) {
  return l == v1::LAYOUT_NCHW ? "NCHW" : "NHWC";
}

}  // namespace nearprep
