//! Whether a move at a million attachments waits on the TLB: the process's heap moved onto
//! transparent huge pages in place, then the same moves timed again.
//!
//! A settled 1M state is about 146 MB of small allocations. On 4 KiB pages a move's 45 or so
//! missed cache lines fall on nearly as many pages, each a page walk (a two-level one in a
//! virtual machine); on 2 MiB pages the whole heap needs 75 TLB entries. If the walks were
//! what a move at 1M pays for, this would show it, without changing one allocation.
//!
//! Linux only (`MADV_COLLAPSE`, kernel 6.1 or later). The bench asks for it by name
//! (`ATTACH_DETACH_BENCH_CHECKS=huge_pages`): it changes the process's memory for whatever runs
//! after it.

/// What a collapse did: how many regions and bytes moved onto huge pages, and how much of
/// the system's anonymous memory is on huge pages after (from `/proc/meminfo`).
#[derive(Debug)]
#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
pub struct Collapsed {
    /// Regions `MADV_COLLAPSE` accepted.
    pub regions: usize,
    /// Their bytes, whole 2 MiB pages only.
    pub bytes: usize,
    /// Regions it refused (the kernel too old, no huge page free, THP off).
    pub refused: usize,
    /// Why it refused the last one.
    pub last_refusal: Option<std::io::Error>,
    /// `AnonHugePages` after, in KiB.
    pub anon_huge_kib: Option<u64>,
}

#[cfg(target_os = "linux")]
const HUGE_PAGE: usize = 2 << 20;

/// `madvise`'s advice to collapse a range into huge pages now (Linux 6.1, `mm/madvise.c`): a
/// kernel constant, not in every libc's bindings.
#[cfg(target_os = "linux")]
const MADV_COLLAPSE: libc::c_int = 25;

/// Asks the kernel to back every private, writable, anonymous mapping of this process (the
/// heap and malloc's large blocks) with huge pages, now.
#[cfg(target_os = "linux")]
pub fn collapse_heap() -> std::io::Result<Collapsed> {
    let maps = std::fs::read_to_string("/proc/self/maps")?;
    let mut done = Collapsed {
        regions: 0,
        bytes: 0,
        refused: 0,
        last_refusal: None,
        anon_huge_kib: None,
    };
    for (start, end) in maps.lines().filter_map(anonymous_writable) {
        // Only whole huge pages inside the mapping can be collapsed.
        let start = start.next_multiple_of(HUGE_PAGE);
        let end = end - end % HUGE_PAGE;
        if end <= start {
            continue;
        }
        let (addr, len) = (start as *mut libc::c_void, end - start);
        // SAFETY: the range lies inside one of this process's own mappings, and both calls
        // only advise the kernel how to back it: no byte of it changes.
        let ok = unsafe {
            libc::madvise(addr, len, libc::MADV_HUGEPAGE) == 0
                && libc::madvise(addr, len, MADV_COLLAPSE) == 0
        };
        if ok {
            done.regions += 1;
            done.bytes += len;
        } else {
            done.refused += 1;
            done.last_refusal = Some(std::io::Error::last_os_error());
        }
    }
    done.anon_huge_kib = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|info| {
            let line = info.lines().find(|l| l.starts_with("AnonHugePages:"))?;
            line.split_whitespace().nth(1)?.parse().ok()
        });
    Ok(done)
}

/// Elsewhere there is nothing to ask.
#[cfg(not(target_os = "linux"))]
pub fn collapse_heap() -> std::io::Result<Collapsed> {
    Err(std::io::Error::other(
        "huge pages are asked for on Linux only",
    ))
}

/// The address range of a `/proc/self/maps` line if it is the heap or an anonymous mapping,
/// private and writable.
#[cfg(target_os = "linux")]
fn anonymous_writable(line: &str) -> Option<(usize, usize)> {
    let mut fields = line.split_whitespace();
    let range = fields.next()?;
    let perms = fields.next()?;
    // Offset, device and inode, then the path: none for an anonymous mapping.
    let path = fields.nth(3);
    if !perms.starts_with("rw") || !perms.ends_with('p') || path.is_some_and(|p| p != "[heap]") {
        return None;
    }
    let (start, end) = range.split_once('-')?;
    Some((
        usize::from_str_radix(start, 16).ok()?,
        usize::from_str_radix(end, 16).ok()?,
    ))
}
