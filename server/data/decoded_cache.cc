#include "server/data/decoded_cache.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <utility>

#include "absl/hash/hash.h"
#include "absl/strings/string_view.h"

namespace nearprep {

DecodedImageCache::DecodedImageCache(Options options) : options_(options) {}

namespace {

constexpr uint64_t kHugePage = uint64_t{2} << 20;
constexpr uint64_t kBlockBytes = uint64_t{8} << 20;

uint64_t RoundUp(uint64_t n, uint64_t to) { return (n + to - 1) / to * to; }

}  // namespace

// A mapping that images are carved from; unmapped when the last image
// carved from it (and the cache's current-block pointer) let go.
struct DecodedImageCache::Block {
  uint8_t* base = nullptr;
  uint64_t size = 0;
  uint64_t used = 0;
  ~Block() {
    if (base != nullptr) munmap(base, size);
  }
};

std::shared_ptr<uint8_t> DecodedImageCache::AllocatePixels(uint64_t bytes) {
  if (bytes == 0) return nullptr;
  static const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  const uint64_t need = RoundUp(bytes, page);
  std::shared_ptr<Block> block;
  uint64_t offset = 0;
  {
    MutexLock lock(&arena_mu_);
    if (arena_ == nullptr || arena_->size - arena_->used < need) {
      // A new block (2 MiB-aligned: over-map by 2 MiB and trim).
      const uint64_t size = RoundUp(std::max(need, kBlockBytes), kHugePage);
      void* raw = mmap(nullptr, size + kHugePage, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      if (raw == MAP_FAILED) return nullptr;
      const uintptr_t start = reinterpret_cast<uintptr_t>(raw);
      const uintptr_t aligned = RoundUp(start, kHugePage);
      if (aligned > start) munmap(raw, aligned - start);
      const uintptr_t end = start + size + kHugePage;
      if (end > aligned + size) {
        munmap(reinterpret_cast<void*>(aligned + size), end - (aligned + size));
      }
      auto fresh = std::make_shared<Block>();
      fresh->base = reinterpret_cast<uint8_t*>(aligned);
      fresh->size = size;
#ifdef MADV_POPULATE_WRITE
      // Fault the block in with one call (a hint: older kernels refuse it
      // and the pages fault one by one as the decoder writes them).
      madvise(fresh->base, size, MADV_POPULATE_WRITE);
#endif
      arena_ = std::move(fresh);
    }
    block = arena_;
    offset = block->used;
    block->used += need;
  }
  uint8_t* p = block->base + offset;
  // The deleter holds the block; it hands the image's pages back first.
  return std::shared_ptr<uint8_t>(p, [block, need](uint8_t* q) {
    madvise(q, need, MADV_DONTNEED);
  });
}

uint64_t DecodedImageCache::Fingerprint(const uint8_t* data, size_t size) {
  // Every byte is hashed (absl's hash of a string_view reads all of it).
  return static_cast<uint64_t>(absl::Hash<absl::string_view>()(
      absl::string_view(reinterpret_cast<const char*>(data), size)));
}

size_t DecodedImageCache::KeyHash::operator()(const Key& k) const {
  return absl::HashOf(k.id, k.settings.style, k.settings.max_decoded_values);
}

uint64_t DecodedImageCache::DatasetBudget() const {
  const uint64_t d = options_.dataset_budget_bytes;
  return d == 0 || d > options_.budget_bytes ? options_.budget_bytes : d;
}

void DecodedImageCache::EraseLocked(Partition* p, const Key& key) {
  auto it = p->entries.find(key);
  if (it == p->entries.end()) return;
  const uint64_t bytes = it->second.image->bytes();
  if (options_.admission == Admission::kLru) p->lru.erase(it->second.lru);
  p->entries.erase(it);
  p->stats.bytes -= bytes;
  p->stats.entries -= 1;
  p->stats.evicted += 1;
  total_bytes_ -= bytes;
}

void DecodedImageCache::ClearLocked(Partition* p) {
  p->stats.evicted += p->entries.size();
  total_bytes_ -= p->stats.bytes;
  p->entries.clear();
  p->lru.clear();
  p->stats.bytes = 0;
  p->stats.entries = 0;
}

std::shared_ptr<const DecodedImage> DecodedImageCache::Find(
    const std::string& dataset, const std::string& version, uint64_t id,
    const DecodeSettings& settings, uint64_t encoded_size,
    uint64_t encoded_hash) {
  if (!enabled()) return nullptr;
  MutexLock lock(&mu_);
  Partition& p = partitions_[dataset];
  p.stats.dataset = dataset;
  if (p.version != version) {
    p.stats.misses += 1;
    return nullptr;
  }
  const Key key{id, settings};
  auto it = p.entries.find(key);
  if (it == p.entries.end()) {
    p.stats.misses += 1;
    return nullptr;
  }
  const DecodedImage& img = *it->second.image;
  if (img.encoded_size != encoded_size || img.encoded_hash != encoded_hash) {
    // The sample's bytes changed since they were decoded: never serve them.
    EraseLocked(&p, key);
    p.stats.stale += 1;
    p.stats.misses += 1;
    return nullptr;
  }
  if (options_.admission == Admission::kLru) {
    p.lru.splice(p.lru.begin(), p.lru, it->second.lru);
  }
  p.stats.hits += 1;
  return it->second.image;
}

bool DecodedImageCache::WouldAdmit(const std::string& dataset,
                                   const std::string& version,
                                   uint64_t bytes) const {
  if (!enabled() || bytes > DatasetBudget()) return false;
  if (options_.admission == Admission::kLru) return true;
  MutexLock lock(&mu_);
  auto it = partitions_.find(dataset);
  // A new version starts from an empty partition.
  const uint64_t held =
      it == partitions_.end() || it->second.version != version
          ? 0
          : it->second.stats.bytes;
  const uint64_t others =
      total_bytes_ - (it == partitions_.end() ? 0 : it->second.stats.bytes);
  return held + bytes <= DatasetBudget() &&
         others + held + bytes <= options_.budget_bytes;
}

bool DecodedImageCache::Insert(const std::string& dataset,
                               const std::string& version, uint64_t id,
                               const DecodeSettings& settings,
                               std::shared_ptr<const DecodedImage> image) {
  if (!enabled() || image == nullptr) return false;
  const uint64_t bytes = image->bytes();
  if (bytes > DatasetBudget()) return false;
  MutexLock lock(&mu_);
  Partition& p = partitions_[dataset];
  p.stats.dataset = dataset;
  if (p.version != version) {
    // Reloaded with another listing: what the ids stood for is gone.
    ClearLocked(&p);
    p.version = version;
  }
  const Key key{id, settings};
  if (p.entries.count(key) != 0) return false;  // another stream was first
  if (options_.admission == Admission::kLru) {
    while (!p.lru.empty() && (p.stats.bytes + bytes > DatasetBudget() ||
                              total_bytes_ + bytes > options_.budget_bytes)) {
      EraseLocked(&p, p.lru.back());
    }
  }
  if (p.stats.bytes + bytes > DatasetBudget() ||
      total_bytes_ + bytes > options_.budget_bytes) {
    return false;
  }
  Slot slot;
  slot.image = std::move(image);
  if (options_.admission == Admission::kLru) {
    p.lru.push_front(key);
    slot.lru = p.lru.begin();
  }
  p.entries.emplace(key, std::move(slot));
  p.stats.bytes += bytes;
  p.stats.entries += 1;
  p.stats.admitted += 1;
  total_bytes_ += bytes;
  return true;
}

void DecodedImageCache::DropDataset(const std::string& dataset) {
  MutexLock lock(&mu_);
  auto it = partitions_.find(dataset);
  if (it != partitions_.end()) ClearLocked(&it->second);
}

std::vector<DecodedCacheStats> DecodedImageCache::Stats() const {
  MutexLock lock(&mu_);
  std::vector<DecodedCacheStats> out;
  out.reserve(partitions_.size());
  for (const auto& [name, p] : partitions_) {
    out.push_back(p.stats);
    out.back().budget_bytes = DatasetBudget();
  }
  return out;
}

uint64_t DecodedImageCache::resident_bytes() const {
  MutexLock lock(&mu_);
  return total_bytes_;
}

}  // namespace nearprep
