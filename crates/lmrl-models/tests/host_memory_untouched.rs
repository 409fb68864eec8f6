//! A program that applies no heap settings keeps glibc's own behaviour: a buffer above the
//! mmap threshold is a mapping of its own, outside the heap, and is returned to the kernel when
//! freed (the library changes the allocator only when asked).
mod maps;

#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn main() {
    // The settings that change nothing, applied as a program that opts out would.
    let applied = lmrl_models::HostMemory::SYSTEM.apply();
    assert!(
        !applied.retained && applied.huge_page_bytes == 0,
        "{applied:?}"
    );
    let buffer = vec![1u8; 256 << 20];
    let start = buffer.as_ptr() as usize;
    let holds = |(lo, hi): (usize, usize)| lo <= start && start < hi;
    assert!(
        !maps::heap_ranges().into_iter().any(holds),
        "buffer {start:#x} is heap memory: the allocator was changed"
    );
    drop(buffer);
    assert!(
        !maps::ranges(|_| true).into_iter().any(holds),
        "the freed buffer {start:#x} stayed mapped"
    );
    println!("host_memory_untouched: ok");
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn main() {}
