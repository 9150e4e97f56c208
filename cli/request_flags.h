// Command-line flags shared by the `fetch`, `sheet` and `stream` subcommands
// of the `nearprep` CLI, and their conversion to a StreamBatchesRequest.
//
//   --shard i/n         shard i of n (0 <= i < n)
//   --crop none|center|random_resized|resize_center [--resize-shorter-side R],
//   --flip-probability P, --brightness-max-delta D, --saturation L U,
//   --dtype float32|float16|bfloat16|uint8, --layout nhwc|nchw,
//   --compression none|delta_zstd|gradient_zstd [--compression-level L]
//   (uint8),
//   --fidelity tf_compat|fast|torchvision, --error-policy skip|fail_stream,
//   --dry-run (print the request, do not connect), ...
// Names follow the proto (vocabulary.h) and the Python client's keywords;
// the older spellings (--flip, --crop rrc, --fidelity tf, ...) still work.
//   --tls-ca FILE [--tls-cert FILE --tls-key FILE] [--tls-server-name NAME]
//       (TlsFlags; also on `info`)
//
// Thread-safety: plain values; Register() binds the struct's fields to a
// CLI11 app, so the struct must outlive the app's parse.
#ifndef NEARPREP_CLIENT_CPP_SRC_REQUEST_FLAGS_H_
#define NEARPREP_CLIENT_CPP_SRC_REQUEST_FLAGS_H_

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/status/statusor.h"
#include "nearprep/client.h"
#include "nearprep/v1/nearprep.pb.h"

namespace nearprep {

// Parses "i/n": shard index i of n shards. INVALID_ARGUMENT (naming --shard)
// unless both are integers with n >= 1 and i < n.
absl::StatusOr<std::pair<uint32_t, uint32_t>> ParseShard(std::string_view s);

// CLI11 check of --target: each address (comma-separated when `list`)
// must name its port (nearprep::ValidateTarget); a bad one is a flag error.
CLI::Validator TargetValidator(bool list);

// A decimal integer in [0, max], checked on the text as typed (`why` is
// appended to the range, e.g. where max comes from): CLI11 2.1 alone takes
// "-1" and "18446744073709551616" for a uint64_t and saturates both to
// 2^64-1, so a range check after conversion would pass them, or show the
// saturated value instead of the user's.
CLI::Validator UnsignedValidator(uint64_t max, const std::string& why = "");

// Connection options of every subcommand that connects to a daemon: TLS,
// and how long a stream waits for an unreachable daemon. While it waits,
// stderr says for what and why (every second on a terminal, else every
// 10 s), never a silent hang.
struct TlsFlags {
  std::string ca;           // --tls-ca: root CA PEM; empty = plaintext.
  std::string cert;         // --tls-cert: client certificate (mTLS).
  std::string key;          // --tls-key: client private key (mTLS).
  std::string server_name;  // --tls-server-name: expected server name.
  // --token-file (or $NEARPREP_TOKEN_FILE): a file holding a bearer token;
  // without either, $NEARPREP_TOKEN is the token. Never a flag with the
  // token itself: command lines are visible to every user (ps).
  std::string token_file;
  double reconnect_deadline_s = 60;  // --reconnect-deadline / --connect-timeout

  void Register(CLI::App* app);
  // ClientOptions for `target` with these settings.
  ClientOptions ToClientOptions(const std::string& target) const;
};

struct RequestFlags {
  std::string target = "localhost:7070";
  bool target_list = false;  // --target may list several (A,B,...): `load`
  TlsFlags tls;
  std::string dataset;
  uint32_t batch_size = 32;
  uint64_t batches = 0;  // max_batches; 0 = to the end of the shard.
  uint64_t start_batch = 0;
  // Batch.resume_token of the last batch received (fetch writes it into each
  // batch's .json): resume right after that batch, checked by the daemon.
  std::string resume_token;
  uint64_t seed = 0;
  uint64_t epoch = 0;
  bool shuffle = false;
  std::string shuffle_mode = "global";  // or "block" (docs/protocol.md)
  uint64_t block_samples = 0;           // 0: the dataset's
  uint32_t open_blocks = 0;             // 0: 8
  uint32_t window = 0;                  // 0: 256
  std::string shard = "0/1";
  bool drop_remainder = false;
  uint32_t height = 224;
  uint32_t width = 224;
  std::string crop = "none";  // a CropMode name (vocabulary.h)
  float center_fraction = 0.0f;
  uint32_t resize_shorter = 0;  // resize-center: shorter side (0: 256).
  std::vector<float> scale;     // 2 values or empty.
  std::vector<float> ratio;     // 2 values or empty.
  float flip = 0.0f;
  float brightness = 0.0f;
  std::vector<float> saturation;  // 2 values or empty.
  // transform.color_ops by name (gamma, brightness, contrast, saturation,
  // hue); empty: the default order.
  std::vector<std::string> color_ops;
  // transform.erase_value: RandomErasing's value (1 or 3 values; empty: 0).
  std::vector<float> erase_value;
  // transform.auto_augment by name, also torchvision's reference names
  // (train.py --auto-augment): ta_wide, ra, imagenet.
  std::string auto_augment = "none";
  // torchvision reference spellings of erase_probability and
  // rand_augment_magnitude / num_ops (train.py --random-erase,
  // --ra-magnitude).
  float erase_probability = 0.0f;
  uint32_t ra_magnitude = 0;
  uint32_t ra_num_ops = 0;
  bool no_clip = false;
  std::vector<float> mean;
  std::vector<float> std;
  std::string dtype = "float32";
  std::string layout = "nhwc";
  std::string compression = "none";  // none | delta_zstd | gradient_zstd
  int compression_level = 0;
  std::string fidelity = "tf_compat";
  std::string policy = "skip";
  bool params = false;
  bool dry_run = false;  // --dry-run: print the request, do not connect
  // The transform fields no flag above sets: one flag each, named after the
  // field (RegisterFieldFlags), so that a field added to the proto is a flag
  // without an edit here. Field name -> the value as typed ("" if not given).
  std::map<std::string, std::string> more_transform;

  // Adds the flags to `app` (a subcommand). `with_batches`: also --batches.
  void Register(CLI::App* app, bool with_batches = true);
  // Adds only the flags of what each sample becomes: --dataset, the
  // transform's and the output's flags, --include-params, and the
  // connection's (TlsFlags); Register's names, checks and help. For a
  // command that picks the samples itself (`fleet-read`: the fleet plan's
  // sample ids): no --target, --batch-size, position, seed, shuffle, shard,
  // error policy or --dry-run. A flag Register gains is here too unless it
  // is added to that list (request_flags.cc).
  void RegisterSampleFlags(CLI::App* app);

  // INVALID_ARGUMENT naming the flag for a bad value.
  absl::StatusOr<v1::StreamBatchesRequest> ToRequest() const;
};

// One flag per singular scalar or enum field of `d` that `app` has no flag
// for yet (by name: "--" + the field's name with '-' for '_'), except
// `skip`; each binds (*values)[field name]. The help names the field.
void RegisterFieldFlags(CLI::App* app, const google::protobuf::Descriptor* d,
                        const std::vector<std::string>& skip,
                        std::map<std::string, std::string>* values);

// Sets the fields of `m` that `values` (RegisterFieldFlags) holds text for,
// by the field's type; INVALID_ARGUMENT naming the flag for a bad value.
absl::Status ApplyFieldFlags(const std::map<std::string, std::string>& values,
                             google::protobuf::Message* m);

// INVALID_ARGUMENT naming the flag of the first singular field of `m` outside
// its (nearprep.v1.range) ("--flip-probability: must be in [0, 1], got 1.5").
absl::Status CheckFieldRanges(const google::protobuf::Message& m);

// CLI11 check of an enum flag: a name ParseEnumValue (vocabulary.h) takes.
CLI::Validator EnumValidator(const google::protobuf::EnumDescriptor* e);

// `request` as protobuf JSON (proto field names, enum value names): what
// --dry-run prints.
absl::StatusOr<std::string> RequestJson(
    const v1::StreamBatchesRequest& request);

// Short names for messages and file metadata.
std::string DTypeName(v1::DType d);
std::string LayoutName(v1::Layout l);

}  // namespace nearprep

#endif  // NEARPREP_CLIENT_CPP_SRC_REQUEST_FLAGS_H_
