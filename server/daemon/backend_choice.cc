#include "server/daemon/backend_choice.h"

#include <algorithm>
#include <cstdint>
#include <utility>

#include "absl/strings/str_cat.h"
#include "server/backend/cpu_backend.h"
#include "server/data/decoded_cache.h"
#include "server/fpga/fpga_factory.h"

namespace nearprep {

absl::StatusOr<std::shared_ptr<Backend>> CreateBackend(
    const BackendOptions& options, std::string* why) {
  std::string reason;
  if (options.kind == "cpu") {
    reason = "cpu: requested";
  } else if (options.kind == "auto" || options.kind == "fpga") {
    // fpga: must start; auto: fpga when a device opens and the xclbin
    // loads, else cpu with the reason.
    std::string fpga_why;
    auto fpga = CreateFpgaBackend(options.fpga, &fpga_why);
    if (fpga.ok()) {
      if (why != nullptr) {
        *why = absl::StrCat(options.kind, ": ", fpga_why);
        // The cache is the cpu backend's (server/data/decoded_cache.h).
        if (options.decoded_cache_bytes > 0) {
          absl::StrAppend(why, "; decoded_cache.bytes ignored: the fpga "
                               "backend decodes on the device");
        }
      }
      return std::move(fpga).value();
    }
    if (options.kind == "fpga") return fpga.status();
    reason = absl::StrCat("auto: ", fpga.status().message(), "; using cpu");
  } else {
    return absl::InvalidArgumentError(absl::StrCat(
        "backend: unknown kind '", options.kind, "' (cpu, fpga or auto)"));
  }
  std::shared_ptr<DecodedImageCache> cache;
  if (options.decoded_cache_bytes > 0) {
    DecodedImageCache::Options c;
    c.budget_bytes = options.decoded_cache_bytes;
    c.dataset_budget_bytes =
        options.decoded_cache_dataset_bytes > 0
            ? options.decoded_cache_dataset_bytes
            : options.decoded_cache_bytes /
                  std::max<uint64_t>(1, options.dataset_count);
    cache = std::make_shared<DecodedImageCache>(c);
    absl::StrAppend(&reason, "; decoded-image cache ", c.budget_bytes,
                    " bytes (", c.dataset_budget_bytes, " per dataset)");
  }
  if (why != nullptr) *why = reason;
  return std::shared_ptr<Backend>(std::make_shared<CpuBackend>(std::move(cache)));
}

}  // namespace nearprep
