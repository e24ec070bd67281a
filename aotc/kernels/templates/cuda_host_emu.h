// cuda_host_emu.h: run aotc's generated CUDA C, unchanged, on the host CPU.
//
// Force-included (`g++ -include cuda_host_emu.h`) before the kernel source, so
// the very text that NVRTC compiles for the GPU is also compiled and run here
// (docs/design.md, principle 3). It models the CUDA subset aotc emits: threads and
// blocks, static and dynamic shared memory, __syncthreads, full-warp
// collectives (shuffles, ballot, any/all, __syncwarp), atomics, the math
// intrinsics, half/bfloat16 (via the CUDA headers' host paths).
//
// How it runs a launch:
//  * Blocks are handed out through an atomic counter to AOTC_EMU_WORKERS OS
//    threads (default 2; the launching thread is one of them). A worker runs
//    one block at a time, so `__shared__` can simply be `static thread_local`.
//  * Within a block, CUDA threads run on fibers (own stacks, cooperative). A
//    fiber runs CUDA threads back to back; a thread keeps the fiber only when
//    it blocks in a barrier or warp collective, and a fresh fiber then carries
//    on with the threads not started yet. Barrier-free kernels thus cost one
//    fiber switch per block.
//  * Fibers are entered once with makecontext/setcontext and afterwards
//    switched with _setjmp/_longjmp (no signal-mask syscalls). Stacks are
//    mmap'd with a PROT_NONE guard page below (AOTC_EMU_STACK bytes, default
//    64 KiB): an overflow faults instead of corrupting a neighbour.
//  * Scheduling is cooperative, so when no thread is runnable, none is
//    unstarted and some are still waiting, the block is deadlocked for sure:
//    the launch reports it and returns AOTC_EMU_DEADLOCK instead of hanging.
//
// Re-entrancy: all mutable state lives in per-launch objects or in
// thread_local variables of the worker threads, so several OS threads may
// launch kernels concurrently.
//
// Not modelled (the code generator must not rely on them): independent thread
// scheduling inside a warp, data races between threads (cooperative scheduling
// serialises them), concurrent collectives with different masks in one warp,
// __syncthreads in divergent code (exited threads simply stop counting),
// tensor-core/async-copy instructions without an aotc host fallback.
// A sanitizing build (-DAOTC_SANITIZE, host_compile.py) reports those races and
// divergent barriers, and bounds, alignment, uninitialized shared reads too:
// cuda_host_sanitizer.h.
#pragma once

// Pitfall: glibc's fortified longjmp refuses to jump between stacks
// ("longjmp causes uninitialized stack frame"). This header must come first.
#ifdef _FORTIFY_SOURCE
#undef _FORTIFY_SOURCE
#endif

#define AOTC_HOST_EMU 1

// Emulator code that kernel code inlines: its reads of the emulator's own
// state are not the kernel's accesses (sanitized builds, cuda_host_sanitizer.h).
#define AOTC_EMU_NOSAN __attribute__((no_sanitize_address))

// Qualifiers: defined before any CUDA header, which keeps existing definitions
// when __CUDACC__ is not set.
#define __global__
#define __device__
#define __host__
#ifdef AOTC_SANITIZE
// One worker runs a sanitized launch, so shared arrays may be plain statics:
// the sanitizer takes the module's writable data as shared memory.
#define __shared__ static
#else
#define __shared__ static thread_local
#endif
#define __constant__ static
#define __launch_bounds__(...)
#define __noinline__ __attribute__((noinline))
#define __grid_constant__

#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include <pthread.h>
#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

#include <atomic>
#include <new>
#include <cmath>
#include <tuple>
#include <type_traits>
#include <vector>

#include <vector_types.h>
#include <vector_functions.h>
#include <cuda_fp16.h>
#include <cuda_bf16.h>

// ---------------------------------------------------------------- built-ins
// Plain thread_local globals, not macros (pitfall 1: `gridDim` is a struct
// member name inside the CUDA headers). The scheduler rewrites them before it
// resumes a CUDA thread.
inline thread_local uint3 threadIdx;
inline thread_local uint3 blockIdx;
inline thread_local dim3 blockDim;
inline thread_local dim3 gridDim;
constexpr int warpSize = 32;

namespace aotc_emu {

enum Status {
  OK = 0,
  BAD_LAUNCH = 1,    // block or grid shape out of CUDA's limits
  NO_MEMORY = 2,     // fiber stacks, shared memory or worker threads
  DEADLOCK = 3,      // threads wait on each other forever
  INTERNAL = 4,      // an exception escaped
};

inline const char *status_string(int s) {
  switch (s) {
    case OK: return "ok";
    case BAD_LAUNCH: return "invalid launch configuration";
    case NO_MEMORY: return "out of memory (fiber stacks, shared memory or threads)";
    case DEADLOCK: return "deadlock: threads of a block wait on each other forever";
    case INTERNAL: return "internal error in the host emulation";
  }
  return "unknown status";
}

// --------------------------------------------------------------- the state
struct Fiber {
  jmp_buf ctx;        // where to resume it (valid once started)
  ucontext_t uc;      // used once, for the first entry
  char *map = nullptr;
  size_t map_size = 0;
  bool started = false;
};

// One warp's collective exchange. Each lane deposits 8 bytes in the slot of
// the current generation's parity; the last lane to arrive releases the rest.
// Double buffering matters: a lane may deposit, get released and even exit
// before slower lanes read its value (pitfall 2), and the next collective can
// only complete after every lane has read this one.
struct Warp {
  unsigned present = 0;    // lanes that exist and have not exited
  unsigned arrived = 0;    // lanes that deposited in the current generation
  unsigned need = 0;       // union of the masks given by the arrivals
  unsigned waiting = 0;    // lanes parked until this generation completes
  unsigned gen = 0;
  unsigned done[2] = {0, 0};  // lanes that deposited, per finished parity
  uint64_t slot[2][32];
};

struct Launch {
  void (*body)(void *);  // calls the kernel with the launch's arguments
  void *args;
  dim3 grid, block;
  unsigned dyn_smem;
  size_t stack_size;
  unsigned nthreads;
  uint64_t nblocks;
  std::atomic<uint64_t> next_block{0};
  std::atomic<int> status{OK};
};

struct Worker {
  Launch *launch;
  jmp_buf sched;                  // the scheduler's context
  Fiber *cur = nullptr;           // fiber now running
  unsigned cur_tid = 0;           // CUDA thread now running (linear id)
  std::vector<Fiber *> fibers;    // all fibers this worker made
  std::vector<Fiber *> idle;      // fibers free to start new threads
  std::vector<Fiber *> owner;     // fiber a WAITING thread is parked on
  std::vector<unsigned> runq, batch;
  std::vector<Warp> warps;
  unsigned next_unstarted = 0, exited = 0;
  unsigned bar_arrived = 0, bar_gen = 0;
  int bar_acc = 0, bar_result[2] = {0, 0};
  std::vector<unsigned> bar_waiters;
  unsigned char *smem = nullptr;  // dynamic shared memory of this worker
};

inline thread_local Worker *tl_worker = nullptr;

AOTC_EMU_NOSAN inline unsigned char *dyn_smem() { return tl_worker->smem; }
}  // namespace aotc_emu

#ifdef AOTC_SANITIZE
#include "cuda_host_sanitizer.h"
#define AOTC_SAN(...) __VA_ARGS__
#define AOTC_SAN_SCOPE aotc_san::EmuScope aotc_san_scope_
#else
#define AOTC_SAN(...)
#define AOTC_SAN_SCOPE
#endif

namespace aotc_emu {

// ------------------------------------------------------------ fiber switch
// Both switches keep their setjmp in a frame that stays alive while the other
// side runs, and modify no locals after setjmp, so no `volatile` is needed.
[[noreturn]] inline void fiber_entry();

__attribute__((noinline)) inline void switch_to(Worker *w, Fiber *f) {
  w->cur = f;
  if (_setjmp(w->sched) == 0) {
    if (!f->started) {
      f->started = true;
      setcontext(&f->uc);
    }
    _longjmp(f->ctx, 1);
  }
}

__attribute__((noinline)) inline void yield_to_scheduler(Worker *w) {
  if (_setjmp(w->cur->ctx) == 0) _longjmp(w->sched, 1);
}

inline Fiber *new_fiber(Worker *w) {
  size_t page = (size_t)sysconf(_SC_PAGESIZE);
  size_t size = w->launch->stack_size + page;
  void *map = mmap(nullptr, size, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (map == MAP_FAILED) return nullptr;
  // Stacks grow down: the guard page sits at the low end.
  if (mprotect(map, page, PROT_NONE) != 0) {
    munmap(map, size);
    return nullptr;
  }
  Fiber *f = new (std::nothrow) Fiber;
  if (!f) {
    munmap(map, size);
    return nullptr;
  }
  f->map = (char *)map;
  f->map_size = size;
  getcontext(&f->uc);
  f->uc.uc_stack.ss_sp = f->map + page;
  f->uc.uc_stack.ss_size = w->launch->stack_size;
  f->uc.uc_link = nullptr;
  makecontext(&f->uc, (void (*)())fiber_entry, 0);
  w->fibers.push_back(f);
  return f;
}

inline void set_thread_index(Worker *w, unsigned tid) {
  const dim3 &b = w->launch->block;
  w->cur_tid = tid;
  threadIdx.x = tid % b.x;
  threadIdx.y = (tid / b.x) % b.y;
  threadIdx.z = tid / (b.x * b.y);
}

// ------------------------------------------------- barriers and collectives
inline void release_barrier(Worker *w) {
  w->bar_result[w->bar_gen & 1] = w->bar_acc;
  w->bar_acc = 0;
  w->bar_arrived = 0;
  w->bar_gen++;
  for (unsigned t : w->bar_waiters) w->runq.push_back(t);
  w->bar_waiters.clear();
}

inline bool warp_complete(const Warp &wp) {
  unsigned need = wp.need & wp.present;
  return wp.arrived != 0 && (wp.arrived & need) == need;
}

inline void release_warp(Worker *w, unsigned warp) {
  Warp &wp = w->warps[warp];
  wp.done[wp.gen & 1] = wp.arrived;
  for (unsigned m = wp.waiting; m; m &= m - 1)
    w->runq.push_back(warp * 32 + __builtin_ctz(m));
  wp.arrived = wp.need = wp.waiting = 0;
  wp.gen++;
}

// Park the running CUDA thread until someone releases it.
inline void park(Worker *w) {
  unsigned tid = w->cur_tid;
  w->owner[tid] = w->cur;
  yield_to_scheduler(w);
  // Resumed by the scheduler, which has restored threadIdx and cur_tid.
}

// Arrive at __syncthreads with a predicate; returns the block-wide count.
AOTC_EMU_NOSAN inline int barrier(int pred, uintptr_t site = 0) {
  AOTC_SAN_SCOPE;
  Worker *w = tl_worker;
  AOTC_SAN(aotc_san::barrier_arrive(w, site));
  (void)site;
  unsigned parity = w->bar_gen & 1;
  w->bar_acc += pred ? 1 : 0;
  if (++w->bar_arrived == w->launch->nthreads - w->exited) {
    release_barrier(w);
  } else {
    w->bar_waiters.push_back(w->cur_tid);
    park(w);
  }
  return w->bar_result[parity];
}

// Deposit `value` for this lane, wait for the warp, return the parity whose
// slots hold everyone's values.
AOTC_EMU_NOSAN inline unsigned warp_exchange(unsigned mask, uint64_t value) {
  AOTC_SAN_SCOPE;
  Worker *w = tl_worker;
  unsigned tid = w->cur_tid, warp = tid / 32, lane = tid % 32;
  Warp &wp = w->warps[warp];
  unsigned parity = wp.gen & 1;
  wp.slot[parity][lane] = value;
  wp.arrived |= 1u << lane;
  wp.need |= mask;
  if (warp_complete(wp)) {
    release_warp(w, warp);
  } else {
    wp.waiting |= 1u << lane;
    park(w);
  }
  return parity;
}

AOTC_EMU_NOSAN inline unsigned lane_id() { return tl_worker->cur_tid % 32; }

template <class T>
inline uint64_t to_bits(T v) {
  static_assert(sizeof(T) <= 8 && std::is_trivially_copyable_v<T>,
                "warp shuffles move at most 8 bytes of a trivially copyable type");
  uint64_t bits = 0;
  memcpy(&bits, &v, sizeof(T));
  return bits;
}

// Value of lane `src` for this lane (own value when `src` did not take part).
template <class T>
AOTC_EMU_NOSAN inline T shuffle(unsigned mask, T v, int src, bool valid) {
  AOTC_SAN_SCOPE;
  unsigned parity = warp_exchange(mask, to_bits(v));
  const Warp &wp = tl_worker->warps[tl_worker->cur_tid / 32];
  if (!valid || src < 0 || src > 31 || !(wp.done[parity] >> src & 1)) return v;
  T out;
  memcpy(&out, &wp.slot[parity][src], sizeof(T));
  return out;
}

// Ballot of `pred` over the lanes of `mask`; `*voters` gets the lanes that
// took part (exited lanes do not vote).
AOTC_EMU_NOSAN inline unsigned ballot(unsigned mask, int pred, unsigned *voters = nullptr) {
  AOTC_SAN_SCOPE;
  unsigned parity = warp_exchange(mask, pred ? 1 : 0);
  const Warp &wp = tl_worker->warps[tl_worker->cur_tid / 32];
  unsigned out = 0, took_part = wp.done[parity] & mask;
  for (unsigned m = took_part; m; m &= m - 1) {
    unsigned l = __builtin_ctz(m);
    if (wp.slot[parity][l]) out |= 1u << l;
  }
  if (voters) *voters = took_part;
  return out;
}

// ----------------------------------------------------------- the scheduler
inline void thread_exit(Worker *w, unsigned tid) {
  AOTC_SAN(aotc_san::thread_exited(w, tid));
  w->exited++;
  Warp &wp = w->warps[tid / 32];
  wp.present &= ~(1u << (tid % 32));
  if (warp_complete(wp)) release_warp(w, tid / 32);
  if (w->bar_arrived && w->bar_arrived == w->launch->nthreads - w->exited)
    release_barrier(w);
}

[[noreturn]] AOTC_EMU_NOSAN inline void fiber_entry() {
  Worker *w = tl_worker;
  for (;;) {
    while (w->next_unstarted < w->launch->nthreads) {
      unsigned tid = w->next_unstarted++;
      AOTC_SAN(tid = aotc_san::thread_at(tid));
      set_thread_index(w, tid);
      AOTC_SAN(aotc_san::set_in_kernel(true));
      w->launch->body(w->launch->args);
      AOTC_SAN(aotc_san::set_in_kernel(false));
      thread_exit(w, w->cur_tid);
    }
    w->idle.push_back(w->cur);
    yield_to_scheduler(w);
  }
}

inline void report_deadlock(Worker *w) {
  unsigned at_barrier = (unsigned)w->bar_waiters.size(), in_warp = 0;
  for (const Warp &wp : w->warps) in_warp += __builtin_popcount(wp.waiting);
  fprintf(stderr,
          "aotc host emulation: deadlock in block (%u,%u,%u): %u threads wait at "
          "__syncthreads, %u in warp collectives, %u exited of %u\n",
          blockIdx.x, blockIdx.y, blockIdx.z, at_barrier, in_warp, w->exited,
          w->launch->nthreads);
}

inline int run_block(Worker *w, uint64_t b) {
  Launch *L = w->launch;
  unsigned n = L->nthreads;
  blockIdx.x = (unsigned)(b % L->grid.x);
  blockIdx.y = (unsigned)((b / L->grid.x) % L->grid.y);
  blockIdx.z = (unsigned)(b / ((uint64_t)L->grid.x * L->grid.y));
  AOTC_SAN(aotc_san::block_begin(w, b));
  w->next_unstarted = w->exited = 0;
  w->bar_arrived = 0;
  w->bar_acc = 0;
  w->bar_waiters.clear();
  w->runq.clear();
  for (unsigned i = 0; i < w->warps.size(); i++) {
    unsigned lanes = n - i * 32 < 32 ? n - i * 32 : 32;
    w->warps[i].present = lanes == 32 ? ~0u : (1u << lanes) - 1;
    w->warps[i].arrived = w->warps[i].need = w->warps[i].waiting = 0;
  }
  for (;;) {
    if (!w->runq.empty()) {
      // Resume released threads in the order they were released.
      w->batch.swap(w->runq);
      w->runq.clear();
      for (unsigned tid : w->batch) {
        set_thread_index(w, tid);
        switch_to(w, w->owner[tid]);
      }
      w->batch.clear();
    } else if (w->next_unstarted < n) {
      Fiber *f;
      if (!w->idle.empty()) {
        f = w->idle.back();
        w->idle.pop_back();
      } else if (!(f = new_fiber(w))) {
        return NO_MEMORY;
      }
      switch_to(w, f);
    } else if (w->exited == n) {
      return OK;
    } else {
      report_deadlock(w);
      return DEADLOCK;  // the parked fibers are abandoned with the launch
    }
  }
}

inline size_t env_size(const char *name, size_t dflt) {
  const char *s = getenv(name);
  if (!s || !*s) return dflt;
  char *end = nullptr;
  unsigned long long v = strtoull(s, &end, 10);
  if (*end == 'k' || *end == 'K') v <<= 10;
  if (*end == 'm' || *end == 'M') v <<= 20;
  return v ? (size_t)v : dflt;
}

inline void worker_main(Launch *L) {
  Worker w;
  w.launch = L;
  std::vector<unsigned char> smem;
  int status = OK;
  try {
    unsigned n = L->nthreads;
    w.owner.assign(n, nullptr);
    w.warps.resize((n + 31) / 32);
    // Reserved up front: code running on a fiber must never throw.
    for (auto *v : {&w.runq, &w.batch, &w.bar_waiters}) v->reserve(n);
    w.fibers.reserve(n);
    w.idle.reserve(n);
    // Poisoned, like real shared memory that holds the last kernel's data.
    smem.assign(L->dyn_smem + 16, 0xff);
    w.smem = smem.data() + (16 - (uintptr_t)smem.data() % 16) % 16;
  } catch (...) {
    status = NO_MEMORY;
  }
  Worker *saved = tl_worker;
  tl_worker = &w;
  blockDim = L->block;
  gridDim = L->grid;
  while (status == OK && L->status.load(std::memory_order_relaxed) == OK) {
    uint64_t b = L->next_block.fetch_add(1, std::memory_order_relaxed);
    if (b >= L->nblocks) break;
    AOTC_SAN(b = aotc_san::block_at(b, L->nblocks));
    AOTC_SAN(if (aotc_san::block_skipped(b)) continue;)
    status = run_block(&w, b);
  }
  if (status != OK) {
    int expected = OK;
    L->status.compare_exchange_strong(expected, status);
  }
  tl_worker = saved;
  for (Fiber *f : w.fibers) {
    munmap(f->map, f->map_size);
    delete f;
  }
}

// Run one launch; returns a Status. `body(args)` runs one CUDA thread.
inline int launch(void (*body)(void *), void *args, dim3 grid, dim3 block,
                  unsigned dyn_smem) {
  if (block.x == 0 || block.y == 0 || block.z == 0 || grid.x == 0 || grid.y == 0 ||
      grid.z == 0 || block.x > 1024 || block.y > 1024 || block.z > 64 ||
      (uint64_t)block.x * block.y * block.z > 1024 || grid.y > 65535 || grid.z > 65535)
    return BAD_LAUNCH;
  if (dyn_smem > (1u << 20)) return BAD_LAUNCH;
  if (tl_worker) return BAD_LAUNCH;  // no launches from inside a kernel
  Launch L;
  L.body = body;
  L.args = args;
  L.grid = grid;
  L.block = block;
  L.dyn_smem = dyn_smem;
  L.nthreads = block.x * block.y * block.z;
  L.nblocks = (uint64_t)grid.x * grid.y * grid.z;
  size_t page = (size_t)sysconf(_SC_PAGESIZE);
  L.stack_size = (env_size("AOTC_EMU_STACK", 64 << 10) + page - 1) / page * page;
  size_t nworkers = env_size("AOTC_EMU_WORKERS", 2);
#ifdef AOTC_SANITIZE
  std::lock_guard<std::mutex> one_at_a_time(aotc_san::st().launch_mu);
  nworkers = 1;
  aotc_san::launch_begin(&L);
  struct End {
    ~End() { aotc_san::launch_end(); }
  } end_launch;
#endif
  if (nworkers > L.nblocks) nworkers = (size_t)L.nblocks;
  if (nworkers > 256) nworkers = 256;
  // Plain pthreads (not <thread>, which doubles the header's compile cost).
  pthread_t extra[256];
  size_t started = 0;
  auto entry = [](void *l) -> void * {
    worker_main(static_cast<Launch *>(l));
    return nullptr;
  };
  // A failed pthread_create just means fewer workers: still correct.
  while (started + 1 < nworkers && pthread_create(&extra[started], nullptr, entry, &L) == 0)
    started++;
  worker_main(&L);
  for (size_t i = 0; i < started; i++) pthread_join(extra[i], nullptr);
  return L.status.load();
}

// Launch a kernel given cuLaunchKernel-style params (pointers to argument
// values); the argument types come from the kernel's own signature.
template <class... A, size_t... I>
inline int launch_kernel_impl(void (*fn)(A...), std::index_sequence<I...>,
                              const unsigned *grid3, const unsigned *block3,
                              unsigned dyn_smem, void **params) {
  const dim3 grid(grid3[0], grid3[1], grid3[2]), block(block3[0], block3[1], block3[2]);
  AOTC_SAN(static constexpr bool is_pointer[sizeof...(A) + 1] = {std::is_pointer_v<std::decay_t<A>>...};
           aotc_san::tl_pending.params = params; aotc_san::tl_pending.is_pointer = is_pointer;
           aotc_san::tl_pending.nparams = sizeof...(A));
  if constexpr ((std::is_pointer_v<std::decay_t<A>> && ...)) {
    // aotc's kernels take pointers only: an array of them, no std::tuple, whose
    // instantiation grows steeply with the arity (a 200-way concat: 8 s of g++)
    struct Call {
      void (*fn)(A...);
      void *vals[sizeof...(A) ? sizeof...(A) : 1];
    };
    Call call{fn, {}};
    ((call.vals[I] = (void *)*static_cast<std::decay_t<A> *>(params[I])), ...);
    // A copy on the fiber's stack: under AOTC_SANITIZE, kernel code may only
    // touch its own stack, its buffers and shared memory.
    auto body = [](void *p) AOTC_EMU_NOSAN {
      Call c = *static_cast<Call *>(p);
      c.fn(static_cast<std::decay_t<A>>(c.vals[I])...);
    };
    return launch(body, &call, grid, block, dyn_smem);
  } else {
    struct Call {
      void (*fn)(A...);
      std::tuple<std::decay_t<A>...> args;
    };
    Call call{fn, std::tuple<std::decay_t<A>...>(
                      *static_cast<std::decay_t<A> *>(params[I])...)};
    auto body = [](void *p) AOTC_EMU_NOSAN {
      Call c = *static_cast<Call *>(p);
      c.fn(std::get<I>(c.args)...);
    };
    return launch(body, &call, grid, block, dyn_smem);
  }
}

template <class... A>
inline int launch_kernel(void (*fn)(A...), const unsigned *grid3,
                         const unsigned *block3, unsigned dyn_smem, void **params) {
  try {
    return launch_kernel_impl(fn, std::index_sequence_for<A...>{}, grid3, block3,
                              dyn_smem, params);
  } catch (...) {
    return INTERNAL;
  }
}

}  // namespace aotc_emu

// ------------------------------------------------------- CUDA device API
// Sanitized builds tell the barriers apart by their call sites.
#ifdef AOTC_SANITIZE
#define AOTC_BARRIER_FN __attribute__((noinline)) AOTC_EMU_NOSAN
#define AOTC_BARRIER_SITE (uintptr_t) __builtin_return_address(0)
#else
#define AOTC_BARRIER_FN
#define AOTC_BARRIER_SITE 0
#endif
AOTC_BARRIER_FN inline void __syncthreads() { aotc_emu::barrier(0, AOTC_BARRIER_SITE); }
AOTC_BARRIER_FN inline int __syncthreads_count(int p) { return aotc_emu::barrier(p, AOTC_BARRIER_SITE); }
AOTC_BARRIER_FN inline int __syncthreads_and(int p) { return aotc_emu::barrier(!p, AOTC_BARRIER_SITE) == 0; }
AOTC_BARRIER_FN inline int __syncthreads_or(int p) { return aotc_emu::barrier(p, AOTC_BARRIER_SITE) != 0; }
inline void __syncwarp(unsigned mask = 0xffffffffu) { aotc_emu::warp_exchange(mask, 0); }
inline void __threadfence() {
  AOTC_SAN(aotc_san::fence());
  std::atomic_thread_fence(std::memory_order_seq_cst);
}
inline void __threadfence_block() { std::atomic_signal_fence(std::memory_order_seq_cst); }
[[noreturn]] inline void __trap() { abort(); }

template <class T>
inline T __shfl_sync(unsigned mask, T v, int src, int width = warpSize) {
  int lane = (int)aotc_emu::lane_id();
  return aotc_emu::shuffle(mask, v, (lane & ~(width - 1)) + (src & (width - 1)), true);
}
template <class T>
inline T __shfl_xor_sync(unsigned mask, T v, int lane_mask, int width = warpSize) {
  int lane = (int)aotc_emu::lane_id(), src = lane ^ lane_mask;
  return aotc_emu::shuffle(mask, v, src, ((src ^ lane) & ~(width - 1)) == 0);
}
template <class T>
inline T __shfl_up_sync(unsigned mask, T v, unsigned delta, int width = warpSize) {
  int lane = (int)aotc_emu::lane_id();
  return aotc_emu::shuffle(mask, v, lane - (int)delta, (lane & (width - 1)) >= (int)delta);
}
template <class T>
inline T __shfl_down_sync(unsigned mask, T v, unsigned delta, int width = warpSize) {
  int lane = (int)aotc_emu::lane_id();
  return aotc_emu::shuffle(mask, v, lane + (int)delta,
                           (lane & (width - 1)) + (int)delta < width);
}
inline unsigned __ballot_sync(unsigned mask, int pred) { return aotc_emu::ballot(mask, pred); }
inline int __any_sync(unsigned mask, int pred) { return aotc_emu::ballot(mask, pred) != 0; }
inline int __all_sync(unsigned mask, int pred) {
  unsigned voters = 0;
  return aotc_emu::ballot(mask, pred, &voters) == voters;
}
AOTC_EMU_NOSAN inline unsigned __activemask() {
  AOTC_SAN_SCOPE;
  return aotc_emu::tl_worker->warps[aotc_emu::tl_worker->cur_tid / 32].present;
}

// Atomics: blocks really run in parallel on different OS threads.
#define AOTC_EMU_ATOMIC(name, op)                                              \
  template <class T>                                                           \
  AOTC_EMU_NOSAN inline T name(T *p, std::type_identity_t<T> v) {              \
    AOTC_SAN(aotc_san::atomic_access(p, sizeof(T)); AOTC_SAN_SCOPE);                          \
    return std::atomic_ref<T>(*p).op(v);                                       \
  }
AOTC_EMU_ATOMIC(atomicAdd, fetch_add)
AOTC_EMU_ATOMIC(atomicSub, fetch_sub)
AOTC_EMU_ATOMIC(atomicExch, exchange)
AOTC_EMU_ATOMIC(atomicAnd, fetch_and)
AOTC_EMU_ATOMIC(atomicOr, fetch_or)
AOTC_EMU_ATOMIC(atomicXor, fetch_xor)
#undef AOTC_EMU_ATOMIC

template <class T>
AOTC_EMU_NOSAN inline T atomicCAS(T *p, std::type_identity_t<T> compare, std::type_identity_t<T> v) {
  AOTC_SAN(aotc_san::atomic_access(p, sizeof(T)); AOTC_SAN_SCOPE);
  std::atomic_ref<T>(*p).compare_exchange_strong(compare, v);
  return compare;  // holds the old value either way
}
template <class T>
AOTC_EMU_NOSAN inline T atomicMax(T *p, std::type_identity_t<T> v) {
  AOTC_SAN(aotc_san::atomic_access(p, sizeof(T)); AOTC_SAN_SCOPE);
  std::atomic_ref<T> a(*p);
  T old = a.load();
  while (old < v && !a.compare_exchange_weak(old, v)) {
  }
  return old;
}
template <class T>
AOTC_EMU_NOSAN inline T atomicMin(T *p, std::type_identity_t<T> v) {
  AOTC_SAN(aotc_san::atomic_access(p, sizeof(T)); AOTC_SAN_SCOPE);
  std::atomic_ref<T> a(*p);
  T old = a.load();
  while (v < old && !a.compare_exchange_weak(old, v)) {
  }
  return old;
}

// Math. Kernels are compiled for the GPU without fast math (nvrtc_compile.py:
// MATH_FLAGS: no ftz, IEEE `/` and sqrtf), so the standard functions (expf,
// powf, sinf...) are CUDA's precise ones, within a few ulp of libm's here and
// with the same special cases (tests/kernels/test_host_math.py). The fast
// intrinsics below are different functions on the GPU, so they are modelled
// as the GPU computes them, not as libm would: the multiply by a constant in
// float before ex2.approx/after lg2.approx (the source of __expf's error that
// grows with |x|), __powf as exp2(y * log2(x)) (NaN for a negative base),
// __sinf/__cosf reducing the argument through x * (1 / 2pi) in float (large
// arguments lose what the GPU loses), __fdividef's zero for 2^126 < |y| < 2^128.
// Each follows the SASS NVRTC makes of it for sm_90 under those flags (read
// with nvdisasm): __expf = FMUL by 1.44269502f, MUFU.EX2 (inputs below -126
// halved and the result squared, so subnormal results survive); __logf =
// MUFU.LG2 (subnormal inputs scaled by 2^24 first), FMUL by 0.693147182f;
// __fdividef = MUFU.RCP(y) * x (a subnormal y scaled by 2^24 first; for
// |y| > 2^126 the reciprocal flushes to 0). The MUFU units' own last-bit
// approximations are not modelled; they are within 2 ulp, below any
// tolerance aotc's tests use.
namespace aotc_emu_math {
inline float ex2_approx(float x) { return exp2f(x); }                 // ex2.approx.f32
inline float lg2_approx(float x) { return x < 0.0f ? NAN : log2f(x); }  // lg2.approx.f32: -0 -> -inf
// sin.approx/cos.approx (SASS: FMUL.RZ by 1/2pi, then MUFU.SIN/COS on turns): the
// argument in turns, one float multiply rounded toward zero, then the exact function.
inline float turns(float x) {
  const double d = (double)x * (double)0.15915493667125701904f;  // exact: 24 x 24 bits
  float f = (float)d;
  if (fabs((double)f) > fabs(d)) f = nextafterf(f, 0.0f);
  return f;
}
inline float sin_approx(float x) {
  if (isinf(x)) return NAN;
  const double t = (double)turns(x);
  return x == 0.0f ? x : (float)sin(6.283185307179586 * (t - nearbyint(t)));
}
inline float cos_approx(float x) {
  if (isinf(x)) return NAN;
  const double t = (double)turns(x);
  return (float)cos(6.283185307179586 * (t - nearbyint(t)));
}
}  // namespace aotc_emu_math
inline float __expf(float x) { return aotc_emu_math::ex2_approx(x * 1.44269502f); }
inline float __exp10f(float x) { return aotc_emu_math::ex2_approx(x * 3.32192809f); }
inline float __log2f(float x) { return aotc_emu_math::lg2_approx(x); }
inline float __logf(float x) { return aotc_emu_math::lg2_approx(x) * 0.693147182f; }
inline float __log10f(float x) { return aotc_emu_math::lg2_approx(x) * 0.301029996f; }
inline float __powf(float x, float y) { return aotc_emu_math::ex2_approx(y * aotc_emu_math::lg2_approx(x)); }
inline float __sinf(float x) { return aotc_emu_math::sin_approx(x); }
inline float __cosf(float x) { return aotc_emu_math::cos_approx(x); }
inline float __fdividef(float x, float y) {
  const float ay = fabsf(y);
  if (ay > 0x1p126f && ay < INFINITY) return isinf(x) ? NAN : 0.0f * x * y;  // documented: 0, NaN for inf x
  if (ay < 0x1p-126f) {                                                       // subnormal y: both scaled first
    x *= 0x1p24f;
    y *= 0x1p24f;
  }
  return x * (1.0f / y);                                                      // rcp.approx, then a multiply
}
inline float __tanf(float x) { return __fdividef(__sinf(x), __cosf(x)); }
inline float __frcp_rn(float x) { return 1.0f / x; }
inline float __fsqrt_rn(float x) { return sqrtf(x); }
inline float __fmaf_rn(float a, float b, float c) { return fmaf(a, b, c); }
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __saturatef(float x) { return x < 0.0f ? 0.0f : (x > 1.0f ? 1.0f : x); }
// rsqrt.approx.f32 (2 ulp); the special cases are 1/sqrt's: +-0 -> +-inf, x < 0 -> NaN, inf -> 0.
inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
inline double rsqrt(double x) { return 1.0 / sqrt(x); }
inline float __int_as_float(int x) { float f; memcpy(&f, &x, 4); return f; }
inline int __float_as_int(float f) { int x; memcpy(&x, &f, 4); return x; }
inline float __uint_as_float(unsigned x) { float f; memcpy(&f, &x, 4); return f; }
inline unsigned __float_as_uint(float f) { unsigned x; memcpy(&x, &f, 4); return x; }
inline double __longlong_as_double(long long x) { double f; memcpy(&f, &x, 8); return f; }
inline long long __double_as_longlong(double f) { long long x; memcpy(&x, &f, 8); return x; }
inline int __float2int_rn(float x) { return (int)nearbyintf(x); }
inline int __float2int_rz(float x) { return (int)x; }
inline int __float2int_rd(float x) { return (int)floorf(x); }
inline int __float2int_ru(float x) { return (int)ceilf(x); }
inline float __int2float_rn(int x) { return (float)x; }
inline int __popc(unsigned x) { return __builtin_popcount(x); }
inline int __popcll(unsigned long long x) { return __builtin_popcountll(x); }
inline int __clz(int x) { return x ? __builtin_clz((unsigned)x) : 32; }
inline int __clzll(long long x) { return x ? __builtin_clzll((unsigned long long)x) : 64; }
inline int __ffs(int x) { return __builtin_ffs(x); }
inline unsigned __brev(unsigned x) {
  x = ((x >> 1) & 0x55555555u) | ((x & 0x55555555u) << 1);
  x = ((x >> 2) & 0x33333333u) | ((x & 0x33333333u) << 2);
  x = ((x >> 4) & 0x0f0f0f0fu) | ((x & 0x0f0f0f0fu) << 4);
  return __builtin_bswap32(x);
}
inline unsigned __umulhi(unsigned a, unsigned b) { return (unsigned)(((uint64_t)a * b) >> 32); }
inline int __mulhi(int a, int b) { return (int)(((int64_t)a * b) >> 32); }
template <class T>
inline T __ldg(const T *p) { return *p; }

// CUDA's overloaded min/max for device code (integers of mixed width too).
inline int min(int a, int b) { return a < b ? a : b; }
inline int max(int a, int b) { return a > b ? a : b; }
inline unsigned min(unsigned a, unsigned b) { return a < b ? a : b; }
inline unsigned max(unsigned a, unsigned b) { return a > b ? a : b; }
inline long long min(long long a, long long b) { return a < b ? a : b; }
inline long long max(long long a, long long b) { return a > b ? a : b; }
inline long min(long a, long b) { return a < b ? a : b; }
inline long max(long a, long b) { return a > b ? a : b; }
inline unsigned long min(unsigned long a, unsigned long b) { return a < b ? a : b; }
inline unsigned long max(unsigned long a, unsigned long b) { return a > b ? a : b; }
inline unsigned min(int a, unsigned b) { return min((unsigned)a, b); }
inline unsigned max(int a, unsigned b) { return max((unsigned)a, b); }
inline unsigned min(unsigned a, int b) { return min(a, (unsigned)b); }
inline unsigned max(unsigned a, int b) { return max(a, (unsigned)b); }
inline unsigned long long min(unsigned long long a, unsigned long long b) { return a < b ? a : b; }
inline unsigned long long max(unsigned long long a, unsigned long long b) { return a > b ? a : b; }
inline float min(float a, float b) { return fminf(a, b); }
inline float max(float a, float b) { return fmaxf(a, b); }
inline double min(double a, double b) { return fmin(a, b); }
inline double max(double a, double b) { return fmax(a, b); }

// Device-only half/bfloat16 intrinsics the CUDA headers declare only for the
// GPU, computed in float (exact for a single rounding of fma inputs is not
// guaranteed; compare with tolerances).
inline __half __hfma(__half a, __half b, __half c) {
  return __float2half(fmaf(__half2float(a), __half2float(b), __half2float(c)));
}
inline __half2 __hfma2(__half2 a, __half2 b, __half2 c) {
  return __floats2half2_rn(fmaf(__low2float(a), __low2float(b), __low2float(c)),
                           fmaf(__high2float(a), __high2float(b), __high2float(c)));
}
inline __nv_bfloat16 __hfma(__nv_bfloat16 a, __nv_bfloat16 b, __nv_bfloat16 c) {
  return __float2bfloat16(fmaf(__bfloat162float(a), __bfloat162float(b),
                               __bfloat162float(c)));
}
inline __half hexp(__half x) { return __float2half(expf(__half2float(x))); }
inline __half hsqrt(__half x) { return __float2half(sqrtf(__half2float(x))); }
inline __half hrsqrt(__half x) { return __float2half(1.0f / sqrtf(__half2float(x))); }
