//! Memory sizes on the command line, the machine's memory, and a budget that worker threads
//! share: each item reserves what it will take before taking it, and waits while the others'
//! reservations leave too little room.

use std::sync::{Condvar, Mutex};

/// A size on the command line that [`parse_size`] cannot read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SizeError {
    /// Not a whole number with an optional K/M/G/T suffix.
    #[error("`{text}` is not a size (e.g. 1M, 512K, 8)")]
    NotANumber { text: String },
    /// More bytes than 64 bits hold.
    #[error("`{text}` is not a size (e.g. 1M, 512K, 8)")]
    TooLarge { text: String },
}

impl error_class::Classify for SizeError {
    fn class(&self) -> error_class::Class {
        error_class::Class::Usage
    }
}

/// `1M`, `64M`, `512K`, `4G`, `8` (bytes; K/M/G/T are powers of 1024; `B`, `iB` accepted).
pub fn parse_size(s: &str) -> Result<u64, SizeError> {
    let t = s.trim().trim_end_matches(['B', 'b']).trim_end_matches('i');
    let (num, mult) = match t.char_indices().last() {
        Some((i, 'K' | 'k')) => (&t[..i], 1u64 << 10),
        Some((i, 'M' | 'm')) => (&t[..i], 1 << 20),
        Some((i, 'G' | 'g')) => (&t[..i], 1 << 30),
        Some((i, 'T' | 't')) => (&t[..i], 1 << 40),
        _ => (t, 1),
    };
    let text = || s.to_string();
    let n = num.trim().parse::<u64>().map_err(|e| match e.kind() {
        std::num::IntErrorKind::PosOverflow => SizeError::TooLarge { text: text() },
        _ => SizeError::NotANumber { text: text() },
    })?;
    n.checked_mul(mult)
        .ok_or_else(|| SizeError::TooLarge { text: text() })
}

/// The memory this process may use: the machine's (`MemTotal`), or its cgroup's limit where
/// that is lower (a container, a Slurm job). `None` where neither can be read.
pub fn available_to_us() -> Option<u64> {
    let total = std::fs::read_to_string("/proc/meminfo").ok().and_then(|m| {
        m.lines()
            .find_map(|l| l.strip_prefix("MemTotal:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .map(|kib| kib << 10)
    });
    let cgroup = [
        "/sys/fs/cgroup/memory.max",
        "/sys/fs/cgroup/memory/memory.limit_in_bytes",
    ]
    .iter()
    .find_map(|p| std::fs::read_to_string(p).ok()?.trim().parse::<u64>().ok());
    match (total, cgroup) {
        (Some(t), Some(c)) => Some(t.min(c)),
        (t, c) => t.or(c),
    }
}

/// A number of bytes that concurrent items may hold between them.
#[derive(Debug)]
pub struct MemoryBudget {
    limit: u64,
    /// Bytes held now, and the most ever held at once.
    used: Mutex<(u64, u64)>,
    freed: Condvar,
}

/// Bytes held until this is dropped.
#[derive(Debug)]
pub struct Reservation<'a> {
    budget: &'a MemoryBudget,
    bytes: u64,
}

impl MemoryBudget {
    pub fn new(limit: u64) -> Self {
        Self {
            limit,
            used: Mutex::new((0, 0)),
            freed: Condvar::new(),
        }
    }

    pub fn limit(&self) -> u64 {
        self.limit
    }

    /// Reserves `bytes`, waiting while the other reservations leave less room. An item larger
    /// than the whole budget waits until it is alone, then goes ahead: the budget bounds what
    /// items hold together; it cannot make one smaller. The wait ends as the others finish
    /// their items (each holds its reservation for one item, which every worker finishes, also
    /// after SIGINT).
    pub fn reserve(&self, bytes: u64) -> Reservation<'_> {
        let mut used = self.used.lock().unwrap_or_else(|e| e.into_inner());
        while used.0 > 0 && used.0.saturating_add(bytes) > self.limit {
            used = self.freed.wait(used).unwrap_or_else(|e| e.into_inner());
        }
        used.0 += bytes;
        used.1 = used.1.max(used.0);
        Reservation {
            budget: self,
            bytes,
        }
    }

    /// Bytes reserved now.
    pub fn used(&self) -> u64 {
        self.used.lock().unwrap_or_else(|e| e.into_inner()).0
    }

    /// The most bytes ever reserved at once.
    pub fn peak(&self) -> u64 {
        self.used.lock().unwrap_or_else(|e| e.into_inner()).1
    }
}

impl Drop for Reservation<'_> {
    fn drop(&mut self) {
        let mut used = self.budget.used.lock().unwrap_or_else(|e| e.into_inner());
        used.0 -= self.bytes;
        self.budget.freed.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_with_binary_suffixes() {
        assert_eq!(parse_size("8").unwrap(), 8);
        assert_eq!(parse_size("512K").unwrap(), 512 << 10);
        assert_eq!(parse_size("64M").unwrap(), 64 << 20);
        assert_eq!(parse_size("1GB").unwrap(), 1 << 30);
        assert_eq!(parse_size("2MiB").unwrap(), 2 << 20);
        assert_eq!(parse_size("3T").unwrap(), 3 << 40);
        assert!(parse_size("lots").is_err());
        assert!(parse_size("99999999999T").is_err());
    }

    #[test]
    fn a_bad_size_is_a_usage_error_of_its_kind_in_the_same_words() {
        use error_class::{Class, Classify};
        let e = parse_size("lots").unwrap_err();
        assert_eq!(
            e,
            SizeError::NotANumber {
                text: "lots".into()
            }
        );
        assert_eq!(e.to_string(), "`lots` is not a size (e.g. 1M, 512K, 8)");
        assert_eq!(e.class(), Class::Usage);
        let e = parse_size("99999999999T").unwrap_err();
        assert_eq!(
            e,
            SizeError::TooLarge {
                text: "99999999999T".into()
            }
        );
        assert_eq!(
            e.to_string(),
            "`99999999999T` is not a size (e.g. 1M, 512K, 8)"
        );
        // clap takes it as a value parser's error, with its text.
        let cmd = clap::Command::new("t")
            .arg(clap::Arg::new("size").long("size").value_parser(parse_size));
        let err = cmd
            .try_get_matches_from(["t", "--size", "lots"])
            .unwrap_err();
        assert!(
            err.to_string()
                .contains("`lots` is not a size (e.g. 1M, 512K, 8)"),
            "{err}"
        );
    }

    #[test]
    fn this_machine_has_some_memory() {
        assert!(available_to_us().is_some_and(|b| b > 1 << 20));
    }

    #[test]
    fn reservations_never_hold_more_than_the_budget_together() {
        // 6 threads × 20 items of 40-70 bytes in a budget of 100: one or two at once.
        let budget = MemoryBudget::new(100);
        std::thread::scope(|s| {
            for t in 0..6u64 {
                let budget = &budget;
                s.spawn(move || {
                    for i in 0..20u64 {
                        let _r = budget.reserve(40 + (t * 7 + i * 3) % 31);
                        std::thread::yield_now();
                    }
                });
            }
        });
        assert!((71..=100).contains(&budget.peak()), "{}", budget.peak());
        assert_eq!(budget.used(), 0);
    }

    #[test]
    fn an_item_larger_than_the_budget_runs_alone() {
        let budget = MemoryBudget::new(10);
        let big = budget.reserve(1000);
        let waiting = std::sync::atomic::AtomicBool::new(false);
        std::thread::scope(|s| {
            let waiter = s.spawn(|| {
                waiting.store(true, std::sync::atomic::Ordering::SeqCst);
                let _small = budget.reserve(1);
            });
            while !waiting.load(std::sync::atomic::Ordering::SeqCst) {
                std::thread::yield_now();
            }
            for _ in 0..100 {
                std::thread::yield_now();
            }
            drop(big);
            waiter.join().unwrap();
        });
        // Had the small one gone ahead beside the big one, 1001 bytes would have been held.
        assert_eq!(budget.peak(), 1000);
        assert_eq!(budget.used(), 0);
    }
}
