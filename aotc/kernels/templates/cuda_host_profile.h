// cuda_host_profile.h: memory-access counters for the host emulation (AOTC_PROFILE builds).
//
// A profiling build is a sanitizing build (cuda_host_sanitizer.h sees every
// load and store of kernel code, with the instruction that made it) compiled
// with -DAOTC_PROFILE: instead of checking an access, check() hands it here.
// The GPU issues one memory request per warp per instruction, so accesses are
// grouped by (warp, site, how many times this thread has executed the site):
// the k-th execution of a load by each lane of a warp is one warp-level request.
// Per request:
//   global  the distinct 32-byte sectors its lanes touch (offsets from the
//           start of the argument buffer, as cudaMalloc aligns it), the bytes
//           requested (capped at sectors x 32: a broadcast costs one sector);
//   shared  wavefronts: 32 banks of 4 bytes; a request of 4 bytes or less is
//           one phase of 32 lanes, 8 bytes two half-warp phases, 16 bytes four
//           quarter-warp phases; a phase takes as many wavefronts as the most
//           distinct words it needs from one bank. Conflicts = wavefronts - phases.
// Every launch appends one JSON line of totals (and the unique sectors it
// touched: a DRAM estimate) for aotc_host_profile_take() and, when
// AOTC_PROFILE_REPORT names a file, to that file.
//
// Block sampling (aotc/profile/sampling.py sets the environment): with
// AOTC_PROFILE_SAMPLE="N SEED" a launch of more than N blocks runs only N of
// them -- the first, the last, and one drawn from each of N - 2 equal strata
// of the blocks between (seeded by SEED and the kernel's name) -- and the
// emulator skips the rest; the JSON line says how many ran and which. A
// split-K launch samples N tiles instead, each with all its splits.
// AOTC_PROFILE_SAMPLE_KERNELS="name:full name:2,5 name:z4:2 ..." names the
// kernels that must run every block (index outputs, an unknown grid-wide
// protocol), the split-K ones and their split axis, and per kernel the
// parameters a sampled launch fills with finite random bytes
// before it runs, so that what the skipped blocks leave is finite data for
// every float type (each byte 0x30..0x3f) instead of an older tensor's bits.
#pragma once

#include <algorithm>
#include <cstdlib>
#include <string>
#include <unordered_set>
#include <vector>

namespace aotc_prof {

// Everything here runs on every access of kernel code. The build instruments all code for the
// sanitizer, and a std container's out-of-line members would call the hooks themselves (tens of
// millions of calls a model), so the hot path uses Buf: a growable array of trivially copyable
// values whose members are never instrumented.
#define AOTC_PROF_FN __attribute__((no_sanitize_address)) inline
#define AOTC_PROF_INLINE __attribute__((no_sanitize_address, always_inline)) inline
template <class T>
struct Buf {
  T *p = nullptr;
  size_t n = 0, cap = 0;
  AOTC_PROF_INLINE T &operator[](size_t i) { return p[i]; }
  AOTC_PROF_INLINE size_t size() const { return n; }
  AOTC_PROF_INLINE void clear() { n = 0; }
  __attribute__((no_sanitize_address, noinline)) void reserve(size_t want) {
    if (want <= cap) return;
    cap = want > 2 * cap ? (want > 16 ? want : 16) : 2 * cap;
    p = (T *)realloc((void *)p, cap * sizeof(T));
    if (!p) abort();
  }
  AOTC_PROF_INLINE void push(const T &v) {
    if (n == cap) reserve(n + 1);
    p[n++] = v;
  }
  AOTC_PROF_INLINE void resize(size_t m, const T &fill) {
    reserve(m);
    for (size_t i = n; i < m; i++) p[i] = fill;
    n = m;
  }
};

// Sort a few values, mostly in order already (lanes touch ascending addresses).
AOTC_PROF_FN void small_sort(uint64_t *a, size_t n) {
  for (size_t i = 1; i < n; i++) {
    uint64_t v = a[i];
    size_t j = i;
    for (; j && a[j - 1] > v; j--) a[j] = a[j - 1];
    a[j] = v;
  }
}

// Storage is flat and reused: a record is a few array stores, no allocation. Sites (the accessing
// instruction's address) get a dense id at first sight in the launch; a thread's executions of a site
// are a counter in a row per site, and the group of (site, warp, occurrence) is found through a row per
// (site, warp) indexed by occurrence. The accesses themselves are appended to one array and gathered by
// group (a counting sort) when the block ends.
struct Rec {
  uintptr_t off;
  uint32_t group;
  uint8_t size, lane;
};
struct GroupInfo {
  uint32_t n;  // accesses
  bool shared;
  uint8_t kind;  // global: 0 load, 1 store, 2 atomic
};

// Open-addressed site -> dense id.
struct SiteIds {
  Buf<uintptr_t> keys;  // kEmpty: a free slot
  Buf<uint32_t> ids;
  uint32_t count = 0;
  static constexpr uintptr_t kEmpty = ~(uintptr_t)0;
  AOTC_PROF_FN void clear(size_t slots = 64) {
    keys.clear();
    ids.clear();
    keys.resize(slots, kEmpty);
    ids.resize(slots, 0);
    count = 0;
  }
  AOTC_PROF_INLINE size_t slot(uintptr_t site) {
    size_t mask = keys.size() - 1, i = (site * 0x9e3779b97f4a7c15ull >> 20) & mask;
    while (keys[i] != site && keys[i] != kEmpty) i = (i + 1) & mask;
    return i;
  }
  // The site's id; `fresh` says it is new.
  AOTC_PROF_FN uint32_t get(uintptr_t site, bool &fresh) {
    size_t i = slot(site);
    fresh = keys[i] == kEmpty;
    if (!fresh) return ids[i];
    if (2 * (count + 1) > keys.size()) {  // grow to keep probes short
      Buf<uintptr_t> k = keys;
      Buf<uint32_t> v = ids;
      uint32_t c = count;
      keys = Buf<uintptr_t>();
      ids = Buf<uint32_t>();
      clear(k.size() * 2);
      for (size_t j = 0; j < k.size(); j++)
        if (k[j] != kEmpty) {
          size_t q = slot(k[j]);
          keys[q] = k[j], ids[q] = v[j];
        }
      free(k.p);
      free(v.p);
      count = c;
      i = slot(site);
    }
    keys[i] = site;
    ids[i] = count;
    return count++;
  }
};

// The distinct (param, sector)s a launch touches: a bitmap per parameter over its region's sectors,
// and a set for the rest (outside any region, or past a region's end).
struct Unique {
  Buf<uint64_t> bits;        // the parameters' bitmaps, one after another
  Buf<size_t> start, words;  // per parameter: its bitmap's first word, and its words
  std::unordered_set<uint64_t> rest;  // (param + 1) << 40 | sector
  AOTC_PROF_FN void reset() {
    bits.clear();
    start.clear();
    words.clear();
    rest.clear();
  }
  AOTC_PROF_FN void add_param(int param, size_t sectors) {
    if (start.size() <= (size_t)param) start.resize(param + 1, 0), words.resize(param + 1, 0);
    size_t w = (sectors + 63) / 64;
    if (words[param] >= w) return;
    start[param] = bits.size();
    words[param] = w;
    bits.resize(bits.size() + w, 0);
  }
  AOTC_PROF_INLINE void add(int param, uintptr_t s) {
    if (param >= 0 && (size_t)param < start.size() && s / 64 < words[param]) {
      bits[start[param] + s / 64] |= 1ull << (s % 64);
      return;
    }
    rest.insert((uint64_t)(param + 1) << 40 | s);
  }
  AOTC_PROF_FN uint64_t count() {
    uint64_t n = rest.size();
    for (size_t i = 0; i < bits.size(); i++) n += __builtin_popcountll(bits[i]);
    return n;
  }
};

// Atomics are a class of their own, as Nsight Compute counts them (op_atom/op_red, not op_st): a
// split-K semaphore's 4-byte atomicAdd is no store that wastes 28 of its sector's 32 bytes.
struct Totals {
  uint64_t req[3], sectors[3], bytes[3];  // [load, store, atomic]
  uint64_t sh_req, sh_wavefronts, sh_phases;
  Unique unique[2];                        // [read, written]: an atomic writes
  AOTC_PROF_FN void reset() {
    for (int i = 0; i < 3; i++) req[i] = sectors[i] = bytes[i] = 0;
    for (int i = 0; i < 2; i++) unique[i].reset();
    sh_req = sh_wavefronts = sh_phases = 0;
  }
};

struct KernelPolicy {
  bool full = false;
  char axis = 0;  // split-K: the grid axis of the splits ('z': blockIdx.z % splits, 'y': blockIdx.y)
  unsigned splits = 1;
  std::vector<int> fill;  // parameter indices
};

struct Sampling {
  std::string spec;  // the environment it was parsed from
  unsigned n = 0;    // blocks per launch; 0: every block
  uint64_t seed = 0;
  std::unordered_map<std::string, KernelPolicy> kernels;
  // per launch
  std::vector<uint8_t> want;     // per block; empty: every block runs
  std::vector<uint64_t> chosen;  // the blocks that run, ascending
  uint64_t run = 0;
};

struct PState {
  unsigned threads = 0, warps = 0;  // per block
  SiteIds sites;                    // per launch
  Buf<uint32_t> occ;                // [site * threads + tid]: executions so far in the block
  Buf<Buf<uint32_t>> gid;           // [site * warps + warp][occurrence]: group + 1, 0: none yet
  Buf<GroupInfo> groups;            // the block's requests
  Buf<Rec> recs, sorted;            // their accesses, in arrival order and by group
  Buf<uint32_t> first;              // per group: where its accesses end in `sorted`
  Buf<uint64_t> scratch;            // count_global / count_shared
  Totals t;
  unsigned grid[3] = {}, block[3] = {};
  Sampling sample;
  std::mutex mu;
  std::string pending;
};
inline PState g_prof;

AOTC_PROF_FN void record(uintptr_t off, int param, unsigned size, bool write, bool atomic, bool shared,
                         uintptr_t site) {
  PState &p = g_prof;
  unsigned tid = aotc_san::st().worker->cur_tid;
  bool fresh;
  uint32_t sid = p.sites.get(site, fresh);
  if (fresh) {
    p.occ.resize((size_t)(sid + 1) * p.threads, 0);
    p.gid.resize((size_t)(sid + 1) * p.warps, Buf<uint32_t>());
  }
  uint32_t n = p.occ[(size_t)sid * p.threads + tid]++;
  Buf<uint32_t> &row = p.gid[(size_t)sid * p.warps + tid / 32];
  if (n >= row.size()) row.resize(n + 1, 0);
  if (!row[n]) {
    p.groups.push({0, false, 0});
    row[n] = (uint32_t)p.groups.size();
  }
  GroupInfo &g = p.groups[row[n] - 1];
  g.n++;
  g.shared = shared;
  g.kind = atomic ? 2 : write ? 1 : 0;
  p.recs.push({off, row[n] - 1, (uint8_t)(size > 255 ? 255 : size), (uint8_t)(tid % 32)});
  if (!shared) {
    for (uintptr_t s = off >> 5; s <= (off + size - 1) >> 5; s++) p.t.unique[write].add(param, s);
  }
}

AOTC_PROF_FN void count_global(const Rec *l, const Rec *e, int kind, Totals &t, Buf<uint64_t> &sectors) {
  sectors.clear();
  uint64_t bytes = 0;
  for (; l != e; l++) {
    bytes += l->size;
    for (uintptr_t s = l->off >> 5; s <= (l->off + l->size - 1) >> 5; s++) sectors.push(s);
  }
  small_sort(sectors.p, sectors.size());
  uint64_t n = 0;
  for (size_t i = 0; i < sectors.size(); i++) n += !i || sectors[i] != sectors[i - 1];
  t.req[kind]++;
  t.sectors[kind] += n;
  t.bytes[kind] += bytes < n * 32 ? bytes : n * 32;
}

// Words are keyed (phase, bank, word): the distinct words of a bank in a phase are a run of keys.
AOTC_PROF_FN void count_shared(const Rec *b, const Rec *e, Totals &t, Buf<uint64_t> &keys) {
  unsigned size = 0;
  for (const Rec *l = b; l != e; l++) size = l->size > size ? l->size : size;
  unsigned lanes_per_phase = size <= 4 ? 32 : size <= 8 ? 16 : 8;
  bool used[4] = {};
  keys.clear();
  for (const Rec *l = b; l != e; l++) {
    uint64_t ph = l->lane / lanes_per_phase;
    used[ph] = true;
    for (uintptr_t w = l->off >> 2; w <= (l->off + l->size - 1) >> 2; w++)
      keys.push(ph << 62 | (uint64_t)(w % 32) << 56 | (w & ((1ull << 56) - 1)));
  }
  small_sort(keys.p, keys.size());
  size_t most[4] = {1, 1, 1, 1};
  for (size_t i = 0; i < keys.size();) {
    uint64_t bank = keys[i] >> 56;
    size_t n = 0;
    for (uint64_t prev = ~0ull; i < keys.size() && keys[i] >> 56 == bank; prev = keys[i++])
      n += keys[i] != prev;
    unsigned ph = (unsigned)(bank >> 6);
    most[ph] = n > most[ph] ? n : most[ph];
  }
  t.sh_req++;
  for (unsigned ph = 0; ph < 4; ph++) {
    if (!used[ph]) continue;
    t.sh_wavefronts += most[ph];
    t.sh_phases++;
  }
}

// The block's requests are complete: gather each one's accesses and count them.
AOTC_PROF_FN void block_end() {
  PState &p = g_prof;
  size_t ng = p.groups.size();
  if (ng) {
    p.first.clear();
    p.first.resize(ng, 0);
    uint32_t at = 0;
    for (size_t g = 0; g < ng; g++) p.first[g] = at, at += p.groups[g].n;
    p.sorted.clear();
    p.sorted.resize(p.recs.size(), Rec{});
    for (size_t i = 0; i < p.recs.size(); i++) {  // first[g] ends at group g + 1's start
      const Rec &r = p.recs[i];
      p.sorted[p.first[r.group]++] = r;
    }
    const Rec *b = p.sorted.p;
    for (size_t g = 0; g < ng; g++) {
      const Rec *e = p.sorted.p + p.first[g];
      if (p.groups[g].shared)
        count_shared(b, e, p.t, p.scratch);
      else
        count_global(b, e, p.groups[g].kind, p.t, p.scratch);
      b = e;
    }
  }
  p.groups.clear();
  p.recs.clear();
  for (size_t i = 0; i < p.occ.size(); i++) p.occ[i] = 0;
  for (size_t i = 0; i < p.gid.size(); i++) p.gid[i].clear();
}

__attribute__((no_sanitize_address)) inline uint64_t splitmix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// Re-read the sampling environment when it changed since the last launch. A kernel's entry:
// "name:full", "name:FILL" or "name:zS:FILL" / "name:yS:FILL" (FILL: parameter indices, comma
// separated, maybe none): a split-K kernel whose tiles' S splits are blockIdx.z % S (z) or blockIdx.y (y).
__attribute__((no_sanitize_address)) inline void parse_sampling(Sampling &sm) {
  const char *a = getenv("AOTC_PROFILE_SAMPLE"), *k = getenv("AOTC_PROFILE_SAMPLE_KERNELS");
  std::string spec = std::string(a ? a : "") + "|" + (k ? k : "");
  if (spec == sm.spec) return;
  sm.spec = spec;
  sm.n = 0;
  sm.seed = 0;
  sm.kernels.clear();
  if (a && *a) {
    char *end = nullptr;
    sm.n = (unsigned)strtoul(a, &end, 10);
    sm.seed = strtoull(end, nullptr, 10);
  }
  for (const char *c = k ? k : ""; *c;) {
    while (*c == ' ') c++;
    const char *colon = strchr(c, ':');
    if (!*c || !colon) break;
    KernelPolicy &pol = sm.kernels[std::string(c, colon)];
    c = colon + 1;
    if (!strncmp(c, "full", 4)) {
      pol.full = true;
      c += 4;
    } else if ((*c == 'y' || *c == 'z') && c[1] >= '1' && c[1] <= '9') {
      pol.axis = *c;
      char *end = nullptr;
      pol.splits = (unsigned)strtoul(c + 1, &end, 10);
      c = end + (*end == ':');
    }
    while (*c >= '0' && *c <= '9') {
      char *end = nullptr;
      pol.fill.push_back((int)strtol(c, &end, 10));
      c = end + (*end == ',');
    }
  }
}

// The blocks of sampling unit `u`: one block, or a split-K tile's `splits` blocks.
__attribute__((no_sanitize_address)) inline void unit_blocks(const KernelPolicy *pol, const unsigned *g, uint64_t u,
                                                             std::vector<uint8_t> &want) {
  if (!pol || !pol->axis) {
    want[u] = 1;
    return;
  }
  uint64_t gx = g[0], gy = g[1], S = pol->splits;
  for (uint64_t q = 0; q < S; q++) {
    if (pol->axis == 'z')
      want[u % (gx * gy) + gx * gy * (u / (gx * gy) * S + q)] = 1;
    else
      want[u % gx + gx * (q + S * (u / gx))] = 1;
  }
}

// Choose the launch's blocks: every one, or the first, the last and one per stratum between (of the
// blocks, or of a split-K launch's tiles, each with all its splits).
__attribute__((no_sanitize_address)) inline void choose_blocks(Sampling &sm, const char *kernel, const unsigned *g,
                                                               uint64_t nb) {
  sm.want.clear();
  sm.chosen.clear();
  sm.run = nb;
  auto it = sm.kernels.find(kernel);
  const KernelPolicy *pol = it == sm.kernels.end() ? nullptr : &it->second;
  if (pol && (pol->full || (pol->axis && !(pol->axis == 'z' ? g[2] % pol->splits == 0 : g[1] == pol->splits))))
    return;  // every block: the kernel must, or its grid lacks the split layout its entry says
  uint64_t units = pol && pol->axis ? nb / pol->splits : nb;
  if (!sm.n || sm.n >= units) return;
  uint64_t h = 1469598103934665603ull;  // FNV-1a of the name, mixed with the seed
  for (const char *c = kernel; *c; c++) h = (h ^ (unsigned char)*c) * 1099511628211ull;
  uint64_t r = splitmix(h ^ splitmix(sm.seed));
  sm.want.assign(nb, 0);
  unit_blocks(pol, g, 0, sm.want);
  if (sm.n > 1) unit_blocks(pol, g, units - 1, sm.want);
  uint64_t strata = sm.n > 2 ? sm.n - 2 : 0, inner = units - 2;
  for (uint64_t i = 0; i < strata; i++) {
    uint64_t lo = 1 + i * inner / strata, hi = 1 + (i + 1) * inner / strata;
    r = splitmix(r);
    unit_blocks(pol, g, lo + r % (hi - lo), sm.want);
  }
  for (uint64_t b = 0; b < nb; b++)
    if (sm.want[b]) sm.chosen.push_back(b);
  sm.run = sm.chosen.size();
}

// Finite random bytes over [lo, hi): every byte in 0x30..0x3f is a finite value of each float type.
__attribute__((no_sanitize_address)) inline void fill_finite(uintptr_t lo, uintptr_t hi, uint64_t seed) {
  uint64_t r = splitmix(seed ^ lo);
  uintptr_t a = lo;
  for (; a < hi && a % 8; a++) *(volatile uint8_t *)a = 0x30 | (uint8_t)((r >>= 4) & 15);
  for (; a + 8 <= hi; a += 8) {
    r = splitmix(r);
    *(uint64_t *)a = (r & 0x0f0f0f0f0f0f0f0full) | 0x3030303030303030ull;
  }
  r = splitmix(r);
  for (; a < hi; a++, r >>= 4) *(volatile uint8_t *)a = 0x30 | (uint8_t)(r & 15);
}

// Whether the emulator skips block `b` of the current launch.
__attribute__((no_sanitize_address)) inline bool skipped(uint64_t b) {
  const Sampling &sm = g_prof.sample;
  return !sm.want.empty() && !sm.want[b];
}

__attribute__((no_sanitize_address)) inline void launch_begin(const aotc_emu::Launch *L) {
  PState &p = g_prof;
  const aotc_san::State &s = aotc_san::st();
  p.threads = L->nthreads;
  p.warps = (L->nthreads + 31) / 32;
  p.sites.clear();
  p.occ.clear();
  for (size_t i = 0; i < p.gid.size(); i++) free(p.gid[i].p);
  p.gid.clear();
  p.groups.clear();
  p.recs.clear();
  p.t.reset();
  for (const aotc_san::Region &reg : s.regions)
    if (reg.param >= 0)
      for (auto &u : p.t.unique) u.add_param(reg.param, (reg.hi - reg.lo + 31) / 32);
  unsigned g[3] = {L->grid.x, L->grid.y, L->grid.z}, b[3] = {L->block.x, L->block.y, L->block.z};
  for (int i = 0; i < 3; i++) p.grid[i] = g[i], p.block[i] = b[i];
  Sampling &sm = p.sample;
  parse_sampling(sm);
  choose_blocks(sm, s.kernel, p.grid, L->nblocks);
  auto it = sm.kernels.find(s.kernel);
  if (sm.want.empty() || it == sm.kernels.end()) return;
  for (const aotc_san::Region &reg : s.regions)
    if (std::find(it->second.fill.begin(), it->second.fill.end(), reg.param) != it->second.fill.end())
      fill_finite(reg.lo, reg.hi, sm.seed);
}

__attribute__((no_sanitize_address)) inline void launch_end(const char *kernel) {
  PState &p = g_prof;
  block_end();
  Totals &t = p.t;
  std::string blocks = ", \"blocks_run\": " + std::to_string(p.sample.run);  // at the line's end
  if (!p.sample.want.empty()) {
    blocks += ", \"sampled\": [";
    for (size_t i = 0; i < p.sample.chosen.size(); i++)
      blocks += (i ? ", " : "") + std::to_string(p.sample.chosen[i]);
    blocks += "]";
  }
  char line[1024];
  snprintf(line, sizeof line,
           "{\"kernel\": \"%s\", \"grid\": [%u, %u, %u], \"block\": [%u, %u, %u], "
           "\"load_requests\": %llu, \"load_sectors\": %llu, \"load_bytes\": %llu, "
           "\"store_requests\": %llu, \"store_sectors\": %llu, \"store_bytes\": %llu, "
           "\"atomic_requests\": %llu, \"atomic_sectors\": %llu, "
           "\"unique_load_sectors\": %llu, \"unique_store_sectors\": %llu, "
           "\"shared_requests\": %llu, \"shared_wavefronts\": %llu, \"shared_phases\": %llu",
           kernel, p.grid[0], p.grid[1], p.grid[2], p.block[0], p.block[1], p.block[2],
           (unsigned long long)t.req[0], (unsigned long long)t.sectors[0], (unsigned long long)t.bytes[0],
           (unsigned long long)t.req[1], (unsigned long long)t.sectors[1], (unsigned long long)t.bytes[1],
           (unsigned long long)t.req[2], (unsigned long long)t.sectors[2],
           (unsigned long long)p.t.unique[0].count(), (unsigned long long)p.t.unique[1].count(),
           (unsigned long long)t.sh_req, (unsigned long long)t.sh_wavefronts, (unsigned long long)t.sh_phases);
  p.t.reset();
  p.sample.want.clear();
  std::string out = line + blocks + "}\n";
  std::lock_guard<std::mutex> g(p.mu);
  p.pending += out;
  const char *path = getenv("AOTC_PROFILE_REPORT");
  if (path && *path) {
    if (FILE *f = fopen(path, "a")) {
      fputs(out.c_str(), f);
      fclose(f);
    }
  }
}

__attribute__((no_sanitize_address)) inline std::string take() {
  std::lock_guard<std::mutex> g(g_prof.mu);
  std::string out;
  out.swap(g_prof.pending);
  return out;
}

}  // namespace aotc_prof
