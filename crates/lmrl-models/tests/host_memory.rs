//! `HostMemory::apply` with freed memory kept and huge pages asked for, in a process of its
//! own (it must run before any other thread allocates): a large buffer allocated afterwards
//! lies in heap address space marked for transparent huge pages exactly when the kernel gives
//! them only on request. `host_memory_untouched` checks the other side: without the call the
//! allocator keeps its own behaviour.
use lmrl_models::{HostMemory, HugePageHeap};

mod maps;
#[cfg(all(target_os = "linux", target_env = "gnu"))]
use maps::{heap_ranges, range_of};

const SETTINGS: HostMemory = HostMemory {
    retain_freed: true,
    huge_pages: HugePageHeap::HalfOfLimit,
};

#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn main() {
    let applied = SETTINGS.apply();
    assert!(applied.retained, "glibc refused the heap settings");
    // Larger than what glibc keeps at the heap's top after a trim (`M_TOP_PAD`, 64 MiB).
    let buffer = vec![1u8; 256 << 20];
    // The heap's first huge page may be only partly inside the reservation (left unmarked):
    // look where the buffer ends.
    let address = buffer.as_ptr() as usize + buffer.len() - 1;
    let flags = vm_flags_of(address).expect("the buffer's mapping is in /proc/self/smaps");
    let read = |p: &str| std::fs::read_to_string(p).unwrap_or_default();
    let on_request = read("/sys/kernel/mm/transparent_hugepage/enabled").contains("[madvise]")
        && read("/proc/sys/vm/overcommit_memory").trim() != "2";
    let marked = flags.split_whitespace().any(|f| f == "hg");
    assert_eq!(applied.huge_page_bytes > 0, on_request, "{applied:?}");
    assert_eq!(
        marked, on_request,
        "buffer ending at {address:#x}: VmFlags `{flags}`, THP on request only: {on_request}"
    );
    // The buffer is heap memory (brk), not a mapping of its own: freed memory stays for reuse.
    let start = buffer.as_ptr() as usize;
    let heap = heap_ranges();
    let in_heap = |a: usize| heap.iter().any(|&(lo, hi)| lo <= a && a < hi);
    assert!(
        in_heap(start) && in_heap(address),
        "buffer {start:#x}..={address:#x} outside the heap {heap:x?}"
    );
    println!("host_memory: ok (huge pages requested: {marked})");
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn main() {
    assert!(!SETTINGS.apply().retained);
}

/// The `VmFlags` line of the `/proc/self/smaps` entry holding `address`.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn vm_flags_of(address: usize) -> Option<String> {
    let smaps = std::fs::read_to_string("/proc/self/smaps").ok()?;
    let mut inside = false;
    for line in smaps.lines() {
        if let Some((lo, hi)) = range_of(line) {
            inside = lo <= address && address < hi;
        } else if inside && let Some(flags) = line.strip_prefix("VmFlags:") {
            return Some(flags.trim().to_string());
        }
    }
    None
}
