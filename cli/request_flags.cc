#include "cli/request_flags.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <optional>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "cli/vocabulary.h"
#include "google/protobuf/util/json_util.h"
#include "proto/options/field_range.h"

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
    return absl::InvalidArgumentError(absl::StrCat(
        "--shard: expected i/n (e.g. 0/4), got '", std::string(s), "'"));
  }
  if (n == 0 || i >= n) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--shard: need 0 <= i < n and n >= 1, got '", std::string(s), "'"));
  }
  return std::make_pair(i, n);
}

CLI::Validator TargetValidator(bool list) {
  return CLI::Validator(
      [list](std::string& value) -> std::string {
        std::vector<std::string> targets;
        if (list) {
          targets = absl::StrSplit(value, ',', absl::SkipWhitespace());
        } else {
          targets.push_back(value);
        }
        if (targets.empty()) return "no address given";
        for (const std::string& t : targets) {
          absl::Status st = ValidateTarget(t);
          if (!st.ok()) return std::string(st.message());
        }
        return "";
      },
      list ? "HOST:PORT[,HOST:PORT...]" : "HOST:PORT", "target");
}

void TlsFlags::Register(CLI::App* app) {
  app->add_option("--reconnect-deadline,--connect-timeout",
                  reconnect_deadline_s,
                  "seconds a stream keeps trying to reach the daemon (first "
                  "connection or after a break) before it fails; 0: no retry")
      ->check(CLI::Range(0.0, 1e7))
      ->capture_default_str();
  app->add_option("--tls-ca", ca,
                  "connect with TLS, trusting the CA certificates in this "
                  "PEM file (default: plaintext)");
  CLI::Option* c =
      app->add_option("--tls-cert", cert,
                      "client certificate PEM (mutual TLS; with --tls-key)");
  CLI::Option* k = app->add_option(
      "--tls-key", key, "client private key PEM (mutual TLS; with --tls-cert)");
  c->needs(k);
  k->needs(c);
  app->add_option("--tls-server-name", server_name,
                  "expect this name in the server certificate instead of the "
                  "target's host (e.g. for IP-address targets)");
  app->add_option("--token-file", token_file,
                  "send the bearer token in this file (first line) on every "
                  "call; default $NEARPREP_TOKEN_FILE, else the token in "
                  "$NEARPREP_TOKEN")
      ->envname("NEARPREP_TOKEN_FILE");
}

ClientOptions TlsFlags::ToClientOptions(const std::string& target) const {
  ClientOptions o;
  o.target = target;
  o.tls_root_ca_file = ca;
  o.tls_client_cert_file = cert;
  o.tls_client_key_file = key;
  o.tls_target_name_override = server_name;
  o.bearer_token_file = token_file;
  if (token_file.empty()) {
    if (const char* token = std::getenv("NEARPREP_TOKEN"))
      o.bearer_token = token;
  }
  o.reconnect_deadline = std::chrono::milliseconds(
      static_cast<int64_t>(reconnect_deadline_s * 1000));
  // Say what the stream waits for: on a terminal one line rewritten every
  // second, else a line when the wait starts and then every 10 s.
  const bool tty = ::isatty(2) != 0;
  auto printed = std::make_shared<std::chrono::milliseconds>(-1);
  o.on_reconnect_wait = [tty, printed](const ReconnectWait& w) {
    if (!tty && *printed >= std::chrono::milliseconds(0) &&
        w.waited >= *printed &&
        w.waited - *printed < std::chrono::seconds(10)) {
      return;
    }
    *printed = w.waited;
    std::fprintf(stderr, "%swaiting for %s: %s (%lld s of %g s)%s",
                 tty ? "\r" : "", w.target.c_str(), w.reason.c_str(),
                 static_cast<long long>(w.waited.count() / 1000),
                 w.deadline.count() / 1000.0, tty ? "          " : "\n");
    std::fflush(stderr);
  };
  return o;
}

CLI::Validator UnsignedValidator(uint64_t max, const std::string& why) {
  return CLI::Validator(
      [max, why](std::string& value) -> std::string {
        bool ok = !value.empty() && value.size() <= 20;
        uint64_t v = 0;
        for (char ch : value) {
          if (ch < '0' || ch > '9') {
            ok = false;
            break;
          }
          const uint64_t d = static_cast<uint64_t>(ch - '0');
          if (v > (UINT64_MAX - d) / 10) {
            ok = false;
            break;
          }
          v = v * 10 + d;
        }
        if (ok && v <= max) return "";
        return "must be an integer in [0, " + std::to_string(max) + "]" + why +
               ", got '" + value + "'";
      },
      "UINT", "unsigned");
}

CLI::Validator EnumValidator(const google::protobuf::EnumDescriptor* e) {
  return CLI::Validator(
      [e](std::string& value) -> std::string {
        absl::StatusOr<int> v = ParseEnumValue(e, "", value);
        return v.ok() ? "" : "one of " + absl::StrJoin(EnumValueNames(e), ", ");
      },
      "", e->name());
}

namespace {

// The help note of a flag's older name.
std::string Older(const std::string& flag) {
  return " (" + flag + ": older spelling, deprecated, still accepted)";
}

}  // namespace

void RequestFlags::Register(CLI::App* app, bool with_batches) {
  app->add_option("--target", target, "daemon address host:port")
      ->check(TargetValidator(target_list))
      ->capture_default_str();
  tls.Register(app);
  app->add_option("--dataset", dataset, "dataset name (see `nearprep info`)")
      ->required();
  app->add_option("--batch-size", batch_size, "samples per batch")
      ->capture_default_str();
  if (with_batches) {
    app->add_option(
           "--max-batches,--batches", batches,
           "stop after this many batches (0: whole shard)" + Older("--batches"))
        ->check(UnsignedValidator(UINT64_MAX))
        ->capture_default_str();
  }
  app->add_option("--start-batch", start_batch, "first batch (resume point)")
      ->check(UnsignedValidator(UINT64_MAX))
      ->capture_default_str();
  app->add_option("--resume-token", resume_token,
                  "resume after the batch whose resume_token this is (fetch's "
                  "batch_NNNNN.json; bound to the stream: the daemon refuses "
                  "another stream's)");
  app->add_option("--seed", seed, "seed of the order and the random draws")
      ->check(UnsignedValidator(UINT64_MAX))
      ->capture_default_str();
  app->add_option("--epoch", epoch, "epoch number")
      ->check(UnsignedValidator(UINT64_MAX))
      ->capture_default_str();
  app->add_flag("--shuffle", shuffle, "shuffle the epoch order");
  app->add_option("--shuffle-mode", shuffle_mode,
                  EnumHelp(v1::ShuffleMode_descriptor()) +
                      " (block: large sequential reads; docs/protocol.md)")
      ->check(EnumValidator(v1::ShuffleMode_descriptor()))
      ->capture_default_str();
  app->add_option("--block-samples", block_samples,
                  "block shuffle: samples per block (0: the dataset's)")
      ->check(UnsignedValidator(UINT64_MAX));
  app->add_option("--open-blocks", open_blocks,
                  "block shuffle: blocks interleaved (0: 8)");
  app->add_option("--window", window,
                  "block shuffle: shuffle window in samples (0: 256)");
  app->add_option("--shard", shard, "shard i/n")->capture_default_str();
  app->add_flag("--drop-remainder", drop_remainder,
                "drop a final partial batch");
  app->add_option("--height", height, "output height")->capture_default_str();
  app->add_option("--width", width, "output width")->capture_default_str();
  app->add_option("--crop", crop, EnumHelp(v1::CropMode_descriptor()))
      ->check(EnumValidator(v1::CropMode_descriptor()))
      ->capture_default_str();
  app->add_option("--resize-shorter-side,--resize-shorter", resize_shorter,
                  "resize_center: new size of the shorter side (0: 256)" +
                      Older("--resize-shorter"));
  app->add_option("--center-fraction", center_fraction,
                  "center crop: fraction of each side (0: 0.875)");
  app->add_option("--scale", scale, "random_resized: area range MIN MAX")
      ->expected(2);
  app->add_option("--ratio", ratio,
                  "random_resized: aspect ratio range MIN MAX")
      ->expected(2);
  app->add_option("--flip-probability,--flip", flip,
                  "left-right flip probability" + Older("--flip"))
      ->capture_default_str();
  app->add_option("--brightness-max-delta,--brightness", brightness,
                  "brightness max_delta" + Older("--brightness"))
      ->capture_default_str();
  app->add_option("--saturation", saturation, "saturation factor range L U")
      ->expected(2);
  app->add_option("--color-ops", color_ops,
                  "order of the colour ops, every enabled one once: " +
                      EnumHelp(v1::ColorOp_descriptor()) +
                      " (default: gamma brightness contrast saturation hue)");
  app->add_option("--auto-augment", auto_augment,
                  "torchvision policy: " + EnumHelp(v1::AutoAugment_descriptor()) +
                      "; or torchvision's reference names ta_wide, ra");
  app->add_option("--erase-probability,--random-erase", erase_probability,
                  "torchvision RandomErasing probability (0: off)");
  app->add_option("--rand-augment-magnitude,--ra-magnitude", ra_magnitude,
                  "RandAugment magnitude bin in [0, 30] (0: 9)");
  app->add_option("--rand-augment-num-ops,--ra-num-ops", ra_num_ops,
                  "RandAugment ops per image (0: 2)");
  app->add_option("--erase-value", erase_value,
                  "torchvision RandomErasing value: 1 or 3 values (default 0)")
      ->expected(1, 3);
  app->add_flag("--no-clip", no_clip, "do not clip to [0, 1]");
  app->add_option("--mean", mean, "per-channel mean (3 values)")->expected(3);
  app->add_option("--std", std, "per-channel std (3 values)")->expected(3);
  app->add_option("--dtype", dtype, EnumHelp(v1::DType_descriptor()))
      ->check(EnumValidator(v1::DType_descriptor()))
      ->capture_default_str();
  app->add_option("--layout", layout, EnumHelp(v1::Layout_descriptor()))
      ->check(EnumValidator(v1::Layout_descriptor()))
      ->capture_default_str();
  app->add_option(
         "--compression", compression,
         "uint8 wire compression: " + EnumHelp(v1::Compression_descriptor()))
      ->check(EnumValidator(v1::Compression_descriptor()))
      ->capture_default_str();
  app->add_option("--compression-level", compression_level,
                  "zstd level, 0 = server default (1)")
      ->capture_default_str();
  app->add_option("--fidelity", fidelity, EnumHelp(v1::Fidelity_descriptor()))
      ->check(EnumValidator(v1::Fidelity_descriptor()))
      ->capture_default_str();
  app->add_option("--error-policy,--policy", policy,
                  "error policy: " + EnumHelp(v1::ErrorPolicy_descriptor()) +
                      Older("--policy"))
      ->check(EnumValidator(v1::ErrorPolicy_descriptor()))
      ->capture_default_str();
  app->add_flag("--include-params,--params", params,
                "ask for per-sample random parameters" + Older("--params"));
  // transform.scale_* and ratio_* and saturation_* are set as pairs, and
  // disable_clip by --no-clip (the Python client's keywords, request.py).
  RegisterFieldFlags(app, v1::Transform::descriptor(),
                     {"scale_min", "scale_max", "ratio_min", "ratio_max",
                      "saturation_lower", "saturation_upper", "disable_clip"},
                     &more_transform);
  app->add_flag("--dry-run", dry_run,
                "print the request that would be sent (protobuf JSON, proto "
                "field and enum names) and exit without connecting");
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
  r.set_resume_token(resume_token);
  r.set_seed(seed);
  r.set_epoch(epoch);
  r.set_shuffle(shuffle);
  absl::StatusOr<int> mode = ParseEnumValue(v1::ShuffleMode_descriptor(),
                                            "--shuffle-mode", shuffle_mode);
  if (!mode.ok()) return mode.status();
  if (*mode == v1::SHUFFLE_MODE_BLOCK) {
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
  absl::StatusOr<int> crop_mode =
      ParseEnumValue(v1::CropMode_descriptor(), "--crop", crop);
  if (!crop_mode.ok()) return crop_mode.status();
  t->set_crop(static_cast<v1::CropMode>(*crop_mode));
  t->set_resize_shorter_side(resize_shorter);
  t->set_center_fraction(center_fraction);
  if (!scale.empty()) {
    if (scale.size() != 2)
      return absl::InvalidArgumentError("--scale: 2 values");
    t->set_scale_min(scale[0]);
    t->set_scale_max(scale[1]);
  }
  if (!ratio.empty()) {
    if (ratio.size() != 2)
      return absl::InvalidArgumentError("--ratio: 2 values");
    t->set_ratio_min(ratio[0]);
    t->set_ratio_max(ratio[1]);
  }
  t->set_flip_probability(flip);
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
  for (const std::string& name : color_ops) {
    absl::StatusOr<int> op =
        ParseEnumValue(v1::ColorOp_descriptor(), "--color-ops", name);
    if (!op.ok()) return op.status();
    t->add_color_ops(static_cast<v1::ColorOp>(*op));
  }
  {
    // torchvision's reference names for its policies.
    std::string policy = auto_augment;
    if (policy == "ta_wide") policy = "trivial_augment_wide";
    if (policy == "ra") policy = "rand_augment";
    absl::StatusOr<int> aa = ParseEnumValue(v1::AutoAugment_descriptor(),
                                            "--auto-augment", policy);
    if (!aa.ok()) return aa.status();
    t->set_auto_augment(static_cast<v1::AutoAugment>(*aa));
  }
  t->set_erase_probability(erase_probability);
  t->set_rand_augment_magnitude(ra_magnitude);
  t->set_rand_augment_num_ops(ra_num_ops);
  if (erase_value.size() == 2) {
    return absl::InvalidArgumentError("--erase-value: 1 or 3 values");
  }
  for (float v : erase_value) t->add_erase_value(v);
  t->set_disable_clip(no_clip);
  if (mean.size() != std.size() || (!mean.empty() && mean.size() != 3)) {
    return absl::InvalidArgumentError("--mean/--std: 3 values each, or none");
  }
  for (float m : mean) t->add_mean(m);
  for (float s : std) t->add_std(s);
  absl::StatusOr<int> fid =
      ParseEnumValue(v1::Fidelity_descriptor(), "--fidelity", fidelity);
  if (!fid.ok()) return fid.status();
  t->set_fidelity(static_cast<v1::Fidelity>(*fid));
  if (absl::Status st = ApplyFieldFlags(more_transform, t); !st.ok()) return st;
  // The proto's (nearprep.v1.range)s, before connecting (the daemon checks
  // them too).
  if (absl::Status st = CheckFieldRanges(*t); !st.ok()) return st;

  v1::OutputFormat* o = r.mutable_output();
  absl::StatusOr<int> dt =
      ParseEnumValue(v1::DType_descriptor(), "--dtype", dtype);
  if (!dt.ok()) return dt.status();
  o->set_dtype(static_cast<v1::DType>(*dt));
  absl::StatusOr<int> lay =
      ParseEnumValue(v1::Layout_descriptor(), "--layout", layout);
  if (!lay.ok()) return lay.status();
  o->set_layout(static_cast<v1::Layout>(*lay));
  absl::StatusOr<int> comp = ParseEnumValue(v1::Compression_descriptor(),
                                            "--compression", compression);
  if (!comp.ok()) return comp.status();
  o->set_compression(static_cast<v1::Compression>(*comp));
  o->set_compression_level(compression_level);
  absl::StatusOr<int> pol =
      ParseEnumValue(v1::ErrorPolicy_descriptor(), "--error-policy", policy);
  if (!pol.ok()) return pol.status();
  r.set_error_policy(static_cast<v1::ErrorPolicy>(*pol));
  return r;
}

void RequestFlags::RegisterSampleFlags(CLI::App* app) {
  Register(app, /*with_batches=*/false);
  // The flags that say which samples a stream reads and how it is run.
  for (const char* flag :
       {"--target", "--batch-size", "--start-batch", "--seed", "--epoch",
        "--shuffle", "--shuffle-mode", "--block-samples", "--open-blocks",
        "--window", "--shard", "--drop-remainder", "--error-policy",
        "--dry-run"}) {
    CLI::Option* option = app->get_option_no_throw(flag);
    if (option == nullptr || !app->remove_option(option)) {
      // Register renamed or dropped it: a programming error the CLI tests
      // catch (every command parses --help).
      std::fprintf(stderr, "RequestFlags::RegisterSampleFlags: no flag %s\n",
                   flag);
      std::abort();
    }
  }
}

namespace {

std::string FlagName(const std::string& field) {
  std::string flag = "--" + field;
  for (char& c : flag) c = c == '_' ? '-' : c;
  return flag;
}

}  // namespace

void RegisterFieldFlags(CLI::App* app, const google::protobuf::Descriptor* d,
                        const std::vector<std::string>& skip,
                        std::map<std::string, std::string>* values) {
  using FD = google::protobuf::FieldDescriptor;
  for (int i = 0; i < d->field_count(); ++i) {
    const FD* f = d->field(i);
    const std::string flag = FlagName(f->name());
    if (f->is_repeated() || f->cpp_type() == FD::CPPTYPE_MESSAGE ||
        f->cpp_type() == FD::CPPTYPE_STRING ||
        std::find(skip.begin(), skip.end(), f->name()) != skip.end() ||
        app->get_option_no_throw(flag) != nullptr) {
      continue;
    }
    std::string help = d->name() + "." + f->name();
    if (f->cpp_type() == FD::CPPTYPE_ENUM)
      help += ": " + EnumHelp(f->enum_type());
    CLI::Option* o = app->add_option(flag, (*values)[f->name()], help);
    if (f->cpp_type() == FD::CPPTYPE_ENUM)
      o->check(EnumValidator(f->enum_type()));
  }
}

absl::Status ApplyFieldFlags(const std::map<std::string, std::string>& values,
                             google::protobuf::Message* m) {
  using FD = google::protobuf::FieldDescriptor;
  const google::protobuf::Reflection* r = m->GetReflection();
  for (const auto& entry : values) {
    // Named references, not a structured binding: the lambda below
    // captures `text` (C++17 cannot capture a binding; clang refuses).
    const std::string& name = entry.first;
    const std::string& text = entry.second;
    if (text.empty()) continue;
    const FD* f = m->GetDescriptor()->FindFieldByName(name);
    if (f == nullptr)
      return absl::InternalError(absl::StrCat("no field ", name));
    const std::string flag = FlagName(name);
    auto bad = [&](const char* what) {
      return absl::InvalidArgumentError(
          absl::StrCat(flag, ": must be ", what, ", got '", text, "'"));
    };
    switch (f->cpp_type()) {
      case FD::CPPTYPE_FLOAT: {
        float v = 0;
        if (!absl::SimpleAtof(text, &v)) return bad("a number");
        r->SetFloat(m, f, v);
        break;
      }
      case FD::CPPTYPE_DOUBLE: {
        double v = 0;
        if (!absl::SimpleAtod(text, &v)) return bad("a number");
        r->SetDouble(m, f, v);
        break;
      }
      case FD::CPPTYPE_UINT32: {
        uint32_t v = 0;
        if (text[0] == '-' || !absl::SimpleAtoi(text, &v))
          return bad("an integer in [0, 2^32)");
        r->SetUInt32(m, f, v);
        break;
      }
      case FD::CPPTYPE_UINT64: {
        uint64_t v = 0;
        if (text[0] == '-' || !absl::SimpleAtoi(text, &v))
          return bad("an integer in [0, 2^64)");
        r->SetUInt64(m, f, v);
        break;
      }
      case FD::CPPTYPE_INT32: {
        int32_t v = 0;
        if (!absl::SimpleAtoi(text, &v)) return bad("a 32-bit integer");
        r->SetInt32(m, f, v);
        break;
      }
      case FD::CPPTYPE_INT64: {
        int64_t v = 0;
        if (!absl::SimpleAtoi(text, &v)) return bad("a 64-bit integer");
        r->SetInt64(m, f, v);
        break;
      }
      case FD::CPPTYPE_BOOL: {
        bool v = false;
        if (!absl::SimpleAtob(text, &v)) return bad("true or false");
        r->SetBool(m, f, v);
        break;
      }
      case FD::CPPTYPE_ENUM: {
        absl::StatusOr<int> v = ParseEnumValue(f->enum_type(), flag, text);
        if (!v.ok()) return v.status();
        r->SetEnumValue(m, f, *v);
        break;
      }
      default:
        return absl::InternalError(absl::StrCat(flag, ": no flag conversion"));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckFieldRanges(const google::protobuf::Message& m) {
  const google::protobuf::Descriptor* d = m.GetDescriptor();
  for (int i = 0; i < d->field_count(); ++i) {
    const google::protobuf::FieldDescriptor* f = d->field(i);
    // The check the daemon makes too (proto/options/field_range.h); here
    // NaN is out of range like any value outside it.
    const std::optional<FieldRangeCheck> range = CheckFieldRange(m, *f);
    if (!range.has_value() || range->in_range) continue;
    return absl::InvalidArgumentError(
        absl::StrCat(FlagName(f->name()), ": must be ", range->rule, ", got ",
                     range->value_text));
  }
  return absl::OkStatus();
}

std::string DTypeName(v1::DType d) {
  return EnumValueName(v1::DType_descriptor(), d);
}

absl::StatusOr<std::string> RequestJson(
    const v1::StreamBatchesRequest& request) {
  google::protobuf::util::JsonPrintOptions o;
  o.preserve_proto_field_names = true;
  o.add_whitespace = true;
  std::string out;
  const auto st = google::protobuf::util::MessageToJsonString(request, &out, o);
  if (!st.ok()) return absl::InternalError(std::string(st.message()));
  return out;
}

std::string LayoutName(v1::Layout l) {
  return l == v1::LAYOUT_NCHW ? "NCHW" : "NHWC";
}

}  // namespace nearprep
