"""The CLANG device's native runtime library: a persistent pthread pool that runs ``core_id`` kernels and batches
of kernels in **one** foreign call (no Python threads anywhere).

The library is C source (`RUNTIME_SRC`), compiled once per machine and cached on disk like any kernel, then loaded
once per process (`get_pool`): by the llvm backend from LLVM IR that clang made of the same source and that ships
with the plugin (`tinycore_clang.pool_ir`: no C compiler needed), or by the C compiler. Its ABI (version `RUNTIME_ABI`):

.. code-block:: c

    typedef void (*tc_entry)(void* const* bufs, const long long* vals, int core_id);   // a kernel's NAME_tc
    typedef struct { tc_entry fn; void* const* bufs; const long long* vals; int ntasks; int flags; } tc_item;

    int  tc_abi_version(void);
    void tc_run(tc_entry fn, void* const* bufs, const long long* vals, int ntasks, int nthreads);
    void tc_run_batch(const tc_item* items, int nitems, int nthreads);
    void tc_run_graph(const tc_item* items, int nitems, int nthreads);  // plain items called directly
    int  tc_workers(void);             // worker threads started so far (the caller is thread 0)
    void tc_set_spin(int iterations);  // how long an idle worker spins before sleeping (default 1500)

`tc_run` calls ``fn(bufs, vals, core_id)`` for ``core_id = 0 .. ntasks-1`` on ``min(ntasks, nthreads)`` threads:
task ``t`` runs on thread ``t % nthreads`` (thread 0 is the caller), so with ``ntasks == nthreads`` every thread
runs exactly one chunk. `tc_run_batch` runs the items in order, each item fanned out like `tc_run`, with a barrier
wherever an item depends on the previous one's results: the JIT's CLANG graph runner replays a whole captured
schedule with it, patching the ``bufs``/``vals`` arrays in place between calls. Items with ``ntasks <= 1`` run on
the caller alone. `tc_run_graph` is what the CLANG graph runner replays: it calls items with ``ntasks <= 1``
directly (``core_id`` 0) and hands each run of consecutive multi-task items to `tc_run_batch`.
Launches from several host threads are serialized. After ``fork()`` the child starts a fresh pool.
`KernelBatch` wraps `tc_run_batch` for Python callers (the CLANG graph runner).
"""

from __future__ import annotations

import ctypes
import threading
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tinycore_clang.compiler import ClangCompiler
    from tinycore_clang.llvm_compiler import LLVMCompiler

RUNTIME_ABI = 2

RUNTIME_SRC = r"""
// tinycore-clang runtime library (thread pool), ABI 2
#include <pthread.h>
#include <sched.h>

#ifdef TC_LSB_ATFORK
/* The shipped IR (`tinycore_clang.pool_ir`) is loaded without a linker, and glibc's pthread_atfork is a stub in
   libc_nonshared.a that only a link provides; it calls this exported LSB entry point, which the process has. */
extern int __register_atfork(void (*prepare)(void), void (*parent)(void), void (*child)(void), void* dso);
#define tc_atfork(child) __register_atfork(0, 0, child, 0)
#else
#define tc_atfork(child) pthread_atfork(0, 0, child)
#endif

typedef void (*tc_entry)(void* const* bufs, const long long* vals, int core_id);
typedef struct { tc_entry fn; void* const* bufs; const long long* vals; int ntasks; int flags; } tc_item;

#define TC_MAX_THREADS 256

static pthread_mutex_t tc_mu = PTHREAD_MUTEX_INITIALIZER;        /* only for sleeping and waking workers */
static pthread_cond_t tc_cv = PTHREAD_COND_INITIALIZER;
static pthread_mutex_t tc_launch_mu = PTHREAD_MUTEX_INITIALIZER; /* one launch at a time */
static int tc_nworkers = 0;
static unsigned tc_gen = 0;            /* bumped (release) after the job fields are written */
static int tc_sleepers = 0;            /* workers blocked (or about to block) on tc_cv */
static int tc_spin = 1500;            /* idle spin (pause instructions) before a worker sleeps */
static const tc_item* tc_job_items;
static int tc_job_nitems, tc_job_nthreads;
static unsigned tc_job_sense;
static int tc_remaining;               /* participants of the current job that have not finished */
static int tc_bar_count;
static unsigned tc_bar_sense;

static inline void tc_pause(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

/* Waiting for other threads: spin briefly (about 10 us), then give the core away on every check, so an
   oversubscribed machine (more runnable threads than cores) still makes progress. */
static inline void tc_relax(int* spins) {
  if (++*spins < 200) tc_pause();
  else sched_yield();
}

static void tc_barrier(int nthreads, unsigned* sense) {
  unsigned want = *sense ^ 1u;
  *sense = want;
  if (__atomic_add_fetch(&tc_bar_count, 1, __ATOMIC_ACQ_REL) == nthreads) {
    __atomic_store_n(&tc_bar_count, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&tc_bar_sense, want, __ATOMIC_RELEASE);
  } else {
    int spins = 0;
    while (__atomic_load_n(&tc_bar_sense, __ATOMIC_ACQUIRE) != want) tc_relax(&spins);
  }
}

/* Thread `w` of `nthreads` runs its share of every item; all threads walk the items identically, so they agree on
   where the barriers are: before a threaded item that follows serial work, and after every threaded item. */
static void tc_execute(int w, const tc_item* items, int nitems, int nthreads, unsigned sense) {
  int dirty = 0;
  for (int i = 0; i < nitems; i++) {
    const tc_item* it = &items[i];
    if (it->ntasks <= 1 || nthreads <= 1) {
      if (w == 0) for (int t = 0; t < (it->ntasks < 1 ? 1 : it->ntasks); t++) it->fn(it->bufs, it->vals, t);
      dirty = 1;
      continue;
    }
    if (dirty) tc_barrier(nthreads, &sense);
    for (int t = w; t < it->ntasks; t += nthreads) it->fn(it->bufs, it->vals, t);
    if (i + 1 < nitems) tc_barrier(nthreads, &sense);
    dirty = 0;
  }
}

static unsigned tc_worker_start_gen[TC_MAX_THREADS];

/* A job is published by writing its fields, then bumping tc_gen (release). A participant of job g can't miss it:
   job g+1 is only published after every participant of g finished. A worker that sees tc_gen move while it reads
   the fields (it was not needed for the job it saw) simply reads again. */
static void* tc_worker(void* arg) {
  int w = (int)(long)arg;
  unsigned seen = tc_worker_start_gen[w];
  for (;;) {
    unsigned gen;
    int spins = 0;
    while ((gen = __atomic_load_n(&tc_gen, __ATOMIC_ACQUIRE)) == seen && spins < tc_spin) {
      spins++;
      tc_pause();
    }
    if (gen == seen) {
      pthread_mutex_lock(&tc_mu);
      __atomic_add_fetch(&tc_sleepers, 1, __ATOMIC_SEQ_CST);
      while ((gen = __atomic_load_n(&tc_gen, __ATOMIC_SEQ_CST)) == seen) pthread_cond_wait(&tc_cv, &tc_mu);
      __atomic_sub_fetch(&tc_sleepers, 1, __ATOMIC_SEQ_CST);
      pthread_mutex_unlock(&tc_mu);
    }
    const tc_item* items = tc_job_items;
    int nitems = tc_job_nitems, nthreads = tc_job_nthreads;
    unsigned sense = tc_job_sense;
    if (__atomic_load_n(&tc_gen, __ATOMIC_ACQUIRE) != gen) continue;  /* superseded while reading: look again */
    seen = gen;
    if (w < nthreads) {
      tc_execute(w, items, nitems, nthreads, sense);
      __atomic_sub_fetch(&tc_remaining, 1, __ATOMIC_ACQ_REL);
    }
  }
  return 0;
}

static void tc_after_fork_child(void) {
  pthread_mutex_t fresh_mu = PTHREAD_MUTEX_INITIALIZER;
  pthread_cond_t fresh_cv = PTHREAD_COND_INITIALIZER;
  tc_mu = fresh_mu;
  tc_launch_mu = fresh_mu;
  tc_cv = fresh_cv;
  tc_nworkers = 0;
  tc_sleepers = 0;
  tc_bar_count = 0;
}

static int tc_fork_handler_installed = 0;

static int tc_ensure_workers(int wanted) {
  if (!tc_fork_handler_installed) {
    tc_atfork(tc_after_fork_child);
    tc_fork_handler_installed = 1;
  }
  while (tc_nworkers < wanted) {
    int w = tc_nworkers + 1;
    pthread_t thread;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    tc_worker_start_gen[w] = __atomic_load_n(&tc_gen, __ATOMIC_ACQUIRE);
    int rc = pthread_create(&thread, &attr, tc_worker, (void*)(long)w);
    pthread_attr_destroy(&attr);
    if (rc != 0) break;
    tc_nworkers = w;
  }
  return tc_nworkers;
}

int tc_abi_version(void) { return 2; }
int tc_workers(void) { return tc_nworkers; }
void tc_set_spin(int iterations) { tc_spin = iterations < 0 ? 0 : iterations; }

void tc_run_batch(const tc_item* items, int nitems, int nthreads) {
  int threaded = 0;
  if (nthreads > TC_MAX_THREADS) nthreads = TC_MAX_THREADS;
  int widest = 1;  /* never wake more threads than the widest item can use */
  for (int i = 0; i < nitems; i++) if (items[i].ntasks > widest) widest = items[i].ntasks;
  threaded = widest > 1;
  if (nthreads > widest) nthreads = widest;
  if (!threaded || nthreads <= 1) {
    for (int i = 0; i < nitems; i++) {
      const tc_item* it = &items[i];
      for (int t = 0; t < (it->ntasks < 1 ? 1 : it->ntasks); t++) it->fn(it->bufs, it->vals, t);
    }
    return;
  }
  pthread_mutex_lock(&tc_launch_mu);
  int have = tc_ensure_workers(nthreads - 1) + 1;
  if (have < nthreads) nthreads = have;
  tc_job_items = items;
  tc_job_nitems = nitems;
  tc_job_nthreads = nthreads;
  unsigned sense = tc_job_sense = __atomic_load_n(&tc_bar_sense, __ATOMIC_RELAXED);
  __atomic_store_n(&tc_remaining, nthreads - 1, __ATOMIC_RELAXED);
  __atomic_store_n(&tc_gen, tc_gen + 1u, __ATOMIC_SEQ_CST);
  if (__atomic_load_n(&tc_sleepers, __ATOMIC_SEQ_CST) > 0) {  /* Dekker with the sleeper's increment-then-check */
    pthread_mutex_lock(&tc_mu);
    pthread_cond_broadcast(&tc_cv);
    pthread_mutex_unlock(&tc_mu);
  }
  tc_execute(0, items, nitems, nthreads, sense);
  int spins = 0;
  while (__atomic_load_n(&tc_remaining, __ATOMIC_ACQUIRE) != 0) tc_relax(&spins);
  pthread_mutex_unlock(&tc_launch_mu);
}

void tc_run(tc_entry fn, void* const* bufs, const long long* vals, int ntasks, int nthreads) {
  tc_item item;
  item.fn = fn;
  item.bufs = bufs;
  item.vals = vals;
  item.ntasks = ntasks;
  item.flags = 0;
  tc_run_batch(&item, 1, nthreads);
}

void tc_run_graph(const tc_item* items, int nitems, int nthreads) {
  int i = 0;
  while (i < nitems) {
    if (items[i].ntasks <= 1) {  /* a plain kernel: call it here, no pool round trip */
      items[i].fn(items[i].bufs, items[i].vals, 0);
      i++;
      continue;
    }
    int end = i;
    while (end < nitems && items[end].ntasks > 1) end++;
    tc_run_batch(items + i, end - i, nthreads);
    i = end;
  }
}
"""


class TcItem(ctypes.Structure):
    """One entry of a `tc_run_batch` call (the C struct ``tc_item``)."""

    _fields_ = [
        ("fn", ctypes.c_void_p),
        ("bufs", ctypes.c_void_p),
        ("vals", ctypes.c_void_p),
        ("ntasks", ctypes.c_int),
        ("flags", ctypes.c_int),
    ]


class ThreadPool:
    """The loaded runtime library: `run` (one kernel over ``ntasks`` core ids) and `run_batch` (a list of
    `TcItem`), each one foreign call. Build it with `get_pool`.

    `image` is the loaded library: a ``dlopen``ed shared object or an in-process object file (anything with
    ``address(name)``, see `tinycore_clang.runtime.load_kernels`)."""

    def __init__(self, image: Any):
        self.image = image
        abi = self._function("tc_abi_version", ctypes.c_int)()
        if abi != RUNTIME_ABI:
            raise RuntimeError(f"tinycore-clang runtime library has ABI {abi}, need {RUNTIME_ABI}")
        pointer, cint = ctypes.c_void_p, ctypes.c_int
        self.run = self._function("tc_run", None, pointer, pointer, pointer, cint, cint)
        self.run_batch = self._function("tc_run_batch", None, pointer, cint, cint)
        self.run_graph = self._function("tc_run_graph", None, pointer, cint, cint)
        self.workers = self._function("tc_workers", cint)
        self.set_spin = self._function("tc_set_spin", None, cint)

    def _function(self, name: str, restype: Any, *argtypes: Any) -> Any:
        address = self.image.address(name)
        if address is None:
            raise RuntimeError(f"tinycore-clang runtime library has no {name!r}: rebuild it (clear the disk cache)")
        return ctypes.CFUNCTYPE(restype, *argtypes)(address)


class KernelBatch:
    """Launches replayed together with one ``tc_run_batch`` call (what a CLANG JIT graph runner needs).

    `add` a loaded `tinycore_clang.runtime.ClangProgram` with its buffer addresses, variable values and launch dims;
    between replays patch what changed with `set_buffer`/`set_vals`/`set_global_size` (the C arrays are updated in
    place, nothing is rebuilt); call the batch to run every launch in order. Each launch sees the results of the
    previous ones: the pool puts barriers between items where needed.
    """

    def __init__(self, pool: ThreadPool, threads: int):
        self.pool, self.threads = pool, threads
        self._bufs: list[ctypes.Array] = []
        self._vals: list[ctypes.Array] = []
        self._cores: list[int] = []
        self._entries: list[int] = []
        self._ntasks: list[int] = []
        self._items: ctypes.Array | None = None

    def __len__(self) -> int:
        return len(self._entries)

    def add(
        self, program: Any, ptrs: list[int], vals: tuple[int, ...] = (), global_size: tuple[int, ...] = (1,)
    ) -> int:
        """Append a launch of `program` on buffer addresses `ptrs`; returns its item index."""
        if len(ptrs) < program.nbufs or len(vals) != program.nvars:
            raise TypeError(f"{program!r} needs {program.nbufs} buffers and {program.nvars} values")
        self._bufs.append((ctypes.c_void_p * max(1, program.nbufs))(*ptrs[: program.nbufs]))
        self._vals.append((ctypes.c_int64 * max(1, program.nvars))(*vals))
        self._cores.append(program.info.cores)
        self._entries.append(program.entry)
        self._ntasks.append(1)
        self._items = None
        index = len(self._entries) - 1
        self.set_global_size(index, global_size)
        return index

    def set_buffer(self, item: int, index: int, ptr: int) -> None:
        """Point buffer argument `index` of launch `item` at address `ptr`."""
        self._bufs[item][index] = ptr

    def set_vals(self, item: int, vals: tuple[int, ...]) -> None:
        """New variable values of launch `item` (program order)."""
        array = self._vals[item]
        for k, value in enumerate(vals):
            array[k] = value

    def set_global_size(self, item: int, global_size: tuple[int, ...]) -> None:
        """New launch dims of launch `item` (they matter only for a core_id kernel whose count is symbolic)."""
        cores = self._cores[item]
        self._ntasks[item] = max(1, cores if cores > 0 else (int(global_size[0]) if cores < 0 else 1))
        if self._items is not None:
            self._items[item].ntasks = self._ntasks[item]

    def __call__(self) -> None:
        """Run every launch in order: one foreign call."""
        if self._items is None:
            items = (TcItem * max(1, len(self._entries)))()
            for k, item in enumerate(items[: len(self._entries)]):
                item.fn, item.ntasks = self._entries[k], self._ntasks[k]
                item.bufs, item.vals = ctypes.addressof(self._bufs[k]), ctypes.addressof(self._vals[k])
            self._items = items
        self.pool.run_batch(self._items, len(self._entries), int(self.threads))


_POOL: ThreadPool | None = None
_POOL_LOCK = threading.Lock()


def get_pool(builder: ClangCompiler | LLVMCompiler) -> ThreadPool:
    """The process's thread pool library, built on first use (through the compiler's disk cache) by `builder`: a C
    compiler compiles `RUNTIME_SRC`; the llvm backend's compiler compiles the shipped IR of it
    (`tinycore_clang.pool_ir`), so a machine without any C compiler has the pool too."""
    global _POOL
    if _POOL is not None:
        return _POOL
    with _POOL_LOCK:
        if _POOL is None:
            from tinycore_clang.compiler import ClangCompiler
            from tinycore_clang.runtime import SharedLibrary, load_kernels, load_library

            if isinstance(builder, ClangCompiler):
                lib = builder.compile_runtime_library(RUNTIME_SRC)
                _POOL = ThreadPool(SharedLibrary(load_library(lib), lib))
            else:
                from tinycore_clang.pool_ir import shipped_ir

                _POOL = ThreadPool(load_kernels(builder.compile_cached(shipped_ir())))
    return _POOL
