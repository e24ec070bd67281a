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
#pragma once

#include <algorithm>
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

struct PState {
  std::unordered_map<uint64_t, uint32_t> occ;  // (tid << 48 | site) -> executions so far
  std::unordered_map<Key, Group, KeyHash> groups;
  Totals t;
  unsigned grid[3] = {}, block[3] = {};
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

__attribute__((no_sanitize_address)) inline void launch_begin(const aotc_emu::Launch *L) {
  PState &p = g_prof;
  p.groups.clear();
  p.occ.clear();
  p.t = Totals();
  unsigned g[3] = {L->grid.x, L->grid.y, L->grid.z}, b[3] = {L->block.x, L->block.y, L->block.z};
  for (int i = 0; i < 3; i++) p.grid[i] = g[i], p.block[i] = b[i];
}

__attribute__((no_sanitize_address)) inline void launch_end(const char *kernel) {
  PState &p = g_prof;
  block_end();
  const Totals &t = p.t;
  char line[1024];
  snprintf(line, sizeof line,
           "{\"kernel\": \"%s\", \"grid\": [%u, %u, %u], \"block\": [%u, %u, %u], "
           "\"load_requests\": %llu, \"load_sectors\": %llu, \"load_bytes\": %llu, "
           "\"store_requests\": %llu, \"store_sectors\": %llu, \"store_bytes\": %llu, "
           "\"unique_load_sectors\": %llu, \"unique_store_sectors\": %llu, "
           "\"shared_requests\": %llu, \"shared_wavefronts\": %llu, \"shared_phases\": %llu}\n",
           kernel, p.grid[0], p.grid[1], p.grid[2], p.block[0], p.block[1], p.block[2],
           (unsigned long long)t.req[0], (unsigned long long)t.sectors[0], (unsigned long long)t.bytes[0],
           (unsigned long long)t.req[1], (unsigned long long)t.sectors[1], (unsigned long long)t.bytes[1],
           (unsigned long long)t.unique[0].size(), (unsigned long long)t.unique[1].size(),
           (unsigned long long)t.sh_req, (unsigned long long)t.sh_wavefronts, (unsigned long long)t.sh_phases);
  p.t = Totals();
  std::lock_guard<std::mutex> g(p.mu);
  p.pending += line;
  const char *path = getenv("AOTC_PROFILE_REPORT");
  if (path && *path) {
    if (FILE *f = fopen(path, "a")) {
      fputs(line, f);
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
