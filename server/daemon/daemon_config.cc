// nearprepd's configuration: the YAML file, the flags that override it and
// the checks of the merged result. One idea in one file although it is over
// 500 lines: each key's YAML name, flag and check live here together, so
// that adding a setting touches this one file.
#include "server/daemon/daemon_config.h"

#include <yaml-cpp/yaml.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cctype>
#include <cmath>
#include <exception>
#include <fstream>
#include <initializer_list>
#include <limits>
#include <set>
#include <sstream>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/version.h"
#include "server/authz/policy.h"
#include "server/metrics/http_endpoint.h"

namespace nearprep {
namespace {

absl::Status Bad(const std::string& where, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat(where, ": ", what));
}

std::string Where(const std::string& source, const std::string& key,
                  const YAML::Node& node) {
  const YAML::Mark m = node.Mark();
  if (m.line < 0) return absl::StrCat(source, ": ", key);
  return absl::StrCat(source, ":", m.line + 1, ": ", key);
}

// Refuses keys of `node` not in `known` (typos must not pass silently).
absl::Status CheckKeys(const YAML::Node& node, const std::string& source,
                       const std::string& prefix,
                       const std::set<std::string>& known) {
  if (!node.IsMap()) {
    return Bad(Where(source, prefix.empty() ? "(document)" : prefix, node),
               "must be a mapping");
  }
  for (const auto& kv : node) {
    const std::string key = kv.first.as<std::string>();
    if (known.count(key) == 0) {
      std::string list;
      for (const auto& k : known) list += (list.empty() ? "" : ", ") + k;
      return Bad(Where(source, prefix + key, kv.first),
                 "unknown key (known: " + list + ")");
    }
  }
  return absl::OkStatus();
}

// Refuses a mapping anywhere under `node` that holds the same key twice:
// yaml-cpp keeps both and lookups see the first, so a second
// `authorization:` section or an override appended at the end of the file
// would be ignored silently.
absl::Status CheckNoDuplicateKeys(const YAML::Node& node,
                                  const std::string& source,
                                  const std::string& path) {
  if (node.IsMap()) {
    std::set<std::string> seen;
    for (const auto& kv : node) {
      const std::string key =
          kv.first.IsScalar() ? kv.first.Scalar() : "(complex key)";
      const std::string at = path.empty() ? key : absl::StrCat(path, ".", key);
      if (!seen.insert(key).second) {
        return Bad(Where(source, at, kv.first),
                   "duplicate key (the first would win silently: keep one)");
      }
      absl::Status st = CheckNoDuplicateKeys(kv.second, source, at);
      if (!st.ok()) return st;
    }
  } else if (node.IsSequence()) {
    for (size_t i = 0; i < node.size(); ++i) {
      absl::Status st = CheckNoDuplicateKeys(node[i], source,
                                             absl::StrCat(path, "[", i, "]"));
      if (!st.ok()) return st;
    }
  }
  return absl::OkStatus();
}

// Dataset names are written into logs, metrics labels, resume tokens and
// audit records: printable ASCII without spaces ('!' .. '~'), at most 128
// bytes (docs/operations.md "Datasets").
absl::Status CheckDatasetName(const std::string& name) {
  if (name.size() > 128) {
    return absl::InvalidArgumentError(
        absl::StrCat("at most 128 bytes, got ", name.size()));
  }
  for (const char ch : name) {
    const unsigned char b = static_cast<unsigned char>(ch);
    if (b <= 0x20 || b >= 0x7f) {
      return absl::InvalidArgumentError(absl::StrCat(
          "may hold printable ASCII only, without spaces ('!' .. '~'); byte 0x",
          absl::Hex(b, absl::kZeroPad2), " at offset ", &ch - name.data()));
    }
  }
  return absl::OkStatus();
}

constexpr double kMaxDrainSeconds = 86400;

template <typename T>
absl::Status Get(const YAML::Node& parent, const char* key,
                 const std::string& source, const std::string& prefix, T* out) {
  const YAML::Node n = parent[key];
  if (!n) return absl::OkStatus();
  try {
    *out = n.as<T>();
  } catch (const YAML::Exception& e) {
    return Bad(Where(source, prefix + key, n), "wrong type of value");
  }
  return absl::OkStatus();
}

// Integers that must fit and be >= min; accept byte-size suffixes when
// `bytes` is set.
template <typename T>
absl::Status GetInt(const YAML::Node& parent, const char* key,
                    const std::string& source, const std::string& prefix,
                    T* out, long double min_value, bool bytes = false) {
  const YAML::Node n = parent[key];
  if (!n) return absl::OkStatus();
  if (!n.IsScalar()) {
    return Bad(Where(source, prefix + key, n), "must be a number");
  }
  const std::string text = n.Scalar();
  uint64_t value = 0;
  bool negative = !text.empty() && text[0] == '-';
  if (negative) {
    return Bad(Where(source, prefix + key, n),
               absl::StrCat("must be >= ", static_cast<int64_t>(min_value),
                            ", got ", text));
  }
  if (bytes) {
    absl::StatusOr<uint64_t> v = ParseByteSize(text);
    if (!v.ok()) {
      return Bad(Where(source, prefix + key, n),
                 std::string(v.status().message()));
    }
    value = *v;
  } else {
    absl::StatusOr<uint64_t> v = ParseByteSize(text);
    if (!v.ok() || !std::all_of(text.begin(), text.end(), [](char c) {
          return std::isdigit(static_cast<unsigned char>(c));
        })) {
      return Bad(Where(source, prefix + key, n),
                 "must be a non-negative integer, got '" + text + "'");
    }
    value = *v;
  }
  if (static_cast<long double>(value) < min_value ||
      value > static_cast<uint64_t>(std::numeric_limits<T>::max())) {
    return Bad(
        Where(source, prefix + key, n),
        absl::StrCat("must be in [", static_cast<int64_t>(min_value), ", ",
                     std::numeric_limits<T>::max(), "], got ", text));
  }
  *out = static_cast<T>(value);
  return absl::OkStatus();
}

#define NP_RETURN_IF_ERROR(expr) \
  do {                           \
    absl::Status _st = (expr);   \
    if (!_st.ok()) return _st;   \
  } while (0)

// `parent[key]`, a boolean: YAML's spellings (true / false, yes / no, on /
// off) and 1 / 0.
absl::Status GetBool(const YAML::Node& parent, const char* key,
                     const std::string& source, const std::string& prefix,
                     bool* out) {
  const YAML::Node n = parent[key];
  if (!n) return absl::OkStatus();
  if (n.IsScalar()) {
    if (n.Scalar() == "1" || n.Scalar() == "0") {
      *out = n.Scalar() == "1";
      return absl::OkStatus();
    }
    try {
      *out = n.as<bool>();
      return absl::OkStatus();
    } catch (const YAML::Exception&) {
    }
  }
  return Bad(Where(source, prefix + key, n),
             absl::StrCat("must be true or false, got '",
                          n.IsScalar() ? n.Scalar() : "(not a scalar)", "'"));
}

// `parent[key]`, a string that must be one of `allowed`.
absl::Status GetOneOf(const YAML::Node& parent, const char* key,
                      const std::string& source, const std::string& prefix,
                      std::initializer_list<const char*> allowed,
                      std::string* out) {
  NP_RETURN_IF_ERROR(Get(parent, key, source, prefix, out));
  std::string list;
  for (const char* a : allowed) {
    if (*out == a) return absl::OkStatus();
    list += (list.empty() ? "" : ", ") + std::string(a);
  }
  return Bad(Where(source, prefix + key, parent[key]),
             absl::StrCat("must be one of ", list, "; got '", *out, "'"));
}

// The keys of one dataset's configuration, the one table of them: YAML's
// `datasets[i].KEY` and the --dataset flag's `,KEY=VALUE` (whose NAME=ROOT
// gives `name` and `root`). Both parsers build a mapping and read it through
// ApplyDataset, so a key is accepted, converted and refused the same way by
// both, and an unknown one gets the same "unknown key (known: ...)".
struct DatasetKey {
  const char* name;
  // A list (`extensions`): the flag's value is split at its commas.
  bool list;
  // Reads parent[name] (present) into *d; messages name prefix + name.
  absl::Status (*apply)(const YAML::Node& parent, const std::string& source,
                        const std::string& prefix, DatasetConfig* d);
};

using YamlIn = const YAML::Node&;
using Src = const std::string&;

const DatasetKey kDatasetKeys[] = {
    {"name", false,
     [](YamlIn n, Src s, Src p, DatasetConfig* d) {
       return Get(n, "name", s, p, &d->name);
     }},
    {"format", false,
     [](YamlIn n, Src s, Src p, DatasetConfig* d) {
       return GetOneOf(n, "format", s, p,
                       {"image_folder", "file_list", "tfrecord", "tar"},
                       &d->format);
     }},
    {"root", false,
     [](YamlIn n, Src s, Src p, DatasetConfig* d) {
       return Get(n, "root", s, p, &d->root);
     }},
    {"list_file", false,
     [](YamlIn n, Src s, Src p, DatasetConfig* d) {
       return Get(n, "list_file", s, p, &d->list_file);
     }},
    {"extensions", true,
     [](YamlIn n, Src s, Src p, DatasetConfig* d) {
       return Get(n, "extensions", s, p, &d->extensions);
     }},
    {"max_file_bytes", false,
     [](YamlIn n, Src s, Src p, DatasetConfig* d) {
       return GetInt(n, "max_file_bytes", s, p, &d->max_file_bytes, 1,
                     /*bytes=*/true);
     }},
    {"shard_pattern", false,
     [](YamlIn n, Src s, Src p, DatasetConfig* d) {
       return Get(n, "shard_pattern", s, p, &d->shard_pattern);
     }},
    {"image_key", false,
     [](YamlIn n, Src s, Src p, DatasetConfig* d) {
       return Get(n, "image_key", s, p, &d->image_key);
     }},
    {"label_key", false,
     [](YamlIn n, Src s, Src p, DatasetConfig* d) {
       return Get(n, "label_key", s, p, &d->label_key);
     }},
    {"label_offset", false,
     [](YamlIn n, Src s, Src p, DatasetConfig* d) {
       const YAML::Node lo = n["label_offset"];
       int64_t v = 0;
       if (!lo.IsScalar() || !absl::SimpleAtoi(lo.Scalar(), &v) ||
           v < -(int64_t{1} << 31) || v > (int64_t{1} << 31)) {
         return Bad(Where(s, p + "label_offset", lo),
                    "must be an integer in [-2^31, 2^31]");
       }
       d->label_offset = v;
       return absl::OkStatus();
     }},
    {"index_cache", false,
     [](YamlIn n, Src s, Src p, DatasetConfig* d) {
       return Get(n, "index_cache", s, p, &d->index_cache);
     }},
    {"block_cache_bytes", false,
     [](YamlIn n, Src s, Src p, DatasetConfig* d) {
       return GetInt(n, "block_cache_bytes", s, p, &d->block_cache_bytes, 0,
                     /*bytes=*/true);
     }},
    {"manifest", false,
     [](YamlIn n, Src s, Src p, DatasetConfig* d) {
       return Get(n, "manifest", s, p, &d->manifest);
     }},
    {"manifest_check", false,
     [](YamlIn n, Src s, Src p, DatasetConfig* d) {
       return GetOneOf(n, "manifest_check", s, p, {"size", "crc32c"},
                       &d->manifest_check);
     }},
    {"placement", false,
     [](YamlIn n, Src s, Src p, DatasetConfig* d) {
       return Get(n, "placement", s, p, &d->placement);
     }},
    {"node", false,
     [](YamlIn n, Src s, Src p, DatasetConfig* d) {
       return Get(n, "node", s, p, &d->node);
     }},
    {"allow_empty", false,
     [](YamlIn n, Src s, Src p, DatasetConfig* d) {
       return GetBool(n, "allow_empty", s, p, &d->allow_empty);
     }},
};

const DatasetKey* FindDatasetKey(const std::string& name) {
  for (const DatasetKey& k : kDatasetKeys) {
    if (name == k.name) return &k;
  }
  return nullptr;
}

// One dataset's mapping `n` (YAML's datasets[i], or the one the --dataset
// flag builds) into *d. `prefix` leads every key in messages.
absl::Status ApplyDataset(const YAML::Node& n, const std::string& source,
                          const std::string& prefix, DatasetConfig* d) {
  std::set<std::string> known;
  for (const DatasetKey& k : kDatasetKeys) known.insert(k.name);
  NP_RETURN_IF_ERROR(CheckKeys(n, source, prefix, known));
  for (const DatasetKey& k : kDatasetKeys) {
    if (n[k.name]) NP_RETURN_IF_ERROR(k.apply(n, source, prefix, d));
  }
  if (n["list_file"]) {
    // A list file says file_list; with another format it would be ignored.
    if (!n["format"]) d->format = "file_list";
    if (d->format != "file_list") {
      return Bad(Where(source, prefix + "list_file", n["list_file"]),
                 absl::StrCat("only with format file_list, got format ",
                              d->format));
    }
  }
  if (!d->placement.empty() || !d->node.empty()) {
    // Both or neither, and only for a manifest's partitions; the document
    // itself is checked against the manifest when the dataset opens.
    const char* key = d->placement.empty() ? "placement" : "node";
    if (d->placement.empty() || d->node.empty()) {
      const char* other = d->placement.empty() ? "node" : "placement";
      return Bad(Where(source, prefix + key, n),
                 absl::StrCat("required with ", other, " (both or neither)"));
    }
    if (d->manifest.empty()) {
      return Bad(
          Where(source, prefix + "placement", n["placement"]),
          "only with manifest (a placement assigns a manifest's partitions)");
    }
  }
  if (d->name.empty())
    return Bad(Where(source, prefix + "name", n), "required");
  if (d->root.empty())
    return Bad(Where(source, prefix + "root", n), "required");
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<uint64_t> ParseByteSize(const std::string& text) {
  if (text.empty()) return absl::InvalidArgumentError("empty size");
  size_t i = 0;
  uint64_t value = 0;
  while (i < text.size() && std::isdigit(static_cast<unsigned char>(text[i]))) {
    const uint64_t digit = static_cast<uint64_t>(text[i] - '0');
    if (value > (std::numeric_limits<uint64_t>::max() - digit) / 10) {
      return absl::InvalidArgumentError("size too large: '" + text + "'");
    }
    value = value * 10 + digit;
    ++i;
  }
  if (i == 0) {
    return absl::InvalidArgumentError("not a size: '" + text +
                                      "' (examples: 4096, 64K, 512M, 2G)");
  }
  std::string suffix = text.substr(i);
  for (char& c : suffix) c = static_cast<char>(std::toupper(c));
  int shift = 0;
  if (suffix.empty() || suffix == "B") {
    shift = 0;
  } else if (suffix == "K" || suffix == "KB" || suffix == "KIB") {
    shift = 10;
  } else if (suffix == "M" || suffix == "MB" || suffix == "MIB") {
    shift = 20;
  } else if (suffix == "G" || suffix == "GB" || suffix == "GIB") {
    shift = 30;
  } else if (suffix == "T" || suffix == "TB" || suffix == "TIB") {
    shift = 40;
  } else {
    return absl::InvalidArgumentError("unknown size suffix in '" + text +
                                      "' (use K, M, G or T)");
  }
  if (shift > 0 && value > (std::numeric_limits<uint64_t>::max() >> shift)) {
    return absl::InvalidArgumentError("size too large: '" + text + "'");
  }
  return value << shift;
}

std::vector<std::string> DatasetConfigKeys() {
  std::vector<std::string> out;
  for (const DatasetKey& k : kDatasetKeys) out.push_back(k.name);
  return out;
}

absl::StatusOr<DatasetConfig> ParseDatasetFlag(
    const std::string& text, std::vector<std::string>* warnings) {
  const char kUsage[] =
      "--dataset: expected NAME=ROOT[,KEY=VALUE...] (KEY: a key of a "
      "config file's datasets entry, e.g. list_file=FILE, format=tfrecord)";
  const size_t eq = text.find('=');
  if (eq == std::string::npos || eq == 0 || eq + 1 == text.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat(kUsage, ", got '", text, "'"));
  }
  const std::string rest = text.substr(eq + 1);
  // ROOT, then ",KEY=VALUE" options. An option starts at a comma followed by
  // a key-like word ([a-z_]+) and '='; any other comma belongs to the value
  // before it (a root or a list file's name may hold commas).
  auto key_at = [&rest](size_t comma) -> std::string {
    size_t i = comma + 1;
    while (i < rest.size() && (std::islower(static_cast<unsigned char>(rest[i])) ||
                               rest[i] == '_')) {
      ++i;
    }
    if (i == comma + 1 || i >= rest.size() || rest[i] != '=') return "";
    return rest.substr(comma + 1, i - comma - 1);
  };
  std::vector<size_t> starts;  // commas that start an option
  for (size_t i = rest.find(','); i != std::string::npos;
       i = rest.find(',', i + 1)) {
    if (!key_at(i).empty()) starts.push_back(i);
  }
  const std::string root =
      rest.substr(0, starts.empty() ? rest.size() : starts[0]);
  if (root.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--dataset: empty ROOT in '", text, "'"));
  }
  // The mapping a config file's datasets entry would hold.
  YAML::Node node(YAML::NodeType::Map);
  node["name"] = text.substr(0, eq);
  node["root"] = root;
  std::set<std::string> seen = {"name", "root"};
  for (size_t k = 0; k < starts.size(); ++k) {
    std::string key = key_at(starts[k]);
    const size_t begin = starts[k] + key.size() + 2;
    const size_t end = k + 1 < starts.size() ? starts[k + 1] : rest.size();
    const std::string value = rest.substr(begin, end - begin);
    if (key == "list") {
      key = "list_file";
      if (warnings != nullptr) {
        warnings->push_back(
            "--dataset: list= is deprecated (still accepted): write "
            "list_file=, the config file's key");
      }
    }
    if (!seen.insert(key).second) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--dataset: ", key, "= given twice in '", text, "'",
          key == "name" || key == "root" ? " (NAME=ROOT gives name and root)"
                                         : ""));
    }
    if (value.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--dataset: ", key, "= has no value in '", text, "'"));
    }
    const DatasetKey* row = FindDatasetKey(key);
    if (row != nullptr && row->list) {
      YAML::Node seq(YAML::NodeType::Sequence);
      for (size_t b = 0, c; b <= value.size(); b = c + 1) {
        c = value.find(',', b);
        if (c == std::string::npos) c = value.size();
        seq.push_back(value.substr(b, c - b));
      }
      node[key] = seq;
    } else {
      node[key] = value;  // an unknown key: ApplyDataset refuses it
    }
  }
  DatasetConfig d;
  absl::Status st = ApplyDataset(node, "--dataset", "", &d);
  if (!st.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(st.message(), " (in '", text, "')"));
  }
  return d;
}

namespace {

// Parses `text` (from `source`, for the messages) into *root.
absl::Status LoadYaml(const std::string& text, const std::string& source,
                      YAML::Node* root) {
  try {
    *root = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    return Bad(
        absl::StrCat(source, ":", e.mark.line + 1, ":", e.mark.column + 1),
        "not valid YAML: " + e.msg);
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ApplyYamlConfig(const std::string& yaml, const std::string& source,
                             DaemonConfig* c) {
  YAML::Node root;
  NP_RETURN_IF_ERROR(LoadYaml(yaml, source, &root));
  if (root.IsNull()) return absl::OkStatus();  // Empty file.
  try {
    NP_RETURN_IF_ERROR(CheckNoDuplicateKeys(root, source, ""));
    NP_RETURN_IF_ERROR(CheckKeys(
        root, source, "",
        {"listen", "port", "port_file", "log_level", "drain_seconds", "backend",
         "pipeline", "limits", "datasets", "tls", "metrics", "authorization",
         "decoded_cache"}));
    NP_RETURN_IF_ERROR(Get(root, "listen", source, "", &c->listen_address));
    if (root["listen"]) c->listen_given = true;
    // Who may read what (server/authz/policy.h parses the section).
    absl::StatusOr<authz::PolicyConfig> authorization =
        authz::ParsePolicyYaml(yaml, source);
    if (!authorization.ok()) return authorization.status();
    c->server.authorization = std::move(*authorization);
    NP_RETURN_IF_ERROR(GetInt(root, "port", source, "", &c->port, 0));
    NP_RETURN_IF_ERROR(Get(root, "port_file", source, "", &c->port_file));
    NP_RETURN_IF_ERROR(Get(root, "log_level", source, "", &c->log_level));
    NP_RETURN_IF_ERROR(
        Get(root, "drain_seconds", source, "", &c->drain_seconds));
    if (const YAML::Node b = root["backend"]) {
      NP_RETURN_IF_ERROR(
          CheckKeys(b, source, "backend.",
                    {"kind", "xclbin", "device_index", "fpga_simulate_kernel",
                     "fpga_inject_error_run"}));
      BackendOptions& o = c->backend;
      NP_RETURN_IF_ERROR(Get(b, "kind", source, "backend.", &o.kind));
      NP_RETURN_IF_ERROR(Get(b, "xclbin", source, "backend.", &o.fpga.xclbin));
      NP_RETURN_IF_ERROR(GetInt(b, "device_index", source, "backend.",
                                &o.fpga.device_index, 0));
      NP_RETURN_IF_ERROR(Get(b, "fpga_simulate_kernel", source, "backend.",
                             &o.fpga.simulate_kernel));
      NP_RETURN_IF_ERROR(GetInt(b, "fpga_inject_error_run", source, "backend.",
                                &o.fpga.inject_error_run, 0));
    }
    if (const YAML::Node d = root["decoded_cache"]) {
      // The CPU backend's decoded-image cache (backend_choice.h).
      NP_RETURN_IF_ERROR(
          CheckKeys(d, source, "decoded_cache.", {"bytes", "dataset_bytes"}));
      NP_RETURN_IF_ERROR(GetInt(d, "bytes", source, "decoded_cache.",
                                &c->backend.decoded_cache_bytes, 0,
                                /*bytes=*/true));
      NP_RETURN_IF_ERROR(GetInt(d, "dataset_bytes", source, "decoded_cache.",
                                &c->backend.decoded_cache_dataset_bytes, 0,
                                /*bytes=*/true));
    }
    if (const YAML::Node m = root["metrics"]) {
      NP_RETURN_IF_ERROR(
          CheckKeys(m, source, "metrics.", {"listen", "port_file"}));
      NP_RETURN_IF_ERROR(
          Get(m, "listen", source, "metrics.", &c->metrics_listen));
      NP_RETURN_IF_ERROR(
          Get(m, "port_file", source, "metrics.", &c->metrics_port_file));
    }
    if (const YAML::Node t = root["tls"]) {
      NP_RETURN_IF_ERROR(
          CheckKeys(t, source, "tls.", {"cert", "key", "client_ca"}));
      ServerOptions::TlsOptions& o = c->server.tls;
      NP_RETURN_IF_ERROR(Get(t, "cert", source, "tls.", &o.cert_file));
      NP_RETURN_IF_ERROR(Get(t, "key", source, "tls.", &o.key_file));
      NP_RETURN_IF_ERROR(
          Get(t, "client_ca", source, "tls.", &o.client_ca_file));
    }
    if (const YAML::Node p = root["pipeline"]) {
      NP_RETURN_IF_ERROR(CheckKeys(
          p, source, "pipeline.", {"workers", "prefetch_depth", "chunk_size"}));
      PipelineOptions& o = c->server.pipeline;
      NP_RETURN_IF_ERROR(
          GetInt(p, "workers", source, "pipeline.", &o.workers, 0));
      NP_RETURN_IF_ERROR(GetInt(p, "prefetch_depth", source, "pipeline.",
                                &o.prefetch_depth, 1));
      NP_RETURN_IF_ERROR(
          GetInt(p, "chunk_size", source, "pipeline.", &o.chunk_size, 1));
    }
    if (const YAML::Node l = root["limits"]) {
      NP_RETURN_IF_ERROR(
          CheckKeys(l, source, "limits.",
                    {"max_batch_size", "max_output_pixels",
                     "max_decoded_pixels", "max_concurrent_streams",
                     "per_stream_memory", "grpc_memory", "max_connections",
                     "handshake_timeout_seconds", "idle_timeout_seconds"}));
      ServiceLimits& o = c->server.limits;
      NP_RETURN_IF_ERROR(
          GetInt(l, "max_batch_size", source, "limits.", &o.max_batch_size, 1));
      NP_RETURN_IF_ERROR(GetInt(l, "max_output_pixels", source, "limits.",
                                &o.max_output_pixels, 1));
      NP_RETURN_IF_ERROR(GetInt(l, "max_decoded_pixels", source, "limits.",
                                &o.max_decoded_pixels, 1));
      NP_RETURN_IF_ERROR(GetInt(l, "max_concurrent_streams", source, "limits.",
                                &o.max_concurrent_streams, 1));
      NP_RETURN_IF_ERROR(GetInt(l, "per_stream_memory", source, "limits.",
                                &o.per_stream_memory_bytes, 1,
                                /*bytes=*/true));
      NP_RETURN_IF_ERROR(GetInt(l, "grpc_memory", source, "limits.",
                                &c->server.grpc_memory_bytes, 0,
                                /*bytes=*/true));
      // 0: from the descriptor limit (server/service/connection_listener.h).
      NP_RETURN_IF_ERROR(GetInt(l, "max_connections", source, "limits.",
                                &c->server.max_connections, 0));
      // Silent connections (connection_listener.h); 0: never closed.
      // At most a day: a longer one protects nothing, and the milliseconds
      // handed to gRPC are an int.
      for (const auto& [key, out] :
           {std::pair<const char*, int64_t*>{
                "handshake_timeout_seconds",
                &c->server.handshake_timeout_seconds},
            std::pair<const char*, int64_t*>{
                "idle_timeout_seconds", &c->server.idle_timeout_seconds}}) {
        NP_RETURN_IF_ERROR(GetInt(l, key, source, "limits.", out, 0));
        if (*out > 86400) {
          return Bad(Where(source, std::string("limits.") + key, l[key]),
                     absl::StrCat("must be at most 86400 (a day), got ", *out));
        }
      }
    }
    if (const YAML::Node ds = root["datasets"]) {
      if (!ds.IsSequence()) {
        return Bad(Where(source, "datasets", ds), "must be a list");
      }
      for (size_t i = 0; i < ds.size(); ++i) {
        DatasetConfig d;
        NP_RETURN_IF_ERROR(
            ApplyDataset(ds[i], source, absl::StrCat("datasets[", i, "]."), &d));
        c->server.datasets.push_back(std::move(d));
      }
    }
  } catch (const YAML::Exception& e) {
    return Bad(absl::StrCat(source, ":", e.mark.line + 1), e.msg);
  }
  return absl::OkStatus();
}

absl::Status ValidateDaemonConfig(const DaemonConfig& c) {
  if (c.port < 0 || c.port > 65535) {
    return Bad("port", absl::StrCat("must be in [0, 65535], got ", c.port));
  }
  if (c.listen_address.empty()) return Bad("listen", "must not be empty");
  static const std::set<std::string> kLevels = {
      "trace", "debug", "info", "warn", "error", "critical", "off"};
  if (kLevels.count(c.log_level) == 0) {
    return Bad("log_level",
               "must be one of trace, debug, info, warn, error, "
               "critical, off; got '" +
                   c.log_level + "'");
  }
  // Checked before main() turns it into milliseconds (an int64: 1e300
  // would be an undefined cast).
  if (!std::isfinite(c.drain_seconds) || c.drain_seconds < 0 ||
      c.drain_seconds > kMaxDrainSeconds) {
    return Bad("drain_seconds",
               absl::StrCat("must be in [0, ", kMaxDrainSeconds, "], got ",
                            c.drain_seconds));
  }
  if (!c.metrics_listen.empty()) {
    absl::StatusOr<metrics::HostPort> hp =
        metrics::ParseHostPort(c.metrics_listen, "metrics.listen");
    if (!hp.ok()) return hp.status();
  }
  if (!c.metrics_port_file.empty() && c.metrics_listen.empty()) {
    return Bad("metrics.port_file",
               "needs metrics.listen (--metrics-listen HOST:PORT)");
  }
  const ServerOptions::TlsOptions& tls = c.server.tls;
  if (!tls.cert_file.empty() && tls.key_file.empty()) {
    return Bad("tls.key", "required with tls.cert (--tls-key)");
  }
  if (!tls.key_file.empty() && tls.cert_file.empty()) {
    return Bad("tls.cert", "required with tls.key (--tls-cert)");
  }
  if (!tls.client_ca_file.empty() && tls.cert_file.empty()) {
    return Bad("tls.cert",
               "required with tls.client_ca (--tls-cert, --tls-key)");
  }
  const std::string& kind = c.backend.kind;
  if (kind != "cpu" && kind != "fpga" && kind != "auto") {
    return Bad("backend.kind", "must be cpu, fpga or auto; got '" + kind + "'");
  }
  if (kind == "fpga" && c.backend.fpga.xclbin.empty()) {
    return Bad("backend.xclbin", "required with backend fpga");
  }
  if (c.server.pipeline.workers < 0 || c.server.pipeline.workers > 1024) {
    return Bad("pipeline.workers", "must be in [0, 1024] (0: all cores)");
  }
  if (c.server.pipeline.prefetch_depth < 1 ||
      c.server.pipeline.prefetch_depth > 1024) {
    return Bad("pipeline.prefetch_depth", "must be in [1, 1024]");
  }
  if (c.server.pipeline.chunk_size < 1) {
    return Bad("pipeline.chunk_size", "must be >= 1");
  }
  const ServiceLimits& l = c.server.limits;
  if (l.max_batch_size < 1) return Bad("limits.max_batch_size", "must be >= 1");
  if (l.max_output_pixels < 1) {
    return Bad("limits.max_output_pixels", "must be >= 1");
  }
  if (l.max_decoded_pixels < 1) {
    return Bad("limits.max_decoded_pixels", "must be >= 1");
  }
  if (l.max_concurrent_streams < 1) {
    return Bad("limits.max_concurrent_streams", "must be >= 1");
  }
  if (l.per_stream_memory_bytes < 1) {
    return Bad("limits.per_stream_memory", "must be >= 1");
  }
  if (c.server.datasets.empty()) {
    return Bad("datasets",
               "no dataset configured (use --dataset NAME=ROOT "
               "or a datasets: list in the config file)");
  }
  std::set<std::string> names;
  for (size_t i = 0; i < c.server.datasets.size(); ++i) {
    const DatasetConfig& d = c.server.datasets[i];
    const std::string at = absl::StrCat("datasets[", i, "]");
    if (d.name.empty()) return Bad(at + ".name", "required");
    if (absl::Status st = CheckDatasetName(d.name); !st.ok()) {
      return Bad(at + ".name", std::string(st.message()));
    }
    if (!names.insert(d.name).second) {
      return Bad(at + ".name", "duplicate dataset name '" + d.name + "'");
    }
    if (d.root.empty()) return Bad(at + ".root", "required");
    if (d.format != "image_folder" && d.format != "file_list" &&
        d.format != "tfrecord" && d.format != "tar") {
      return Bad(at + ".format",
                 "must be image_folder, file_list, tfrecord or tar; got '" +
                     d.format + "'");
    }
    if (d.format == "file_list" && d.list_file.empty()) {
      return Bad(at + ".list_file", "required with format file_list");
    }
  }
  return absl::OkStatus();
}

namespace {

std::string DatasetFlagHelp() {
  std::string keys;
  for (const DatasetKey& k : kDatasetKeys) {
    if (std::string(k.name) == "name" || std::string(k.name) == "root") continue;
    keys += (keys.empty() ? "" : ", ") + std::string(k.name);
  }
  return "Dataset NAME=ROOT (image folder), NAME=ROOT,list_file=FILE (file "
         "list) or NAME=ROOT,format=tfrecord|tar (record shards); append "
         ",allow_empty=true to serve a dataset with no samples (else an error "
         "at start); repeatable; added to the config file's datasets. Keys "
         "(a config file's datasets entry, the same table): " +
         keys + " (list= is the deprecated spelling of list_file=)";
}

}  // namespace

CommandLine ParseCommandLine(int argc, const char* const* argv) {
  CommandLine result;
  DaemonConfig& c = result.config;
  CLI::App app{
      "nearprepd: serves datasets of JPEGs as preprocessed tensor batches "
      "over gRPC (nearprep.v1.Preprocessor).",
      "nearprepd"};
  std::string config_path, listen, port_file, log_level, backend, xclbin,
      per_stream_memory, grpc_memory, tls_cert, tls_key, tls_client_ca,
      metrics_listen, metrics_port_file, decoded_cache, decoded_cache_dataset;
  std::vector<std::string> datasets;
  int port = 0, workers = 0, prefetch = 0, chunk = 0, device_index = 0;
  bool fpga_simulate = false;
  int64_t fpga_inject_run = -1;
  uint32_t max_batch = 0, max_streams = 0;
  uint64_t max_output_pixels = 0, max_decoded_pixels = 0;
  double drain = 0;
  app.set_version_flag(
      "--version", std::string("nearprepd ") + kVersion,
      "Print the version (the same as `nearprep info` shows) and exit");
  auto* o_config = app.add_option("--config", config_path,
                                  "YAML config file (flags override it)");
  auto* o_listen =
      app.add_option("--listen", listen,
                     "Listen address (default 127.0.0.1 without TLS, 0.0.0.0 "
                     "with --tls-cert)");
  auto* o_port = app.add_option("--port", port,
                                "TCP port; 0 picks a free one (default 7070)");
  auto* o_port_file = app.add_option("--port-file", port_file,
                                     "Write the bound port to this file");
  auto* o_dataset = app.add_option(
      "--dataset", datasets,
      DatasetFlagHelp());
  auto* o_workers =
      app.add_option("--workers", workers, "Worker threads (0: all cores)");
  auto* o_prefetch = app.add_option("--prefetch-depth", prefetch,
                                    "Batches prefetched per stream");
  auto* o_chunk =
      app.add_option("--chunk-size", chunk, "Samples per backend call");
  auto* o_max_batch =
      app.add_option("--max-batch-size", max_batch, "Largest batch_size");
  auto* o_max_out = app.add_option("--max-output-pixels", max_output_pixels,
                                   "Largest output height*width");
  auto* o_max_dec =
      app.add_option("--max-decoded-pixels", max_decoded_pixels,
                     "Decoded height*width*channels must stay below this");
  auto* o_max_streams = app.add_option("--max-concurrent-streams", max_streams,
                                       "Concurrent StreamBatches");
  auto* o_mem = app.add_option("--per-stream-memory", per_stream_memory,
                               "Batch memory per stream (e.g. 512M, 1G)");
  auto* o_grpc_mem = app.add_option(
      "--grpc-memory", grpc_memory,
      "Memory quota of gRPC's own buffers (default 1G; 0: none)");
  auto* o_decoded_cache = app.add_option(
      "--decoded-cache-bytes", decoded_cache,
      "Decoded-image cache of the cpu backend, e.g. 32G (0: off, the default)");
  auto* o_decoded_cache_dataset = app.add_option(
      "--decoded-cache-dataset-bytes", decoded_cache_dataset,
      "Its share per dataset (default: the budget / the number of datasets)");
  auto* o_backend = app.add_option("--backend", backend, "cpu | fpga | auto")
                        ->check(CLI::IsMember({"cpu", "fpga", "auto"}));
  auto* o_xclbin =
      app.add_option("--xclbin", xclbin, "FPGA bitstream (fpga/auto)");
  auto* o_device = app.add_option("--device-index", device_index,
                                  "FPGA device index (fpga/auto)");
  auto* o_simulate = app.add_flag(
      "--fpga-simulate-kernel", fpga_simulate,
      "Development/testing: run the C-simulation kernel on the host after "
      "each device run (for XRT's noop shim; not acceleration)");
  auto* o_inject =
      app.add_option("--fpga-inject-error-run", fpga_inject_run,
                     "Testing: FPGA run N (0-based) reports a device error "
                     "(its images fall back to the CPU)")
          ->check(CLI::Range(int64_t{0}, std::numeric_limits<int64_t>::max()));
  auto* o_tls_cert = app.add_option(
      "--tls-cert", tls_cert,
      "Serve TLS with this certificate chain (PEM; needs --tls-key)");
  auto* o_tls_key =
      app.add_option("--tls-key", tls_key, "Private key (PEM) of --tls-cert");
  auto* o_tls_ca = app.add_option(
      "--tls-client-ca", tls_client_ca,
      "Require client certificates signed by these CAs (PEM; mutual TLS)");
  auto* o_metrics = app.add_option(
      "--metrics-listen", metrics_listen,
      "Serve Prometheus metrics (/metrics) and a liveness page (/healthz) "
      "over HTTP on HOST:PORT, e.g. 0.0.0.0:9464 (default: off)");
  auto* o_metrics_port_file =
      app.add_option("--metrics-port-file", metrics_port_file,
                     "Write the bound metrics port to this file (with port 0)");
  auto* o_log = app.add_option("--log-level", log_level,
                               "trace|debug|info|warn|error|critical|off");
  auto* o_drain = app.add_option(
      "--drain-seconds", drain,
      "On SIGTERM/SIGINT let streams finish this long, then cancel");

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    result.exit_now = true;
    result.exit_code = 0;
    result.message = app.help();
    return result;
  } catch (const CLI::CallForVersion& v) {
    result.exit_now = true;
    result.exit_code = 0;
    result.message = v.what();
    return result;
  } catch (const CLI::ParseError& e) {
    result.exit_now = true;
    result.exit_code = 2;
    result.message =
        std::string("nearprepd: ") + e.what() + "\nRun with --help for usage.";
    return result;
  }

  auto fail = [&result](const absl::Status& st) {
    result.exit_now = true;
    result.exit_code = 2;
    result.message =
        "nearprepd: bad configuration: " + std::string(st.message());
    return result;
  };

  if (o_config->count() > 0) {
    std::ifstream in(config_path);
    if (!in) {
      return fail(absl::InvalidArgumentError("--config: cannot read '" +
                                             config_path + "'"));
    }
    std::stringstream ss;
    ss << in.rdbuf();
    absl::Status st = ApplyYamlConfig(ss.str(), config_path, &c);
    if (!st.ok()) return fail(st);
  }
  if (o_listen->count()) {
    c.listen_address = listen;
    c.listen_given = true;
  }
  if (o_port->count()) c.port = port;
  if (o_port_file->count()) c.port_file = port_file;
  for (const std::string& d : datasets) {
    absl::StatusOr<DatasetConfig> dc = ParseDatasetFlag(d, &result.warnings);
    if (!dc.ok()) return fail(dc.status());
    c.server.datasets.push_back(*dc);
  }
  (void)o_dataset;
  if (o_workers->count()) c.server.pipeline.workers = workers;
  if (o_prefetch->count()) c.server.pipeline.prefetch_depth = prefetch;
  if (o_chunk->count()) c.server.pipeline.chunk_size = chunk;
  if (o_max_batch->count()) c.server.limits.max_batch_size = max_batch;
  if (o_max_out->count()) c.server.limits.max_output_pixels = max_output_pixels;
  if (o_max_dec->count()) {
    c.server.limits.max_decoded_pixels = max_decoded_pixels;
  }
  if (o_max_streams->count()) {
    c.server.limits.max_concurrent_streams = max_streams;
  }
  if (o_mem->count()) {
    absl::StatusOr<uint64_t> v = ParseByteSize(per_stream_memory);
    if (!v.ok()) {
      return fail(absl::InvalidArgumentError(
          "--per-stream-memory: " + std::string(v.status().message())));
    }
    c.server.limits.per_stream_memory_bytes = *v;
  }
  if (o_grpc_mem->count()) {
    absl::StatusOr<uint64_t> v = ParseByteSize(grpc_memory);
    if (!v.ok()) {
      return fail(absl::InvalidArgumentError(
          "--grpc-memory: " + std::string(v.status().message())));
    }
    c.server.grpc_memory_bytes = *v;
  }
  if (o_backend->count()) c.backend.kind = backend;
  if (o_xclbin->count()) c.backend.fpga.xclbin = xclbin;
  if (o_device->count()) c.backend.fpga.device_index = device_index;
  if (o_simulate->count()) c.backend.fpga.simulate_kernel = fpga_simulate;
  if (o_inject->count()) c.backend.fpga.inject_error_run = fpga_inject_run;
  if (o_tls_cert->count()) c.server.tls.cert_file = tls_cert;
  if (o_tls_key->count()) c.server.tls.key_file = tls_key;
  if (o_tls_ca->count()) c.server.tls.client_ca_file = tls_client_ca;
  if (o_metrics->count()) c.metrics_listen = metrics_listen;
  if (o_metrics_port_file->count()) c.metrics_port_file = metrics_port_file;
  if (o_log->count()) c.log_level = log_level;
  if (o_drain->count()) c.drain_seconds = drain;
  // Safe default: plaintext only on loopback unless the operator says
  // otherwise (NearprepServer::Start warns about plaintext elsewhere).
  if (!c.listen_given) {
    c.listen_address = c.server.tls.cert_file.empty() ? "127.0.0.1" : "0.0.0.0";
  }
  for (const auto& [opt, text, out] :
       {std::tuple<CLI::Option*, const std::string*, uint64_t*>{
            o_decoded_cache, &decoded_cache, &c.backend.decoded_cache_bytes},
        {o_decoded_cache_dataset, &decoded_cache_dataset,
         &c.backend.decoded_cache_dataset_bytes}}) {
    if (opt->count() == 0) continue;
    absl::StatusOr<uint64_t> v = ParseByteSize(*text);
    if (!v.ok()) {
      return fail(absl::InvalidArgumentError(opt->get_name() + ": " +
                                             std::string(v.status().message())));
    }
    *out = *v;
  }
  c.backend.dataset_count = std::max<uint64_t>(1, c.server.datasets.size());
  if (o_config->count() > 0) c.config_file = config_path;

  if (absl::Status st = ValidateDaemonConfig(c); !st.ok()) return fail(st);
  return result;
}

absl::Status ReloadAuthorization(const std::string& config_file,
                                 authz::Authorizer* authorizer) {
  if (config_file.empty()) {
    return absl::FailedPreconditionError(
        "no --config file to reload the authorization section from");
  }
  std::ifstream in(config_file);
  if (!in) {
    return absl::InvalidArgumentError("cannot read '" + config_file + "'");
  }
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string text = ss.str();
  // The whole file is checked as at start (a file that would not start the
  // daemon changes nothing), and a reload never turns authorization off:
  // an empty file, one cut short before its `authorization:` section or
  // one that is not a mapping keeps the policy in force (fail closed).
  YAML::Node root;
  NP_RETURN_IF_ERROR(LoadYaml(text, config_file, &root));
  if (!root.IsMap()) {
    return Bad(config_file,
               root.IsNull() ? "is empty" : "is not a YAML mapping");
  }
  DaemonConfig scratch;
  NP_RETURN_IF_ERROR(ApplyYamlConfig(text, config_file, &scratch));
  const authz::PolicyConfig& policy = scratch.server.authorization;
  if (authorizer->enabled() && !policy.enabled) {
    return Bad(
        config_file,
        "has no authorization section: a reload never turns authorization off "
        "(restart the daemon to run without it)");
  }
  return authorizer->Reload(policy);
}

}  // namespace nearprep
