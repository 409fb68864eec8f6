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
/// Process-wide: call it first thing in `main`, before any thread allocates.
pub fn retain_freed_memory() -> bool {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        // SAFETY: `mallopt` only changes allocator parameters; these four take any value.
        unsafe {
            libc::mallopt(libc::M_ARENA_MAX, 1) == 1
                && libc::mallopt(libc::M_MMAP_MAX, 0) == 1
                && libc::mallopt(libc::M_TRIM_THRESHOLD, i32::MAX) == 1
                && libc::mallopt(libc::M_TOP_PAD, 64 << 20) == 1
        }
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    {
        false
    }
}
