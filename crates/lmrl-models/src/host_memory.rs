//! How the process's heap treats the CPU backends' tensor buffers.

/// Keeps freed heap memory in the process for reuse instead of handing it back to the kernel;
/// returns whether the allocator accepted the settings (only glibc's does; elsewhere a no-op).
///
/// Why: burn's CPU backends allocate a fresh buffer for each intermediate tensor. glibc serves
/// a buffer above its mmap threshold (128 KiB, adapting up to 32 MiB) with its own `mmap` and
/// unmaps it on free, and trims the heap's top once 128 KiB are free, so every activation,
/// gradient and `[B, T, V]` logits tensor of every step is page-faulted in and zeroed by the
/// kernel again. Serving every allocation from the heap and never trimming it lets the next
/// step reuse the same pages: on `lm-app bench` (GPT-2 small) minor page faults fell from
/// 1.89 M to 0.42 M and system time from 4.9 s to 1.2 s (docs/benchmarks.md).
///
/// The settings hold only in glibc's main arena, so every thread is put there (one arena):
/// glibc gives each new thread an arena of its own whose heaps are at most 64 MiB, and a
/// larger buffer asked for by such a thread (a `[B, T, V]` logits tensor, a vocabulary-sized
/// gradient; CORY's second update runs on its own thread) is then `mmap`ed whatever
/// `M_MMAP_MAX` says and unmapped on free. On SmolLM2-135M's forward+backward after a
/// generation (`lm-app bench --model`) that was 1.7–2.3 M of a run's 3.1 M minor faults
/// (docs/benchmarks.md). Small allocations keep their per-thread caches, so the one arena's
/// lock is rarely taken.
///
/// The cost: the resident size stays at its high-water mark (freed memory is reused by the
/// process, not returned to the system), and fragmentation raises that mark: by ~15% on the
/// benches.
///
/// The heap is also asked for transparent huge pages where the kernel gives them only on
/// request (see `huge_page_heap` below).
///
/// Process-wide: call it first thing in `main`, before any thread allocates.
pub fn retain_freed_memory() -> bool {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        // SAFETY: `mallopt` only changes allocator parameters; these four take any value.
        let accepted = unsafe {
            libc::mallopt(libc::M_ARENA_MAX, 1) == 1
                && libc::mallopt(libc::M_MMAP_MAX, 0) == 1
                && libc::mallopt(libc::M_TRIM_THRESHOLD, i32::MAX) == 1
                && libc::mallopt(libc::M_TOP_PAD, 64 << 20) == 1
        };
        if accepted {
            huge_page_heap::reserve();
        }
        accepted
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    {
        false
    }
}

/// Transparent huge pages (2 MiB) for the heap, on a kernel whose THP mode is `madvise`.
///
/// Why: with every tensor buffer in one heap of several GB, 4 KiB pages cost twice. Each
/// first touch is a page fault (a heap of 5.4 GB is 1.3 M of them), and the matrix products
/// stream weights and activations over far more pages than the TLB holds, each miss a
/// two-level walk under a hypervisor. glibc can ask for huge pages itself
/// (`GLIBC_TUNABLES=glibc.malloc.hugetlb=1`), but only from the environment at start-up;
/// this does the same from `main`: it grows the heap once by a large reservation, marks it
/// `MADV_HUGEPAGE` and frees it below a small guard (so glibc keeps it rather than trimming
/// it), so later buffers are carved from marked address space. Nothing is touched: the reservation is address space, resident only
/// as it is used. The arithmetic is unchanged (only where buffers lie); the default imdb-app
/// runs in 0.97× the wall time with the same metrics (docs/benchmarks.md, 2026-12-05).
///
/// Skipped where it would cost memory or do nothing: THP mode other than `madvise` (`always`
/// already gives them, `never` refuses), or strict overcommit accounting
/// (`vm.overcommit_memory = 2`), under which the reservation would be charged in full.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
mod huge_page_heap {
    const HUGE_PAGE: usize = 2 << 20;
    /// Heap address space kept after the reservation (only its header page is touched).
    const GUARD: usize = 1 << 20;

    /// Whether the kernel gives huge pages only to ranges marked for them.
    fn on_request_only() -> bool {
        let read = |p: &str| std::fs::read_to_string(p).unwrap_or_default();
        read("/sys/kernel/mm/transparent_hugepage/enabled").contains("[madvise]")
            && read("/proc/sys/vm/overcommit_memory").trim() != "2"
    }

    /// Half of physical memory: more than a run of this workspace keeps, and address space
    /// past it is still served, in 4 KiB pages.
    fn reservation() -> usize {
        // SAFETY: sysconf has no preconditions.
        let (pages, size) = unsafe {
            (
                libc::sysconf(libc::_SC_PHYS_PAGES),
                libc::sysconf(libc::_SC_PAGESIZE),
            )
        };
        if pages <= 0 || size <= 0 {
            return 0;
        }
        (pages as usize).saturating_mul(size as usize) / 2
    }

    /// Marks the heap's next `reservation()` bytes for huge pages where it can (best effort:
    /// where it cannot, the heap simply keeps 4 KiB pages).
    pub(super) fn reserve() {
        let bytes = reservation();
        if bytes < 4 * HUGE_PAGE || !on_request_only() {
            return;
        }
        // SAFETY: the block is only marked and freed, never read or written; with
        // `M_MMAP_MAX = 0` it is heap (brk) memory. Freed next to the heap's top it would merge
        // into it and be trimmed at once (the trim threshold cannot be set above 2 GiB), so a
        // guard is allocated after it and kept for the process's life: the block then stays a
        // free chunk that later allocations split. The guard is larger than any free chunk of a
        // heap at start-up, so it comes from the top, right after the block (checked).
        unsafe {
            let block = libc::malloc(bytes);
            if block.is_null() {
                return;
            }
            let guard = libc::malloc(GUARD);
            if (guard as usize) < block as usize + bytes {
                libc::free(guard);
                libc::free(block);
                return;
            }
            let start = (block as usize).next_multiple_of(HUGE_PAGE);
            let end = (block as usize + bytes) / HUGE_PAGE * HUGE_PAGE;
            libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_HUGEPAGE);
            libc::free(block);
        }
    }
}
