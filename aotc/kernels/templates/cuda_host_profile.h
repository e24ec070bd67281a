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
#include <string>
#include <unordered_set>
#include <vector>

namespace aotc_prof {

struct Lane {
  uintptr_t off;
  uint8_t size, lane;
};
struct Group {
  std::vector<Lane> lanes;
  bool shared = false, write = false;
};
struct Key {
  uintptr_t site;
  uint32_t warp, occ;
  bool operator==(const Key &o) const { return site == o.site && warp == o.warp && occ == o.occ; }
};
struct KeyHash {
  size_t operator()(const Key &k) const {
    return std::hash<uint64_t>()(k.site * 0x9e3779b97f4a7c15ull ^ ((uint64_t)k.warp << 32 | k.occ));
  }
};

struct Totals {
  uint64_t req[2] = {}, sectors[2] = {}, bytes[2] = {};  // [load, store]
  uint64_t sh_req = 0, sh_wavefronts = 0, sh_phases = 0;
  std::unordered_set<uint64_t> unique[2];               // (param << 40 | sector)
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
  std::unordered_map<uint64_t, uint32_t> occ;  // (tid << 48 | site) -> executions so far
  std::unordered_map<Key, Group, KeyHash> groups;
  Totals t;
  unsigned grid[3] = {}, block[3] = {};
  Sampling sample;
  std::mutex mu;
  std::string pending;
};
inline PState g_prof;

__attribute__((no_sanitize_address)) inline void record(uintptr_t off, int param, unsigned size, bool write,
                                                        bool shared, uintptr_t site) {
  PState &p = g_prof;
  unsigned tid = aotc_san::st().worker->cur_tid;
  uint32_t &n = p.occ[(uint64_t)tid << 48 | (site & 0xffffffffffffull)];
  Group &g = p.groups[Key{site, tid / 32, n++}];
  g.shared = shared;
  g.write = write;
  g.lanes.push_back({off, (uint8_t)(size > 255 ? 255 : size), (uint8_t)(tid % 32)});
  if (!shared) {
    for (uintptr_t s = off >> 5; s <= (off + size - 1) >> 5; s++)
      p.t.unique[write].insert((uint64_t)(param + 1) << 40 | s);
  }
}

__attribute__((no_sanitize_address)) inline void count_global(const Group &g, Totals &t) {
  std::vector<uintptr_t> sectors;
  uint64_t bytes = 0;
  for (const Lane &l : g.lanes) {
    bytes += l.size;
    for (uintptr_t s = l.off >> 5; s <= (l.off + l.size - 1) >> 5; s++) sectors.push_back(s);
  }
  std::sort(sectors.begin(), sectors.end());
  uint64_t n = std::unique(sectors.begin(), sectors.end()) - sectors.begin();
  t.req[g.write]++;
  t.sectors[g.write] += n;
  t.bytes[g.write] += bytes < n * 32 ? bytes : n * 32;
}

__attribute__((no_sanitize_address)) inline void count_shared(const Group &g, Totals &t) {
  unsigned size = 0;
  for (const Lane &l : g.lanes) size = l.size > size ? l.size : size;
  unsigned lanes_per_phase = size <= 4 ? 32 : size <= 8 ? 16 : 8;
  std::vector<uintptr_t> words[4][32];  // [phase][bank]: distinct words
  bool used[4] = {};
  for (const Lane &l : g.lanes) {
    unsigned ph = l.lane / lanes_per_phase;
    used[ph] = true;
    for (uintptr_t w = l.off >> 2; w <= (l.off + l.size - 1) >> 2; w++) words[ph][w % 32].push_back(w);
  }
  t.sh_req++;
  for (unsigned ph = 0; ph < 4; ph++) {
    if (!used[ph]) continue;
    size_t most = 1;
    for (auto &b : words[ph]) {
      std::sort(b.begin(), b.end());
      size_t n = std::unique(b.begin(), b.end()) - b.begin();
      most = n > most ? n : most;
    }
    t.sh_wavefronts += most;
    t.sh_phases++;
  }
}

// The block's requests are complete: count them.
__attribute__((no_sanitize_address)) inline void block_end() {
  PState &p = g_prof;
  for (auto &kv : p.groups) (kv.second.shared ? count_shared : count_global)(kv.second, p.t);
  p.groups.clear();
  p.occ.clear();
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
  p.groups.clear();
  p.occ.clear();
  p.t = Totals();
  unsigned g[3] = {L->grid.x, L->grid.y, L->grid.z}, b[3] = {L->block.x, L->block.y, L->block.z};
  for (int i = 0; i < 3; i++) p.grid[i] = g[i], p.block[i] = b[i];
  Sampling &sm = p.sample;
  const aotc_san::State &s = aotc_san::st();
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
  const Totals &t = p.t;
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
           "\"unique_load_sectors\": %llu, \"unique_store_sectors\": %llu, "
           "\"shared_requests\": %llu, \"shared_wavefronts\": %llu, \"shared_phases\": %llu",
           kernel, p.grid[0], p.grid[1], p.grid[2], p.block[0], p.block[1], p.block[2],
           (unsigned long long)t.req[0], (unsigned long long)t.sectors[0], (unsigned long long)t.bytes[0],
           (unsigned long long)t.req[1], (unsigned long long)t.sectors[1], (unsigned long long)t.bytes[1],
           (unsigned long long)t.unique[0].size(), (unsigned long long)t.unique[1].size(),
           (unsigned long long)t.sh_req, (unsigned long long)t.sh_wavefronts, (unsigned long long)t.sh_phases);
  p.t = Totals();
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
