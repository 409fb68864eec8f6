//! How the process's heap treats the CPU backends' tensor buffers. Nothing here changes the
//! process unless the program asks: it builds a [`HostMemory`] (the apps read it from
//! `LMRL_HOST_MEMORY`) and calls [`HostMemory::apply`] first thing in `main`.
use crate::error::{ModelError, Result};

/// Heap settings of a process, chosen by the program. The default, [`HostMemory::SYSTEM`],
/// leaves the allocator as it is.
///
/// `retain_freed` keeps freed heap memory in the process for reuse instead of handing it back
/// to the kernel. Why: burn's CPU backends allocate a fresh buffer for each intermediate
/// tensor. glibc serves a buffer above its mmap threshold (128 KiB, adapting up to 32 MiB)
/// with its own `mmap` and unmaps it on free, and trims the heap's top once 128 KiB are free,
/// so every activation, gradient and `[B, T, V]` logits tensor of every step is page-faulted
/// in and zeroed by the kernel again. Serving every allocation from the heap and never
/// trimming it lets the next step reuse the same pages: on `lm-app bench` (GPT-2 small) minor
/// page faults fell from 1.89 M to 0.42 M and system time from 4.9 s to 1.2 s
/// (docs/benchmarks.md).
///
/// The settings hold only in glibc's main arena, so every thread is put there (one arena):
/// glibc gives each new thread an arena of its own whose heaps are at most 64 MiB, and a
/// larger buffer asked for by such a thread (a `[B, T, V]` logits tensor, a vocabulary-sized
/// gradient; CORY's second update runs on its own thread) is then `mmap`ed whatever
/// `M_MMAP_MAX` says and unmapped on free. Small allocations keep their per-thread caches, so
/// the one arena's lock is rarely taken.
///
/// The cost: the resident size stays at its high-water mark (freed memory is reused by the
/// process, not returned to the system), and fragmentation raises that mark: by ~15% on the
/// benches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct HostMemory {
    /// Keep freed heap memory for reuse (glibc only; elsewhere nothing changes).
    pub retain_freed: bool,
    /// Heap address space marked for transparent huge pages (needs `retain_freed`).
    pub huge_pages: HugePageHeap,
}

/// How much of the heap to mark for transparent huge pages (2 MiB), on a kernel whose THP mode
/// is `madvise`.
///
/// Why: with every tensor buffer in one heap of several GB, 4 KiB pages cost twice. Each
/// first touch is a page fault (a heap of 5.4 GB is 1.3 M of them), and the matrix products
/// stream weights and activations over far more pages than the TLB holds. glibc can ask for
/// huge pages itself (`GLIBC_TUNABLES=glibc.malloc.hugetlb=1`), but only from the environment
/// at start-up; this does the same from `main`: it grows the heap once by the reservation,
/// marks it `MADV_HUGEPAGE` and frees it below a small guard (so glibc keeps it rather than
/// trimming it), so later buffers are carved from marked address space. Nothing is touched:
/// the reservation is address space, resident only as it is used; past it the heap is served
/// in 4 KiB pages. The default imdb-app ran in 0.97× the wall time with the same metrics
/// (docs/benchmarks.md, 2026-12-05), within the noise of that host.
///
/// Skipped where it would cost memory or do nothing: THP mode other than `madvise` (`always`
/// already gives them, `never` refuses), or strict overcommit accounting
/// (`vm.overcommit_memory = 2`), under which the reservation would be charged in full.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum HugePageHeap {
    #[default]
    Off,
    /// Half of the memory the process may use: the smaller of physical memory and its
    /// cgroup's limit (v2 `memory.max`, v1 `memory.limit_in_bytes`).
    HalfOfLimit,
    /// This many bytes, at most the memory the process may use.
    Bytes(u64),
}

/// What [`HostMemory::apply`] changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct AppliedHostMemory {
    /// The allocator accepted the settings that keep freed memory.
    pub retained: bool,
    /// Bytes of heap address space marked for huge pages (0: none).
    pub huge_page_bytes: u64,
}

impl HostMemory {
    /// The allocator as it is.
    pub const SYSTEM: Self = Self {
        retain_freed: false,
        huge_pages: HugePageHeap::Off,
    };

    /// Reads a setting: `system` (or an empty string): the allocator as it is; `retain`: keep
    /// freed memory; `retain,huge-pages`: also mark half of the memory the process may use
    /// for huge pages; `retain,huge-pages=SIZE`: mark SIZE bytes (`K`, `M`, `G`, `T`
    /// suffixes, binary), at most that memory.
    pub fn parse(spec: &str) -> Result<Self> {
        let bad = |reason: String| ModelError::HostMemory {
            spec: spec.to_string(),
            reason,
        };
        let mut host = Self::SYSTEM;
        for item in spec.split(',').map(str::trim).filter(|i| !i.is_empty()) {
            match item.split_once('=') {
                None if item == "system" => {}
                None if item == "retain" => host.retain_freed = true,
                None if item == "huge-pages" => host.huge_pages = HugePageHeap::HalfOfLimit,
                Some(("huge-pages", size)) => {
                    host.huge_pages = HugePageHeap::Bytes(parse_size(size).map_err(bad)?);
                }
                _ => {
                    return Err(bad(format!(
                        "unknown item {item:?}; expected system, retain, huge-pages or \
                         huge-pages=SIZE"
                    )));
                }
            }
        }
        if host.huge_pages != HugePageHeap::Off && !host.retain_freed {
            return Err(bad(
                "huge-pages needs retain (the reservation is heap memory only when freed \
                 memory is kept)"
                    .into(),
            ));
        }
        Ok(host)
    }

    /// Applies the settings to this process's allocator; call it first thing in `main`, before
    /// any thread allocates. The settings are process-wide and stay for the process's life.
    /// Outside glibc nothing changes.
    pub fn apply(&self) -> AppliedHostMemory {
        if !self.retain_freed {
            return AppliedHostMemory::default();
        }
        #[cfg(all(target_os = "linux", target_env = "gnu"))]
        {
            // SAFETY: `mallopt` only changes allocator parameters; these four take any value.
            let retained = unsafe {
                libc::mallopt(libc::M_ARENA_MAX, 1) == 1
                    && libc::mallopt(libc::M_MMAP_MAX, 0) == 1
                    && libc::mallopt(libc::M_TRIM_THRESHOLD, i32::MAX) == 1
                    && libc::mallopt(libc::M_TOP_PAD, 64 << 20) == 1
            };
            let bytes = match (retained, self.huge_pages) {
                (false, _) | (true, HugePageHeap::Off) => 0,
                (true, HugePageHeap::HalfOfLimit) => memory_limit() / 2,
                (true, HugePageHeap::Bytes(b)) => b.min(memory_limit()),
            };
            AppliedHostMemory {
                retained,
                huge_page_bytes: huge_page_heap::reserve(bytes),
            }
        }
        #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
        {
            AppliedHostMemory::default()
        }
    }
}

/// `123`, `512K`, `64M`, `8G`, `1T` (binary multiples) as bytes.
fn parse_size(text: &str) -> std::result::Result<u64, String> {
    let t = text.trim();
    let (digits, shift) = match t.char_indices().last() {
        Some((i, 'k' | 'K')) => (&t[..i], 10),
        Some((i, 'm' | 'M')) => (&t[..i], 20),
        Some((i, 'g' | 'G')) => (&t[..i], 30),
        Some((i, 't' | 'T')) => (&t[..i], 40),
        _ => (t, 0),
    };
    let n: u64 = digits
        .parse()
        .map_err(|_| format!("size {text:?} is not a number of bytes with K, M, G or T"))?;
    n.checked_mul(1 << shift)
        .ok_or_else(|| format!("size {text:?} is too large"))
}

/// The memory this process may use: physical memory, or the tightest cgroup limit on it where
/// smaller.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn memory_limit() -> u64 {
    // SAFETY: sysconf has no preconditions.
    let (pages, size) = unsafe {
        (
            libc::sysconf(libc::_SC_PHYS_PAGES),
            libc::sysconf(libc::_SC_PAGESIZE),
        )
    };
    let physical = u64::try_from(pages)
        .unwrap_or(0)
        .saturating_mul(u64::try_from(size).unwrap_or(0));
    memory_limit_from(physical, &|p| std::fs::read_to_string(p).ok())
}

/// [`memory_limit`] with the files read through `read`: the limits of the process's own
/// cgroups and of their ancestors (`/proc/self/cgroup`; v2 `memory.max`, v1
/// `memory.limit_in_bytes`). A limit of `max`, or a file that cannot be read (a cgroup
/// namespace hides the path), sets none.
#[cfg_attr(not(all(target_os = "linux", target_env = "gnu")), allow(dead_code))]
fn memory_limit_from(physical: u64, read: &dyn Fn(&str) -> Option<String>) -> u64 {
    let own = read("/proc/self/cgroup").unwrap_or_default();
    let mut files = Vec::new();
    for line in own.lines() {
        let mut fields = line.splitn(3, ':');
        let (Some(_), Some(controllers), Some(path)) =
            (fields.next(), fields.next(), fields.next())
        else {
            continue;
        };
        let (root, file) = match controllers {
            "" => ("/sys/fs/cgroup", "memory.max"),
            c if c.split(',').any(|c| c == "memory") => {
                ("/sys/fs/cgroup/memory", "memory.limit_in_bytes")
            }
            _ => continue,
        };
        for dir in std::path::Path::new(path).ancestors() {
            let dir = dir.to_string_lossy();
            files.push(format!("{root}{}/{file}", dir.trim_end_matches('/')));
        }
    }
    files
        .iter()
        .filter_map(|f| read(f)?.trim().parse::<u64>().ok())
        .fold(physical, u64::min)
}

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

    /// Marks the heap's next `bytes` for huge pages where it can; returns the bytes marked
    /// (best effort: where it cannot, the heap simply keeps 4 KiB pages and this is 0).
    pub(super) fn reserve(bytes: u64) -> u64 {
        let Ok(bytes) = usize::try_from(bytes) else {
            return 0;
        };
        if bytes < 4 * HUGE_PAGE || !on_request_only() {
            return 0;
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
                return 0;
            }
            let guard = libc::malloc(GUARD);
            if (guard as usize) < block as usize + bytes {
                libc::free(guard);
                libc::free(block);
                return 0;
            }
            let start = (block as usize).next_multiple_of(HUGE_PAGE);
            let end = (block as usize + bytes) / HUGE_PAGE * HUGE_PAGE;
            let marked =
                libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_HUGEPAGE) == 0;
            libc::free(block);
            if marked { (end - start) as u64 } else { 0 }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_are_read_from_their_words() {
        let parsed = |s: &str| HostMemory::parse(s).unwrap();
        assert_eq!(parsed(""), HostMemory::SYSTEM);
        assert_eq!(parsed("system"), HostMemory::SYSTEM);
        let retain = HostMemory {
            retain_freed: true,
            huge_pages: HugePageHeap::Off,
        };
        assert_eq!(parsed("retain"), retain);
        assert_eq!(
            parsed("retain, huge-pages"),
            HostMemory {
                huge_pages: HugePageHeap::HalfOfLimit,
                ..retain
            }
        );
        assert_eq!(
            parsed("huge-pages=8G,retain").huge_pages,
            HugePageHeap::Bytes(8 << 30)
        );
        assert_eq!(
            parsed("retain,huge-pages=512m").huge_pages,
            HugePageHeap::Bytes(512 << 20)
        );
        assert_eq!(
            parsed("retain,huge-pages=4096").huge_pages,
            HugePageHeap::Bytes(4096)
        );
        for bad in [
            "huge-pages",
            "retian",
            "retain,huge-pages=8X",
            "retain,huge-pages=",
            "retain,huge-pages=99999999999T",
        ] {
            let e = HostMemory::parse(bad).unwrap_err().to_string();
            assert!(e.contains(&format!("{bad:?}")), "{e}");
        }
    }

    #[test]
    fn the_system_setting_changes_nothing() {
        assert_eq!(HostMemory::SYSTEM.apply(), AppliedHostMemory::default());
    }

    /// A container's limit caps the reservation, from either cgroup version and from an
    /// ancestor of the process's own cgroup; `max` and hidden files set none.
    #[test]
    fn the_limit_is_the_tightest_of_memory_and_cgroups() {
        const GB: u64 = 1 << 30;
        let files = |pairs: &'static [(&'static str, &'static str)]| {
            move |p: &str| {
                pairs
                    .iter()
                    .find(|(n, _)| *n == p)
                    .map(|(_, v)| v.to_string())
            }
        };
        let v2 = files(&[
            ("/proc/self/cgroup", "0::/job/step\n"),
            ("/sys/fs/cgroup/job/step/memory.max", "max\n"),
            ("/sys/fs/cgroup/job/memory.max", "4294967296\n"),
        ]);
        assert_eq!(memory_limit_from(16 * GB, &v2), 4 * GB);
        let v1 = files(&[
            (
                "/proc/self/cgroup",
                "5:cpu,cpuacct:/\n4:memory:/docker/abc\n",
            ),
            (
                "/sys/fs/cgroup/memory/docker/abc/memory.limit_in_bytes",
                "2147483648",
            ),
            (
                "/sys/fs/cgroup/memory/memory.limit_in_bytes",
                "9223372036854771712",
            ),
        ]);
        assert_eq!(memory_limit_from(16 * GB, &v1), 2 * GB);
        // A namespace that shows only its root, unlimited; physical memory is the limit.
        let hidden = files(&[
            ("/proc/self/cgroup", "0::/\n"),
            ("/sys/fs/cgroup/memory.max", "max"),
        ]);
        assert_eq!(memory_limit_from(16 * GB, &hidden), 16 * GB);
        // A limit above physical memory leaves physical memory.
        let loose = files(&[
            ("/proc/self/cgroup", "0::/\n"),
            ("/sys/fs/cgroup/memory.max", "68719476736"),
        ]);
        assert_eq!(memory_limit_from(16 * GB, &loose), 16 * GB);
        assert_eq!(memory_limit_from(16 * GB, &files(&[])), 16 * GB);
    }
}
