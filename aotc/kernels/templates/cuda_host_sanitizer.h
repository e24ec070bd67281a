// cuda_host_sanitizer.h: a compute-sanitizer for the host emulation (AOTC_SANITIZE builds).
//
// Included by cuda_host_emu.h when AOTC_SANITIZE is defined; host_compile.py
// then compiles the kernels with `-fsanitize=kernel-address` and outline
// instrumentation, so g++ calls __asan_{load,store}N_noabort(addr) before
// every load and store of kernel code. No ASan runtime is linked: the hooks
// are defined here, and they check each access against what the GPU
// enforces:
//   out-of-bounds    the address is in no argument buffer (their extents come
//                    from the caller), no shared memory, not on the thread's
//                    stack and not in the module's own data;
//   misaligned       a 2/4/8/16-byte access not aligned to its size (a
//                    float4/half2/int4 vector access; -fno-tree-sra keeps
//                    struct copies whole);
//   shared-race / global-race
//                    a conflicting access (write/write, read/write; atomics
//                    excepted) by another thread of the block in the same
//                    barrier interval (a warp collective orders its warp);
//   cross-block-race global memory written by one block and read or written
//                    by another in the launch, unless the writer fenced
//                    (__threadfence) and then did an atomic on a location the
//                    other block did an atomic on afterwards (split-K's
//                    counters, aotc_prelude.cuh's aotc_split_last);
//   divergent-barrier threads of a block waiting at different __syncthreads,
//                    or a thread exiting while others wait / have waited;
//   uninitialized-shared-read  shared memory read before any write in the block.
// Shadow state is one cell per byte touched in the launch, so a sanitized
// launch runs on one worker, blocks one after another, launches serialised.
// AOTC_SANITIZE_ORDER=reverse|random:SEED permutes blocks and threads.
// Violations are kept for aotc_host_sanitizer_take() and, when
// AOTC_SANITIZE_REPORT names a file, appended to it as JSON lines.
#pragma once

#include <dlfcn.h>
#include <link.h>
#include <mutex>
#include <string>
#include <unordered_map>

namespace aotc_san {

enum Kind { OOB, MISALIGNED, SHARED_RACE, GLOBAL_RACE, BLOCK_RACE, DIVERGENT, UNINIT, NKINDS };
inline const char *const kKindNames[NKINDS] = {
    "out-of-bounds", "misaligned", "shared-race", "global-race", "cross-block-race",
    "divergent-barrier", "uninitialized-shared-read"};

// One access as the shadow remembers it. `thread` packs tid (11 bits) and flags.
struct Acc {
  uint32_t block = 0, bar = 0;
  uint16_t wsync = 0, thread = 0;
};
// kManyReaders: other threads of the reader's warp read in the same warp epoch;
// kManyWarps: threads of other warps read in the same barrier interval.
constexpr uint16_t kValid = 1u << 15, kAtomic = 1u << 14, kManyReaders = 1u << 13, kManyWarps = 1u << 12,
                   kReaderFlags = kManyReaders | kManyWarps, kTid = 0x7ff;

struct Cell {
  Acc w, r;
  uint32_t other_reader_block = 0;  // +1; another block that read since the last write
};
constexpr uintptr_t kPage = 4096;

struct Region {
  uintptr_t lo, hi;
  int param;
};

struct Release {
  uint32_t block, bar;
  uint16_t thread;
};

struct State {
  std::mutex launch_mu;       // one sanitized launch at a time
  std::mutex report_mu;
  // per launch
  const char *kernel = "?";
  std::vector<Region> regions;
  std::unordered_map<uintptr_t, Cell *> pages;
  uintptr_t last_page = 1;
  Cell *last_cells = nullptr;
  std::vector<std::unordered_map<uint32_t, Release>> acquired;  // per block: releaser -> point
  std::unordered_map<uintptr_t, std::vector<Release>> releases;  // sync location -> releases
  std::vector<uint8_t> fenced;                                   // per block
  uint32_t block = 0;
  aotc_emu::Worker *worker = nullptr;
  bool divergent_reported = false;
  int first_exited = -1;
  std::vector<uintptr_t> sites;  // per thread: the barrier it waits at
  uintptr_t smem_lo = 0, smem_hi = 0, dyn_lo = 0, dyn_hi = 0;  // static: the module's writable data
  // order
  int order = 0;  // 0 forward, 1 reverse, 2 random
  uint64_t seed = 0, mult = 1, add = 0;
  std::vector<unsigned> tperm;
  // module image
  std::vector<std::pair<uintptr_t, uintptr_t>> image;
  // results
  uint64_t counts[NKINDS] = {};
  uint64_t kept[NKINDS] = {};
  std::string pending;  // JSON lines not yet taken
};

inline State g_state;
__attribute__((no_sanitize_address)) inline State &st() { return g_state; }

// Hooks fire only in kernel code, which runs on the launch's one worker thread:
// a global flag and that thread's id are cheaper than module TLS on every access.
inline bool g_in_kernel = false;  // atomic builtins only: std::atomic's members would be instrumented
inline pthread_t g_kernel_thread;
__attribute__((no_sanitize_address)) inline bool in_kernel() {
  return __atomic_load_n(&g_in_kernel, __ATOMIC_RELAXED) && pthread_equal(pthread_self(), g_kernel_thread);
}
inline thread_local const uint64_t *tl_extents = nullptr;      // HostLibrary's override
inline thread_local unsigned tl_extent_count = 0;

// Kernel code calls into the emulator (barriers, collectives): their own
// memory traffic is not the kernel's. The flag is false at every fiber switch.
struct EmuScope {
  bool saved;
  __attribute__((no_sanitize_address)) EmuScope() : saved(in_kernel()) {
    if (saved) __atomic_store_n(&g_in_kernel, false, __ATOMIC_RELAXED);
  }
  __attribute__((no_sanitize_address)) ~EmuScope() {
    if (saved) __atomic_store_n(&g_in_kernel, true, __ATOMIC_RELAXED);
  }
};
__attribute__((no_sanitize_address)) inline void set_in_kernel(bool on) {
  __atomic_store_n(&g_in_kernel, on, __ATOMIC_RELAXED);
}

// -------------------------------------------------------------- reporting
__attribute__((no_sanitize_address)) inline void report(Kind k, uintptr_t addr, unsigned size,
                                                        const char *what) {
  State &s = st();
  aotc_emu::Worker *w = st().worker;
  std::lock_guard<std::mutex> g(s.report_mu);
  s.counts[k]++;
  if (s.kept[k] >= 50) return;  // counted, not listed
  s.kept[k]++;
  char line[768];
  unsigned tid = w ? w->cur_tid : 0;
  dim3 b = w ? w->launch->block : dim3(1, 1, 1);
  snprintf(line, sizeof line,
           "{\"kind\": \"%s\", \"kernel\": \"%s\", \"block\": [%u, %u, %u], \"thread\": [%u, %u, %u], "
           "\"address\": \"0x%llx\", \"size\": %u, \"detail\": \"%s\"}\n",
           kKindNames[k], s.kernel, blockIdx.x, blockIdx.y, blockIdx.z, tid % b.x, (tid / b.x) % b.y,
           tid / (b.x * b.y), (unsigned long long)addr, size, what);
  s.pending += line;
  const char *path = getenv("AOTC_SANITIZE_REPORT");
  if (path && *path) {
    if (FILE *f = fopen(path, "a")) {
      fputs(line, f);
      fclose(f);
    }
  }
}

// ------------------------------------------------------------ classification
__attribute__((no_sanitize_address)) inline int image_cb(dl_phdr_info *info, size_t, void *data) {
  uintptr_t probe = (uintptr_t)&st, wlo = 0, whi = 0;
  std::vector<std::pair<uintptr_t, uintptr_t>> segs;
  bool mine = false;
  for (int i = 0; i < info->dlpi_phnum; i++) {
    const ElfW(Phdr) &p = info->dlpi_phdr[i];
    if (p.p_type != PT_LOAD) continue;
    uintptr_t lo = info->dlpi_addr + p.p_vaddr, hi = lo + p.p_memsz;
    if (p.p_flags & PF_W) {
      wlo = lo, whi = hi;
      continue;  // the static __shared__ arrays live there
    }
    segs.push_back({lo, hi});
    mine |= probe >= lo && probe < hi;
  }
  if (mine) {
    *static_cast<std::vector<std::pair<uintptr_t, uintptr_t>> *>(data) = segs;
    st().smem_lo = wlo, st().smem_hi = whi;
  }
  return mine;
}

// An access in none of the launch's buffers: fine when it is the thread's own
// stack, a built-in variable or the module's static data, else out of bounds.
__attribute__((no_sanitize_address)) inline bool private_address(uintptr_t a) {
  aotc_emu::Worker *w = st().worker;
  if (w->cur && a >= (uintptr_t)w->cur->map && a < (uintptr_t)w->cur->map + w->cur->map_size)
    return true;
  auto in = [a](const void *p, size_t n) { return a >= (uintptr_t)p && a < (uintptr_t)p + n; };
  if (in(&threadIdx, sizeof threadIdx) || in(&blockIdx, sizeof blockIdx) ||
      in(&blockDim, sizeof blockDim) || in(&gridDim, sizeof gridDim))
    return true;
  for (auto &seg : st().image)
    if (a >= seg.first && a < seg.second) return true;
  return false;
}

__attribute__((no_sanitize_address)) inline void describe_oob(uintptr_t a, unsigned size, char *out,
                                                              size_t n) {
  State &s = st();
  const Region *best = nullptr;
  uintptr_t dist = ~(uintptr_t)0;
  for (const Region &r : s.regions) {
    uintptr_t d = a < r.lo ? r.lo - a : a >= r.hi ? a - r.hi + 1 : 0;
    if (d < dist) dist = d, best = &r;
  }
  if (!best) {
    snprintf(out, n, "%u-byte access outside every buffer of the launch", size);
  } else if (a >= best->lo && a < best->hi) {
    snprintf(out, n, "%u-byte access at offset %llu runs past the end of param %d (%llu bytes)", size,
             (unsigned long long)(a - best->lo), best->param, (unsigned long long)(best->hi - best->lo));
  } else if (a < best->lo) {
    snprintf(out, n, "%u-byte access %llu bytes before param %d (%llu bytes)", size,
             (unsigned long long)(best->lo - a), best->param, (unsigned long long)(best->hi - best->lo));
  } else {
    snprintf(out, n, "%u-byte access at offset %llu of param %d (%llu bytes): past its end", size,
             (unsigned long long)(a - best->lo), best->param, (unsigned long long)(best->hi - best->lo));
  }
}

// --------------------------------------------------------------- the shadow
__attribute__((no_sanitize_address)) inline Cell *cell(uintptr_t a) {
  State &s = st();
  uintptr_t page = a & ~(kPage - 1);
  if (page != s.last_page) {
    Cell *&c = s.pages[page];
    if (!c) c = new Cell[kPage]();
    s.last_page = page;
    s.last_cells = c;
  }
  return s.last_cells + (a - page);
}

// Is the earlier access `p` ordered before the current one `c`?
__attribute__((no_sanitize_address)) inline bool ordered(const Acc &p, const Acc &c) {
  if (p.block != c.block) {
    const auto &acq = st().acquired[c.block];
    auto it = acq.find(p.block);
    if (it == acq.end()) return false;
    const Release &r = it->second;
    return p.bar < r.bar || (p.bar == r.bar && (p.thread & kTid) == r.thread);
  }
  unsigned pt = p.thread & kTid, ct = c.thread & kTid;
  if (pt == ct || p.bar != c.bar) return true;
  return pt / 32 == ct / 32 && p.wsync != c.wsync;
}

__attribute__((no_sanitize_address)) inline void race(bool shared, const Acc &p, const Acc &c,
                                                      uintptr_t a, unsigned size, const char *what) {
  char detail[256];
  unsigned pt = p.thread & kTid;
  if (p.block != c.block) {
    snprintf(detail, sizeof detail, "%s; the other access is by block %u (linear), thread %u", what,
             p.block, pt);
    report(BLOCK_RACE, a, size, detail);
  } else {
    snprintf(detail, sizeof detail, "%s; the other access is by thread %u of this block", what, pt);
    report(shared ? SHARED_RACE : GLOBAL_RACE, a, size, detail);
  }
}

__attribute__((no_sanitize_address)) inline void shadow_access(uintptr_t a, unsigned size, bool write,
                                                               bool atomic, bool shared) {
  State &s = st();
  aotc_emu::Worker *w = st().worker;
  unsigned tid = w->cur_tid;
  Acc c;
  c.block = s.block;
  c.bar = w->bar_gen;
  c.wsync = (uint16_t)w->warps[tid / 32].gen;
  c.thread = (uint16_t)(tid | kValid | (atomic ? kAtomic : 0));
  bool raced = false, uninit = false;
  Cell *cells = cell(a);
  bool one_page = ((a + size - 1) & ~(kPage - 1)) == (a & ~(kPage - 1));
  for (unsigned i = 0; i < size && !raced; i++) {
    Cell &x = one_page ? cells[i] : *cell(a + i);
    bool wvalid = (x.w.thread & kValid) && !(shared && x.w.block != c.block);
    bool rvalid = (x.r.thread & kValid) && !(shared && x.r.block != c.block);
    bool both_atomic = atomic && wvalid && (x.w.thread & kAtomic);
    if (wvalid && !both_atomic && !ordered(x.w, c)) {
      race(shared, x.w, c, a, size, write ? "write after an unordered write" : "read of an unordered write");
      raced = true;
    }
    if (write) {
      if (!raced && rvalid && !(atomic && (x.r.thread & kAtomic))) {
        if (!ordered(x.r, c)) {
          race(shared, x.r, c, a, size, "write after an unordered read");
          raced = true;
        } else if (x.r.block == c.block && x.r.bar == c.bar &&
                   ((x.r.thread & kManyWarps) ||
                    ((x.r.thread & kManyReaders) && x.r.wsync == c.wsync))) {
          race(shared, x.r, c, a, size, "write after unordered reads by several threads");
          raced = true;
        }
      }
      if (!raced && !shared && x.other_reader_block) {
        Acc o;
        o.block = x.other_reader_block - 1;
        o.thread = kValid;
        if (o.block != c.block && !ordered(o, c)) {
          race(false, o, c, a, size, "write after an unordered read");
          raced = true;
        }
      }
      x.w = c;
      x.r = Acc();
      x.other_reader_block = 0;
    } else {
      if (shared && !wvalid) uninit = true;
      uint16_t flags = 0;
      if (rvalid && x.r.block != c.block) {
        if (!shared) x.other_reader_block = x.r.block + 1;
      } else if (rvalid && x.r.bar == c.bar) {
        unsigned rt = x.r.thread & kTid;
        if (rt / 32 != tid / 32) {
          flags = kManyWarps | (x.r.thread & kManyWarps);
        } else {
          flags = x.r.thread & kManyWarps;
          if (x.r.wsync == c.wsync) flags |= (x.r.thread & kManyReaders) | (rt != tid ? kManyReaders : 0);
        }
      }
      x.r = c;
      x.r.thread |= flags;
    }
  }
  if (uninit) report(UNINIT, a, size, "shared memory read before any thread of the block wrote it");
}

#ifdef AOTC_PROFILE
}  // namespace aotc_san
#include "cuda_host_profile.h"
namespace aotc_san {

// A profiling build counts the access (cuda_host_profile.h) instead of checking it.
__attribute__((no_sanitize_address)) inline void profile(uintptr_t a, unsigned size, bool write, bool atomic,
                                                         uintptr_t site) {
  State &s = st();
  if ((a >= s.smem_lo && a < s.smem_hi) || (a >= s.dyn_lo && a < s.dyn_hi)) {
    aotc_prof::record(a, -1, size, write, atomic, true, site);
    return;
  }
  for (const Region &r : s.regions)
    if (a >= r.lo && a < r.hi) return aotc_prof::record(a - r.lo, r.param, size, write, atomic, false, site);
  if (s.regions.empty() && !private_address(a)) aotc_prof::record(a, -1, size, write, atomic, false, site);
}
#endif

__attribute__((no_sanitize_address)) inline void check(uintptr_t a, unsigned size, bool write,
                                                       bool atomic, uintptr_t site = 0) {
  if (!in_kernel()) return;
  State &s = st();
  const aotc_emu::Fiber *f = s.worker->cur;
  if (a - (uintptr_t)f->map < f->map_size) return;  // the thread's own locals
  EmuScope scope;  // our own containers are instrumented too
#ifdef AOTC_PROFILE
  return profile(a, size, write, atomic, site);
#endif
  if ((size == 2 || size == 4 || size == 8 || size == 16) && a % size) {
    char d[96];
    snprintf(d, sizeof d, "%u-byte %s not aligned to %u bytes", size, write ? "store" : "load", size);
    report(MISALIGNED, a, size, d);
  }
  bool shared = (a >= s.smem_lo && a < s.smem_hi) || (a >= s.dyn_lo && a < s.dyn_hi);
  if (!shared) {
    bool inside = false;
    for (const Region &r : s.regions) {
      if (a >= r.lo && a < r.hi) {
        if (a + size <= r.hi) inside = true;
        break;
      }
    }
    if (!inside) {
      if (private_address(a)) return;
      char d[256];
      describe_oob(a, size, d, sizeof d);
      report(OOB, a, size, d);
      return;
    }
  }
  shadow_access(a, size, write, atomic, shared);
}

// -------------------------------------------------------- emulator events
__attribute__((no_sanitize_address)) inline void parse_order(State &s) {
  const char *o = getenv("AOTC_SANITIZE_ORDER");
  s.order = 0;
  if (!o || !*o || !strcmp(o, "forward")) return;
  if (!strcmp(o, "reverse")) {
    s.order = 1;
  } else if (!strncmp(o, "random", 6)) {
    s.order = 2;
    s.seed = o[6] == ':' ? strtoull(o + 7, nullptr, 10) : 0;
  }
}

__attribute__((no_sanitize_address)) inline uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

__attribute__((no_sanitize_address)) inline uint64_t gcd(uint64_t a, uint64_t b) {
  while (b) {
    uint64_t t = a % b;
    a = b;
    b = t;
  }
  return a;
}

// What the exported launch wrapper knows about the launch it is making.
struct Pending {
  const char *kernel = "?";
  void **params = nullptr;
  const uint64_t *extents = nullptr;  // from the build (engines), one per parameter
  unsigned nparams = 0;
  const bool *is_pointer = nullptr;   // from the kernel's signature
};
inline thread_local Pending tl_pending;

__attribute__((no_sanitize_address)) inline void launch_begin(aotc_emu::Launch *L) {
  State &s = st();
  if (s.image.empty()) dl_iterate_phdr(image_cb, &s.image);
  g_kernel_thread = pthread_self();
  const Pending &p = tl_pending;
  s.kernel = p.kernel;
  s.regions.clear();
  const uint64_t *ext = tl_extents ? tl_extents : p.extents;
  unsigned n = tl_extents ? tl_extent_count : ext ? p.nparams : 0;
  for (unsigned i = 0; i < n && i < p.nparams; i++) {
    if (p.is_pointer && !p.is_pointer[i]) continue;  // a value argument
    uintptr_t ptr = 0;
    memcpy(&ptr, p.params[i], sizeof ptr);
    s.regions.push_back({ptr, ptr + ext[i], (int)i});
  }
  tl_extents = nullptr;
  for (auto &kv : s.pages) delete[] kv.second;
  s.pages.clear();
  s.last_page = 1;
  s.releases.clear();
  s.acquired.assign(L->nblocks, {});
  s.fenced.assign(L->nblocks, 0);
  parse_order(s);
  uint64_t nb = L->nblocks;
  s.mult = 1;
  s.add = 0;
  if (s.order == 2 && nb > 1) {
    s.mult = mix(s.seed) % nb | 1;
    while (gcd(s.mult, nb) != 1) s.mult = (s.mult + 2) % nb | 1;
    s.add = mix(s.seed + 1) % nb;
  }
  s.tperm.resize(L->nthreads);
  for (unsigned i = 0; i < L->nthreads; i++) s.tperm[i] = s.order == 1 ? L->nthreads - 1 - i : i;
  if (s.order == 2) {
    uint64_t r = s.seed * 7 + 3;
    for (unsigned i = L->nthreads; i > 1; i--) {
      r = mix(r);
      std::swap(s.tperm[i - 1], s.tperm[r % i]);
    }
  }
  s.sites.assign(L->nthreads, 0);
#ifdef AOTC_PROFILE
  aotc_prof::launch_begin(L);
#endif
}

__attribute__((no_sanitize_address)) inline std::string take();

__attribute__((no_sanitize_address)) inline void launch_end() {
  State &s = st();
#ifdef AOTC_PROFILE
  aotc_prof::launch_end(s.kernel);
#endif
  // A report file gets each launch's unlisted counts; its reader never calls take().
  const char *path = getenv("AOTC_SANITIZE_REPORT");
  if (path && *path) {
    std::string rest = take();
    size_t at = 0;
    while ((at = rest.find("\"unlisted\"", at)) != std::string::npos) {
      size_t begin = rest.rfind('\n', at), end = rest.find('\n', at);
      begin = begin == std::string::npos ? 0 : begin + 1;
      if (FILE *f = fopen(path, "a")) {
        fputs(rest.substr(begin, end + 1 - begin).c_str(), f);
        fclose(f);
      }
      at = end;
    }
  }
  for (auto &kv : s.pages) delete[] kv.second;
  s.pages.clear();
  s.last_page = 1;
  s.regions.clear();
}

// A profiling build that samples blocks skips the others (cuda_host_profile.h).
__attribute__((no_sanitize_address)) inline bool block_skipped(uint64_t b) {
#ifdef AOTC_PROFILE
  return aotc_prof::skipped(b);
#else
  (void)b;
  return false;
#endif
}

// The i-th block or thread to run.
__attribute__((no_sanitize_address)) inline uint64_t block_at(uint64_t i, uint64_t n) {
  State &s = st();
  if (s.order == 1) return n - 1 - i;
  if (s.order == 2) return (unsigned __int128)(i * (unsigned __int128)s.mult + s.add) % n;
  return i;
}
__attribute__((no_sanitize_address)) inline unsigned thread_at(unsigned i) { return st().tperm[i]; }

__attribute__((no_sanitize_address)) inline void block_begin(aotc_emu::Worker *w, uint64_t b) {
  State &s = st();
  s.worker = w;
  s.block = (uint32_t)b;
  s.divergent_reported = false;
  s.first_exited = -1;
#ifdef AOTC_PROFILE
  aotc_prof::block_end();  // the previous block's requests
#endif
  s.dyn_lo = (uintptr_t)w->smem;
  s.dyn_hi = s.dyn_lo + w->launch->dyn_smem;
}

__attribute__((no_sanitize_address)) inline void divergent(unsigned tid, const char *what) {
  State &s = st();
  if (s.divergent_reported) return;
  s.divergent_reported = true;
  char d[200];
  snprintf(d, sizeof d, "%s (thread %u)", what, tid);
  report(DIVERGENT, 0, 0, d);
}

// Thread `cur_tid` arrives at the barrier at `site`.
__attribute__((no_sanitize_address)) inline void barrier_arrive(aotc_emu::Worker *w, uintptr_t site) {
  State &s = st();
  if (s.first_exited >= 0)
    divergent((unsigned)s.first_exited, "a thread of the block exited without reaching this __syncthreads");
  if (w->bar_arrived > 0 && !w->bar_waiters.empty()) {
    uintptr_t first = s.sites[w->bar_waiters.front()];
    if (first != site) divergent(w->bar_waiters.front(), "threads wait at different __syncthreads calls");
  }
  s.sites[w->cur_tid] = site;
}

__attribute__((no_sanitize_address)) inline void thread_exited(aotc_emu::Worker *w, unsigned tid) {
  State &s = st();
  if (s.first_exited < 0) s.first_exited = (int)tid;
  if (w->bar_arrived > 0) divergent(tid, "a thread exited while others wait at __syncthreads");
}

__attribute__((no_sanitize_address)) inline void fence() {
  if (!in_kernel()) return;
  EmuScope scope;
  st().fenced[st().block] = 1;
}

// An atomic on global `a` acquires every earlier fenced block's release there
// and, when this block has fenced, releases this block's writes so far.
__attribute__((no_sanitize_address)) inline void atomic_access(const void *p, unsigned size) {
  if (!in_kernel()) return;
  uintptr_t a = (uintptr_t)p;
  check(a, size, true, true, (uintptr_t)__builtin_return_address(0));
  EmuScope scope;
  State &s = st();
  if ((a >= s.smem_lo && a < s.smem_hi) || (a >= s.dyn_lo && a < s.dyn_hi)) return;
  aotc_emu::Worker *w = st().worker;
  auto &acq = s.acquired[s.block];
  auto &rel = s.releases[a];
  for (const Release &r : rel) {
    auto it = acq.find(r.block);
    if (it == acq.end() || it->second.bar < r.bar) acq[r.block] = r;
  }
  if (s.fenced[s.block]) rel.push_back({s.block, w->bar_gen, (uint16_t)w->cur_tid});
}

__attribute__((no_sanitize_address)) inline std::string take() {
  State &s = st();
  std::lock_guard<std::mutex> g(s.report_mu);
  std::string out;
  out.swap(s.pending);
  for (int k = 0; k < NKINDS; k++) {
    if (s.counts[k] > s.kept[k]) {
      char line[128];
      snprintf(line, sizeof line, "{\"kind\": \"%s\", \"unlisted\": %llu}\n", kKindNames[k],
               (unsigned long long)(s.counts[k] - s.kept[k]));
      out += line;
    }
    s.counts[k] = s.kept[k] = 0;
  }
  return out;
}

}  // namespace aotc_san

// The instrumentation's entry points (outline calls: no ASan runtime, no shadow offset).
#define AOTC_SAN_HOOK(n)                                                                     \
  extern "C" __attribute__((no_sanitize_address, visibility("default"))) void                \
      __asan_load##n##_noabort(uintptr_t a) {                                                \
    aotc_san::check(a, n, false, false, (uintptr_t)__builtin_return_address(0));            \
  }                                                                                          \
  extern "C" __attribute__((no_sanitize_address, visibility("default"))) void                \
      __asan_store##n##_noabort(uintptr_t a) {                                               \
    aotc_san::check(a, n, true, false, (uintptr_t)__builtin_return_address(0));             \
  }
AOTC_SAN_HOOK(1)
AOTC_SAN_HOOK(2)
AOTC_SAN_HOOK(4)
AOTC_SAN_HOOK(8)
AOTC_SAN_HOOK(16)
#undef AOTC_SAN_HOOK
extern "C" __attribute__((no_sanitize_address, visibility("default"))) void __asan_loadN_noabort(
    uintptr_t a, size_t n) {
  aotc_san::check(a, (unsigned)n, false, false, (uintptr_t)__builtin_return_address(0));
}
extern "C" __attribute__((no_sanitize_address, visibility("default"))) void __asan_storeN_noabort(
    uintptr_t a, size_t n) {
  aotc_san::check(a, (unsigned)n, true, false, (uintptr_t)__builtin_return_address(0));
}
extern "C" __attribute__((no_sanitize_address, visibility("default"))) void __asan_handle_no_return() {}
extern "C" __attribute__((no_sanitize_address, visibility("default"))) void __asan_before_dynamic_init(
    const char *) {}
extern "C" __attribute__((no_sanitize_address, visibility("default"))) void __asan_after_dynamic_init() {}
