// torch's CPU allocator with a pool of the memory its large buffers freed, bounded by the process's own peak.
//
// Built and loaded by gaescale/cpu_cache.py (the reasons, the measurements and the policy are described there).
// Buffers below `threshold` bytes go to the allocator that was installed before (torch's default). A larger buffer
// is a mapping of its own, rounded up to 2 MiB and aligned to 2 MiB (huge pages where asked). When it is freed its
// pages stay in the process, in the pool; a later buffer is made of pooled pages: a pooled range of the same size as
// it is, else pooled ranges moved into a new mapping with mremap (the pages move, their contents are not copied and
// nothing is faulted in), and only what the pool lacks is new memory. Buffers in use and pool together never exceed
// the most the large buffers have been in use at once since the last `empty` (the peak without the pool), and after a
// free they are cut back to `keep` times that peak: the oldest pooled ranges go back to the kernel.
#include <c10/core/CPUAllocator.h>
#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <unordered_map>
#include <vector>

namespace {

constexpr size_t kGrain = size_t(2) << 20;  // 2 MiB: a huge page

struct Range {
  char* addr;
  size_t len;
};

void release(void* ptr);

// A new mapping of `len` bytes (a multiple of kGrain) aligned to kGrain; nullptr where the kernel refuses.
char* reserve(size_t len, bool huge) {
  void* p = mmap(nullptr, len + kGrain, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return nullptr;
  char* base = static_cast<char*>(p);
  char* start = reinterpret_cast<char*>((reinterpret_cast<uintptr_t>(base) + kGrain - 1) / kGrain * kGrain);
  if (start > base) munmap(base, start - base);
  if (start + len < base + len + kGrain) munmap(start + len, base + len + kGrain - (start + len));
  if (huge) madvise(start, len, MADV_HUGEPAGE);
  return start;
}

class PooledAllocator final : public c10::Allocator {
 public:
  PooledAllocator(c10::Allocator* base, size_t threshold, double keep, bool huge)
      : base_(base), threshold_(threshold), keep_(keep), huge_(huge) {}

  // threshold > 0 and keep in (0, 1] replace the ones in force; others leave them.
  void configure(int64_t threshold, double keep) {
    if (threshold > 0) threshold_ = static_cast<size_t>(threshold);
    std::lock_guard<std::mutex> guard(mutex_);
    if (keep > 0 && keep <= 1) keep_ = keep;
  }

  c10::DataPtr allocate(size_t n) override {
    if (n < threshold_) {
      void* p = base_->raw_allocate(n);
      return {p, p, &release, c10::Device(c10::DeviceType::CPU)};
    }
    const size_t size = (n + kGrain - 1) / kGrain * kGrain;
    char* p = take(size);
    TORCH_CHECK_WITH(OutOfMemoryError, p != nullptr, "gaescale.cpu_cache: the kernel refused ", size,
                     " bytes (mmap: ", std::strerror(errno), ")");
    return {p, p, &release, c10::Device(c10::DeviceType::CPU)};
  }

  c10::DeleterFnPtr raw_deleter() const override { return &release; }

  void copy_data(void* dest, const void* src, std::size_t count) const override {
    default_copy_data(dest, src, count);
  }

  // A large buffer goes to the pool; then the oldest pooled ranges go back to the kernel until buffers in use and
  // pool are within keep times the peak of buffers in use (or the pool is empty).
  void free(void* ptr) {
    std::vector<Range> released;
    bool small = false;
    {
      std::lock_guard<std::mutex> guard(mutex_);
      auto it = sizes_.find(ptr);
      if (it == sizes_.end()) {
        small = true;  // the previous allocator's
      } else {
        const size_t size = it->second;
        sizes_.erase(it);
        live_ -= size;
        pool_.push_back({static_cast<char*>(ptr), size});
        pooled_ += size;
        const double cap = pooling_ ? keep_ * static_cast<double>(peak_) : 0.0;
        size_t k = 0;
        while (k < pool_.size() && static_cast<double>(live_ + pooled_) > cap) {
          pooled_ -= pool_[k].len;
          released_ += pool_[k].len;
          released.push_back(pool_[k++]);
        }
        pool_.erase(pool_.begin(), pool_.begin() + static_cast<std::ptrdiff_t>(k));
      }
    }
    if (small) base_->raw_deallocate(ptr);
    for (const Range& r : released) munmap(r.addr, r.len);
  }

  void set_pooling(bool on) {
    std::lock_guard<std::mutex> guard(mutex_);
    pooling_ = on;
  }

  // Returns the pool to the kernel and restarts the limit and the peak of buffers in use from those in use now.
  void empty() {
    std::vector<Range> ranges;
    {
      std::lock_guard<std::mutex> guard(mutex_);
      ranges.swap(pool_);
      pooled_ = 0;
      limit_ = live_;
      peak_ = live_;
    }
    for (const Range& r : ranges) munmap(r.addr, r.len);
  }

  void stats(int64_t* out) {
    std::lock_guard<std::mutex> guard(mutex_);
    const size_t values[] = {live_, pooled_, limit_, peak_, whole_, moved_, fresh_, released_, moves_,
                             threshold_.load()};
    for (size_t i = 0; i < sizeof(values) / sizeof(values[0]); ++i) out[i] = static_cast<int64_t>(values[i]);
  }

  c10::Allocator* base() const { return base_; }

 private:
  // A buffer of `size` bytes: a pooled range of that size, else a new mapping filled with pooled pages first.
  char* take(size_t size) {
    std::lock_guard<std::mutex> guard(mutex_);
    char* p = nullptr;
    for (size_t i = pool_.size(); i-- > 0;) {  // the most recently freed range of this very size
      if (pool_[i].len == size) {
        p = pool_[i].addr;
        pool_.erase(pool_.begin() + static_cast<std::ptrdiff_t>(i));
        pooled_ -= size;
        whole_ += size;
        break;
      }
    }
    if (p == nullptr) {
      p = reserve(size, huge_);
      if (p == nullptr) return nullptr;
      fill(p, size);
    }
    sizes_[p] = size;
    live_ += size;
    limit_ = std::max(limit_, live_ + pooled_);
    peak_ = std::max(peak_, live_);
    return p;
  }

  // Moves pooled pages into [p, p + size): the smallest range that covers it all, else the largest ranges first.
  void fill(char* p, size_t size) {
    size_t done = 0;
    while (done < size && !pool_.empty()) {
      const size_t need = size - done;
      size_t best = 0;
      for (size_t i = 1; i < pool_.size(); ++i) {
        const bool covers = pool_[i].len >= need, best_covers = pool_[best].len >= need;
        if (covers != best_covers ? covers : (covers ? pool_[i].len < pool_[best].len
                                                     : pool_[i].len > pool_[best].len)) {
          best = i;
        }
      }
      Range& r = pool_[best];
      const size_t len = std::min(r.len, need);
      if (mremap(r.addr, len, len, MREMAP_MAYMOVE | MREMAP_FIXED, p + done) == MAP_FAILED) break;  // fresh pages
      r.addr += len;
      r.len -= len;
      pooled_ -= len;
      if (r.len == 0) pool_.erase(pool_.begin() + static_cast<std::ptrdiff_t>(best));
      done += len;
      moved_ += len;
      ++moves_;
    }
    fresh_ += size - done;
  }

  c10::Allocator* base_;
  std::atomic<size_t> threshold_;
  double keep_;
  const bool huge_;
  std::mutex mutex_;
  bool pooling_ = true;
  std::unordered_map<void*, size_t> sizes_;  // large buffers in use: address -> mapped bytes
  std::vector<Range> pool_;                  // freed large buffers' pages, oldest first
  size_t live_ = 0, pooled_ = 0, limit_ = 0, peak_ = 0;  // limit, peak: of live + pooled, live, since empty()
  size_t whole_ = 0, moved_ = 0, fresh_ = 0;  // bytes served from a whole pooled range, moved from the pool, new
  size_t released_ = 0, moves_ = 0;           // bytes the keep rule returned to the kernel; mremaps
};

// Never destroyed: buffers allocated through it may outlive any point at which it could be.
PooledAllocator* pooled = nullptr;

void release(void* ptr) { pooled->free(ptr); }

}  // namespace

extern "C" {

// Makes the pool torch's CPU allocator; 0 on success, 1 where another allocator than torch's default is installed
// (left as it is), 2 where that allocator cannot free raw pointers. A threshold > 0 and a keep in (0, 1] replace
// the ones in force; the first call's `huge` holds.
int gaescale_cache_install(int64_t threshold, double keep, int huge) {
  c10::Allocator* current = c10::GetCPUAllocator();
  if (pooled != nullptr && current == pooled) {
    pooled->configure(threshold, keep);
    return 0;
  }
  if (current != c10::GetDefaultCPUAllocator()) return 1;
  if (current->raw_deleter() == nullptr) return 2;
  if (pooled == nullptr) pooled = new PooledAllocator(current, static_cast<size_t>(threshold), keep, huge != 0);
  pooled->configure(threshold, keep);
  pooled->set_pooling(true);
  c10::SetCPUAllocator(pooled, 0);
  return 0;
}

// Puts the previous allocator back; the pool goes back to the kernel, and so do large buffers still in use when
// they are freed.
void gaescale_cache_uninstall() {
  if (pooled == nullptr) return;
  c10::SetCPUAllocator(pooled->base(), 0);
  pooled->set_pooling(false);
  pooled->empty();
}

// Returns the pool to the kernel and restarts the peaks from the buffers in use.
void gaescale_cache_empty() {
  if (pooled != nullptr) pooled->empty();
}

int gaescale_cache_installed() { return pooled != nullptr && c10::GetCPUAllocator() == pooled; }

// out: live, pooled, limit and peak bytes; bytes served whole from the pool, moved from it, new, released by the
// keep rule; mremaps; threshold
void gaescale_cache_stats(int64_t* out) {
  if (pooled != nullptr) {
    pooled->stats(out);
  } else {
    std::fill(out, out + 10, int64_t(0));
  }
}

}  // extern "C"
