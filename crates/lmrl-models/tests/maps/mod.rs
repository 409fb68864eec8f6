//! Reading this process's memory map, for the heap-setting tests.
#![cfg(all(target_os = "linux", target_env = "gnu"))]
// Each test binary that includes this module uses part of it.
#![allow(dead_code)]

/// The address ranges of `/proc/self/maps` lines for which `keep` holds.
pub fn ranges(keep: impl Fn(&str) -> bool) -> Vec<(usize, usize)> {
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap_or_default();
    maps.lines()
        .filter(|l| keep(l))
        .filter_map(range_of)
        .collect()
}

/// The address ranges of the `[heap]` mappings (marking part of the heap splits it into
/// several).
pub fn heap_ranges() -> Vec<(usize, usize)> {
    ranges(|l| l.ends_with("[heap]"))
}

/// `lo-hi` at the start of a maps/smaps mapping line.
pub fn range_of(line: &str) -> Option<(usize, usize)> {
    let (range, _) = line.split_once(' ')?;
    let (lo, hi) = range.split_once('-')?;
    Some((
        usize::from_str_radix(lo, 16).ok()?,
        usize::from_str_radix(hi, 16).ok()?,
    ))
}
